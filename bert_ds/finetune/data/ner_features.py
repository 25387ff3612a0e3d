"""Tagged sentences -> token features labelled at each word's first sub-token, and back.

As in the paper (§5.3, Figure 4d), a word's tag is predicted from the final state of its first
sub-token; its other sub-tokens, [CLS] and [SEP] carry IGNORE_INDEX and are not scored. Words
are encoded one by one (the WordPiece or sentencepiece pieces of the word alone), all distinct
words of a split in one bulk call. A sentence longer than `max_length - 2` sub-tokens becomes
several windows cut between words (a single word longer than that keeps its first pieces), so
every word is tagged exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bert_ds.finetune.data.conll import TaggedSentence
from bert_ds.model.heads import IGNORE_INDEX


@dataclass
class WordWindow:
    """Where one feature's words sit: sentence index, first word, and the token position of each
    of its words' first sub-token."""

    sentence: int
    first_word: int
    positions: list[int]


def tagging_features(sentences: list[TaggedSentence], tokenizer, label_ids: dict[str, int],
                     max_length: int) -> tuple[list[dict], list[WordWindow]]:
    """(features for batches.collate, their WordWindows): `tags` where the sentences have them."""
    distinct = list(dict.fromkeys(word for sentence in sentences for word in sentence.words))
    pieces = dict(zip(distinct, tokenizer.encode_batch(distinct)))
    room = max_length - 2
    features, windows = [], []

    def close(index: int, first_word: int, ids: list[int], tags: list[int], positions: list[int], tagged: bool) -> None:
        feature = dict(input_ids=[tokenizer.cls_id] + ids + [tokenizer.sep_id], token_type_ids=[0] * (len(ids) + 2))
        if tagged:
            feature["tags"] = [IGNORE_INDEX] + tags + [IGNORE_INDEX]
        features.append(feature)
        windows.append(WordWindow(index, first_word, positions))

    for index, sentence in enumerate(sentences):
        tagged = sentence.tags is not None
        ids: list[int] = []
        tags: list[int] = []
        positions: list[int] = []
        first_word = 0
        for w, word in enumerate(sentence.words):
            word_ids = list(pieces[word])[:room] or [tokenizer.unk_id]  # a word of no pieces is still tagged
            if ids and len(ids) + len(word_ids) > room:
                close(index, first_word, ids, tags, positions, tagged)
                ids, tags, positions, first_word = [], [], [], w
            positions.append(len(ids) + 1)  # +1: [CLS]
            if tagged:
                tags += [label_ids[sentence.tags[w]]] + [IGNORE_INDEX] * (len(word_ids) - 1)
            ids += word_ids
        close(index, first_word, ids, tags, positions, tagged)
    return features, windows


def word_tags(sentences: list[TaggedSentence], windows: list[WordWindow], outputs: list,
              labels: tuple[str, ...]) -> list[list[str]]:
    """Each sentence's predicted tags from the per-feature logits [tokens, num_labels]: the argmax
    at every word's first sub-token."""
    predicted: list[list[str]] = [[""] * len(s.words) for s in sentences]
    for window, logits in zip(windows, outputs):
        choices = np.asarray(logits)[window.positions].argmax(-1)
        for offset, choice in enumerate(choices):
            predicted[window.sentence][window.first_word + offset] = labels[int(choice)]
    return predicted


def conll_lines(sentences: list[TaggedSentence], predicted: list[list[str]]) -> str:
    """CoNLL output as conlleval reads it: `word gold predicted` per token (`word predicted`
    without gold tags), a blank line after each sentence."""
    lines = []
    for sentence, tags in zip(sentences, predicted):
        gold = sentence.tags or [None] * len(tags)
        lines += [" ".join(x for x in (word, g, p) if x is not None) for word, g, p in zip(sentence.words, gold, tags)]
        lines.append("")
    return "\n".join(lines) + "\n"
