"""Tokenized documents -> training examples, by the rules of the BERT paper (Devlin et al. 2018, sections 3.1 and A.2).

A document is a list of sentences, each a list of token ids. All randomness comes from the `rng`
passed in, so a block of documents and a seed always give the same examples (exact resume
rebuilds a block instead of storing it).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Optional

import numpy as np

from bert_ds.config import PAIR_OBJECTIVES

Document = list[list[int]]  # sentences of token ids


@dataclass
class Example:
    """One sequence before [CLS]/[SEP]/padding are added and masking is applied."""

    tokens_a: list[int]
    tokens_b: Optional[list[int]]
    """Segment B (NSP objective only)."""
    is_random_next: int
    """1 if B is a random segment of another document, 0 if B follows A; -1 without NSP."""
    uid: int = 0
    """64-bit id of this occurrence in the stream (set by the stream; logs and dynamic masking)."""


def _concat(sentences: list[list[int]]) -> list[int]:
    return list(chain.from_iterable(sentences))


def truncate_pair(tokens_a: list[int], tokens_b: list[int], max_tokens: int, rng: np.random.Generator) -> None:
    """Trim the longer segment, one token at a time from a random end, until the pair fits.

    Tokens are removed in runs (a binomial split between the two ends), which draws from the same
    distribution as the paper's token-by-token loop but costs a few steps, not hundreds.
    """
    while len(tokens_a) + len(tokens_b) > max_tokens:
        longer, shorter = (tokens_a, tokens_b) if len(tokens_a) > len(tokens_b) else (tokens_b, tokens_a)
        excess = len(tokens_a) + len(tokens_b) - max_tokens
        # Remove until it fits or until the longer one is no longer longer (then switch sides).
        run = min(excess, len(longer) - len(shorter)) or 1
        from_front = int(rng.binomial(run, 0.5))
        del longer[:from_front]
        del longer[len(longer) - (run - from_front) :]


def nsp_examples(
    documents: list[Document], max_seq_length: int, short_seq_prob: float, rng: np.random.Generator
) -> list[Example]:
    """[CLS] A [SEP] B [SEP] examples with is_random_next drawn 50/50 for every pair."""
    max_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
    examples: list[Example] = []
    for doc_index in range(len(documents)):
        _document_nsp_examples(documents, doc_index, max_tokens, short_seq_prob, rng, examples)
    return examples


def _document_nsp_examples(documents, doc_index, max_tokens, short_seq_prob, rng, out) -> None:
    document = documents[doc_index]
    target = _target_length(max_tokens, short_seq_prob, rng)
    chunk: list[list[int]] = []
    length, i = 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            is_random_next = len(documents) > 1 and rng.random() < 0.5
            if not is_random_next and len(chunk) == 1 and i + 1 < len(document):
                i += 1  # a true next segment needs a second sentence: take the following one
                chunk.append(document[i])
            tokens_a, tokens_b = None, None
            if is_random_next:
                a_end = int(rng.integers(1, len(chunk))) if len(chunk) > 1 else 1
                tokens_a = _concat(chunk[:a_end])
                tokens_b = _random_segment(documents, doc_index, max(1, target - len(tokens_a)), rng)
                i -= len(chunk) - a_end  # the unused sentences start the next chunk
            elif len(chunk) > 1:
                a_end = int(rng.integers(1, len(chunk)))
                tokens_a, tokens_b = _concat(chunk[:a_end]), _concat(chunk[a_end:])
            elif len(chunk[0]) > 1:
                # A one-sentence remainder of a document: cut it in two to keep NSP at 50/50.
                cut = int(rng.integers(1, len(chunk[0])))
                tokens_a, tokens_b = list(chunk[0][:cut]), list(chunk[0][cut:])
            if tokens_a is not None:
                truncate_pair(tokens_a, tokens_b, max_tokens, rng)
                if tokens_a and tokens_b:
                    out.append(Example(tokens_a, tokens_b, int(is_random_next)))
            chunk, length = [], 0
            target = _target_length(max_tokens, short_seq_prob, rng)
        i += 1


def _target_length(max_tokens: int, short_seq_prob: float, rng: np.random.Generator) -> int:
    """Usually fill the sequence; with probability short_seq_prob aim shorter, so the model also
    sees the short inputs of fine-tuning. Drawn per pair (Google's script draws once per document,
    which makes a whole book short or long at once)."""
    if rng.random() < short_seq_prob:
        return int(rng.integers(2, max_tokens + 1))
    return max_tokens


def _random_segment(documents, doc_index: int, target: int, rng: np.random.Generator) -> list[int]:
    """Sentences from a random start in another document, until `target` tokens."""
    other = int(rng.integers(len(documents) - 1))
    other += other >= doc_index
    sentences = documents[other]
    tokens: list[int] = []
    for sentence in sentences[int(rng.integers(len(sentences))) :]:
        tokens.extend(sentence)
        if len(tokens) >= target:
            break
    return tokens


def full_segment_examples(documents: list[Document], max_seq_length: int) -> list[Example]:
    """[CLS] X [SEP] examples: each document packed into contiguous, full-length segments.

    Used by "mlm_full_sentences" (RoBERTa) and "ltr" (left-to-right). A sentence longer than a
    segment is split across segments; segments never cross documents.
    """
    max_tokens = max_seq_length - 2
    examples: list[Example] = []
    for document in documents:
        segment: list[int] = []
        for sentence in document:
            if segment and len(segment) + len(sentence) > max_tokens:
                examples.append(Example(segment, None, -1))
                segment = []
            segment.extend(sentence)
            while len(segment) > max_tokens:
                examples.append(Example(segment[:max_tokens], None, -1))
                segment = segment[max_tokens:]
        if segment:
            examples.append(Example(segment, None, -1))
    return examples


def build_examples(
    documents: list[Document], objective: str, max_seq_length: int, short_seq_prob: float, rng: np.random.Generator
) -> list[Example]:
    """Examples for `objective` (config.OBJECTIVES) from one block of documents: NSP's sentence
    pairs for "mlm_nsp" and "mlm" (No NSP keeps the pair inputs and drops only the loss), full
    segments for "mlm_full_sentences" and "ltr"."""
    if objective in PAIR_OBJECTIVES:
        return nsp_examples(documents, max_seq_length, short_seq_prob, rng)
    return full_segment_examples(documents, max_seq_length)
