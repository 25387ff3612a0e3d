"""SQuAD span extraction: BERT's sliding-window features and the mapping of start/end logits
back to answer text.

Features follow the original BERT recipe: [CLS] query [SEP] window [SEP] with the query cut to
`max_query_length` tokens and the context cut into windows whose starts are `doc_stride`
tokens apart. Our tokenizers give no character offsets, so, as BERT did, the context is split
on whitespace into words and each word is tokenized on its own; each token then gets the
character span of its piece inside its word (or of the whole word when the pieces cannot be
matched to the word's text), and a predicted token span maps back to the original context text
between the first token's start and the last token's end.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from bert_ds.data.tokenizer.load import SPECIAL_TOKENS
from bert_ds.finetune.data.squad import SquadExample

Span = tuple[int, int]  # [start, end) character offsets into the context
UNK_TOKEN = SPECIAL_TOKENS[1]


@dataclass(frozen=True)
class SquadFeature:
    """One window of one example, unpadded (the collator pads to the batch)."""

    example_index: int
    """Index of the example in the list the features were built from."""
    input_ids: list[int]
    """[CLS] query [SEP] window [SEP]."""
    token_type_ids: list[int]
    """0 for [CLS] query [SEP], 1 for window [SEP]."""
    token_spans: list[Optional[Span]]
    """Context character span of each window token; None for [CLS], query and [SEP] tokens."""
    token_is_max_context: list[bool]
    """True where this window gives the token its most context (predictions start only there)."""
    start_position: int
    end_position: int
    """Answer token positions (first answer); 0, 0 (the [CLS] token) when this window does not
    hold the whole answer or the question is impossible."""


@functools.lru_cache(maxsize=None)
def _fold_char(char: str) -> str:
    base = "".join(c for c in unicodedata.normalize("NFD", char) if not unicodedata.combining(c)).lower()
    return base if len(base) == 1 else "\0"


def _fold(text: str) -> str:
    """Lowercase and accent-strip character by character, keeping the length (a character that
    would change length becomes NUL), so positions in the result are positions in `text`: the
    comparison then tolerates uncased and accent-stripping tokenizers."""
    return "".join(map(_fold_char, text))


def piece_spans(word: str, pieces: Sequence[str]) -> Optional[list[Span]]:
    """Character span of each piece (WordPiece "##x" or sentencepiece "▁x") inside `word`, or
    None when the pieces cannot all be found, in order, in the word's text. An [UNK] piece
    covers the characters between its neighbours' matches."""
    folded, position, spans = _fold(word), 0, []
    unknown: Optional[int] = None  # index of an [UNK] piece waiting for the next match
    for piece in pieces:
        if piece == UNK_TOKEN:
            unknown = len(spans)
            spans.append((position, position))
            continue
        text = _fold(piece[2:] if piece.startswith("##") else piece.lstrip("\u2581"))
        found = folded.find(text, position) if text else position
        if found < 0:
            return None
        if unknown is not None:
            spans[unknown], unknown = (spans[unknown][0], found), None
        spans.append((found, found + len(text)))
        position = found + len(text)
    if unknown is not None:
        spans[unknown] = (spans[unknown][0], len(word))
    return spans


def context_tokens(tokenizer, context: str) -> tuple[list[int], list[Span]]:
    """Token ids of `context` and each token's character span in it (see the module docstring)."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", context)]
    ids_per_word = tokenizer.encode_batch([context[s:e] for s, e in words])
    ids: list[int] = []
    spans: list[Span] = []
    for (start, end), word_ids in zip(words, ids_per_word):
        inner = piece_spans(context[start:end], tokenizer.ids_to_tokens(word_ids))
        inner = inner or [(0, end - start)] * len(word_ids)  # unmatched pieces: the whole word each
        ids += word_ids
        spans += [(start + a, start + b) for a, b in inner]
    return ids, spans


def window_starts(num_tokens: int, room: int, doc_stride: int) -> list[Span]:
    """(first token, length) of each window: windows of at most `room` tokens, starting
    `doc_stride` tokens apart, the last one reaching the end of the context."""
    windows, start = [], 0
    while True:
        length = min(num_tokens - start, room)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, doc_stride)


def max_context_window(windows: Sequence[Span], token: int) -> int:
    """Index of the window in which `token` has the most context: the largest
    min(tokens left, tokens right) + 0.01 * window length (the first such window on ties)."""
    best, best_score = -1, -1.0
    for index, (start, length) in enumerate(windows):
        if start <= token < start + length:
            score = min(token - start, start + length - 1 - token) + 0.01 * length
            if score > best_score:
                best, best_score = index, score
    return best


def build_squad_features(
    examples: Sequence[SquadExample],
    tokenizer,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
) -> list[SquadFeature]:
    """The windows of every example, in example order (see SquadFeature for the contract)."""
    features: list[SquadFeature] = []
    by_context: dict[str, tuple[list[int], list[Span]]] = {}  # ~5 questions share each paragraph
    queries = tokenizer.encode_batch([example.question for example in examples])
    for index, (example, query) in enumerate(zip(examples, queries)):
        query = query[:max_query_length]
        room = max_seq_length - len(query) - 3  # [CLS], [SEP], [SEP]
        if room <= 0:
            raise ValueError(f"max_seq_length {max_seq_length} leaves no room after {len(query)} query tokens.")
        if example.context not in by_context:
            by_context[example.context] = context_tokens(tokenizer, example.context)
        doc_ids, doc_spans = by_context[example.context]
        answer = _answer_tokens(example, doc_spans)
        windows = window_starts(len(doc_ids), room, doc_stride)
        prefix = len(query) + 2
        for w, (start, length) in enumerate(windows):
            inside = answer is not None and start <= answer[0] and answer[1] < start + length
            features.append(
                SquadFeature(
                    example_index=index,
                    input_ids=[tokenizer.cls_id, *query, tokenizer.sep_id]
                    + doc_ids[start : start + length]
                    + [tokenizer.sep_id],
                    token_type_ids=[0] * prefix + [1] * (length + 1),
                    token_spans=[None] * prefix + doc_spans[start : start + length] + [None],
                    token_is_max_context=[False] * prefix
                    + [max_context_window(windows, start + j) == w for j in range(length)]
                    + [False],
                    start_position=answer[0] - start + prefix if inside else 0,
                    end_position=answer[1] - start + prefix if inside else 0,
                )
            )
    return features


def _answer_tokens(example: SquadExample, spans: Sequence[Span]) -> Optional[tuple[int, int]]:
    """First and last context token overlapping the first answer's characters, or None."""
    if example.is_impossible or not example.answer_texts:
        return None
    begin = example.answer_starts[0]
    end = begin + len(example.answer_texts[0])
    hit = [i for i, (s, e) in enumerate(spans) if s < end and e > begin]
    return (hit[0], hit[-1]) if hit else None


# --- predictions ------------------------------------------------------------------------------


@dataclass
class SquadPredictions:
    """What `postprocess` returns, keyed by question id."""

    answers: dict[str, str]
    """The predicted answer text; "" means "no answer" (v2.0)."""
    null_odds: dict[str, float]
    """null score - best span score (v2.0): the no-answer scores for the threshold search."""
    nbest: dict[str, list[dict]]
    """Best candidates, best first: {"text", "start_logit", "end_logit", "probability"}."""


def postprocess(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    start_logits: Sequence[Sequence[float]],
    end_logits: Sequence[Sequence[float]],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_threshold: float = 0.0,
) -> SquadPredictions:
    """Per-window start/end logits (feature i's logits cover at least its `input_ids`; padding
    beyond is ignored) -> answer text per question.

    A span (s, e) is a candidate when both ends are context tokens, s <= e, it is at most
    `max_answer_length` tokens long and s has its max context in that window; only the
    `n_best_size` best starts and ends of each window are paired. Candidates are ranked by
    start + end logit, distinct texts kept. v2.0: the null score is the smallest [CLS] start+end
    score over the question's windows; the answer is "" when null score - best span score
    exceeds `null_threshold`, and a "" entry joins the n-best list."""
    grouped: dict[int, list[int]] = {}
    for i, feature in enumerate(features):
        grouped.setdefault(feature.example_index, []).append(i)
    result = SquadPredictions({}, {}, {})
    for example_index, feature_ids in grouped.items():
        example = examples[example_index]
        candidates: list[tuple[float, float, float, Span]] = []
        null = (np.inf, 0.0, 0.0)
        for i in feature_ids:
            feature = features[i]
            n = len(feature.input_ids)
            starts = np.asarray(start_logits[i], dtype=np.float64)[:n]
            ends = np.asarray(end_logits[i], dtype=np.float64)[:n]
            if starts[0] + ends[0] < null[0]:
                null = (starts[0] + ends[0], starts[0], ends[0])
            best_starts = np.argsort(-starts, kind="stable")[:n_best_size]
            best_ends = np.argsort(-ends, kind="stable")[:n_best_size]
            spans = feature.token_spans
            for s in best_starts:
                if spans[s] is None or not feature.token_is_max_context[s]:
                    continue
                for e in best_ends:
                    if spans[e] is not None and s <= e < s + max_answer_length:
                        candidates.append((starts[s] + ends[e], starts[s], ends[e], (spans[s][0], spans[e][1])))
        candidates.sort(key=lambda c: -c[0])
        nbest, seen = [], set()
        for _, start_logit, end_logit, (begin, end) in candidates:
            text = example.context[begin:end]
            if text and text not in seen:  # a lone sentencepiece "▁" spans no character: no answer text
                seen.add(text)
                nbest.append({"text": text, "start_logit": float(start_logit), "end_logit": float(end_logit)})
            if len(nbest) == n_best_size:
                break
        best_span = nbest[0] if nbest else None
        if version_2 or not nbest:
            nbest.append({"text": "", "start_logit": float(null[1]), "end_logit": float(null[2])})
            nbest.sort(key=lambda c: -(c["start_logit"] + c["end_logit"]))
        scores = np.array([c["start_logit"] + c["end_logit"] for c in nbest])
        probabilities = np.exp(scores - scores.max())
        for entry, probability in zip(nbest, probabilities / probabilities.sum()):
            entry["probability"] = float(probability)
        qid = example.qid
        result.nbest[qid] = nbest
        if best_span is None:
            result.null_odds[qid], result.answers[qid] = np.inf, ""
            continue
        result.null_odds[qid] = float(null[0] - best_span["start_logit"] - best_span["end_logit"])
        answer_is_null = version_2 and result.null_odds[qid] > null_threshold
        result.answers[qid] = "" if answer_is_null else best_span["text"]
    return result
