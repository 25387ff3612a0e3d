"""Examples -> padded, masked batches: the paper's 15% / 80-10-10 corruption, vectorised.

Every random draw is a counter-based hash of (example key, position, purpose), so an example's
mask depends on nothing but its key: static masking keys an example by its content (the same
example always gets the same mask), dynamic masking by its occurrence in the stream (new masks
every epoch). The whole batch is drawn with a handful of numpy operations.

Two masks, kept apart (docs/architecture.md, invariants): `loss_mask` (positions whose original token
is predicted: all selected positions, unchanged ones included) and `attention_mask` (real tokens
vs padding). Unselected positions are ordinary inputs and stay in the computation graph.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from bert_ds.data.pairs import Example

IGNORE_INDEX = -100  # label outside the loss, as in PyTorch / Hugging Face

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_SELECT, _ACTION, _REPLACEMENT = 1, 2, 3  # independent draws per position


def _hash_draws(keys: np.ndarray, length: int, purpose: int) -> np.ndarray:
    """[b, length] uint64 pseudo-random words from splitmix64 of (key, position, purpose)."""
    positions = np.arange(length, dtype=np.uint64) + np.uint64(purpose * 1_000_003)
    with np.errstate(over="ignore"):
        z = keys[:, None] + (positions[None, :] + np.uint64(1)) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _uniform(keys: np.ndarray, length: int, purpose: int) -> np.ndarray:
    """[b, length] floats in [0, 1)."""
    return (_hash_draws(keys, length, purpose) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def content_key(example: Example, seed: int) -> int:
    """64-bit key of an example's tokens and segment split (static masking)."""
    digest = hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    digest.update(np.asarray(example.tokens_a, dtype=np.int32).tobytes())
    if example.tokens_b is not None:
        digest.update(b"|")
        digest.update(np.asarray(example.tokens_b, dtype=np.int32).tobytes())
    return int.from_bytes(digest.digest(), "little")


@dataclass(frozen=True)
class SpecialIds:
    """The ids masking needs from a tokenizer."""

    pad_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    is_special: np.ndarray  # bool [vocab]: never selected, never a random replacement
    replacement_ids: np.ndarray  # int64: the ids a selected token may be replaced with

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialIds":
        return cls(
            tokenizer.pad_id,
            tokenizer.cls_id,
            tokenizer.sep_id,
            tokenizer.mask_id,
            np.asarray(tokenizer.is_special, dtype=bool),
            np.asarray(tokenizer.replacement_ids, dtype=np.int64),
        )


def assemble(examples: list[Example], ids: SpecialIds, seq_length: int) -> dict[str, np.ndarray]:
    """[CLS] A [SEP] (B [SEP]) + padding to `seq_length`: input_ids, token_type_ids, attention_mask."""
    batch = len(examples)
    input_ids = np.full((batch, seq_length), ids.pad_id, dtype=np.int64)
    token_type_ids = np.zeros((batch, seq_length), dtype=np.int64)
    attention_mask = np.zeros((batch, seq_length), dtype=np.int64)
    for row, example in enumerate(examples):
        a = example.tokens_a
        pieces = [ids.cls_id, *a, ids.sep_id]
        if example.tokens_b is not None:
            pieces += [*example.tokens_b, ids.sep_id]
            token_type_ids[row, len(a) + 2 : len(pieces)] = 1
        if len(pieces) > seq_length:
            raise ValueError(f"example of {len(pieces)} tokens exceeds seq_length {seq_length}")
        input_ids[row, : len(pieces)] = pieces
        attention_mask[row, : len(pieces)] = 1
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)


def mask_tokens(
    input_ids: np.ndarray, keys: np.ndarray, ids: SpecialIds, mask_prob: float = 0.15
) -> dict[str, np.ndarray]:
    """Select `mask_prob` of the non-special tokens; of those 80% -> [MASK], 10% -> a random
    non-special token, 10% unchanged. Returns the corrupted input_ids, labels (original token at
    selected positions, IGNORE_INDEX elsewhere) and loss_mask (bool, exactly the selected positions).
    """
    batch, length = input_ids.shape
    keys = np.asarray(keys, dtype=np.uint64).reshape(batch)
    candidates = ~ids.is_special[input_ids]  # padding and [CLS]/[SEP] are special
    selected = candidates & (_uniform(keys, length, _SELECT) < mask_prob)
    action = _uniform(keys, length, _ACTION)
    to_mask = selected & (action < 0.8)
    to_random = selected & (action >= 0.8) & (action < 0.9)
    replacement = ids.replacement_ids[
        (_hash_draws(keys, length, _REPLACEMENT) % np.uint64(len(ids.replacement_ids))).astype(np.int64)
    ]
    corrupted = np.where(to_mask, ids.mask_id, np.where(to_random, replacement, input_ids))
    labels = np.where(selected, input_ids, IGNORE_INDEX)
    return dict(input_ids=corrupted, labels=labels, loss_mask=selected)


def next_token_targets(input_ids: np.ndarray, attention_mask: np.ndarray) -> dict[str, np.ndarray]:
    """Left-to-right targets: position i predicts token i+1 (no corruption, no NSP)."""
    labels = np.full_like(input_ids, IGNORE_INDEX)
    labels[:, :-1] = input_ids[:, 1:]
    loss_mask = np.zeros(input_ids.shape, dtype=bool)
    loss_mask[:, :-1] = (attention_mask[:, 1:] == 1)
    labels[~loss_mask] = IGNORE_INDEX
    return dict(input_ids=input_ids, labels=labels, loss_mask=loss_mask)


def collate(
    examples: list[Example],
    ids: SpecialIds,
    seq_length: int,
    objective: str,
    seed: int,
    dynamic_masking: bool,
    mask_prob: float = 0.15,
) -> dict[str, np.ndarray]:
    """A model-ready batch (numpy) for `objective` (config.OBJECTIVES).

    Keys: input_ids, token_type_ids, attention_mask, loss_mask, labels, example_uid, and
    next_sentence_label (0 = B follows A, 1 = B is random) for "mlm_nsp".
    """
    batch = assemble(examples, ids, seq_length)
    if objective == "ltr":
        batch.update(next_token_targets(batch["input_ids"], batch["attention_mask"]))
    else:
        if dynamic_masking:
            keys = np.array([e.uid for e in examples], dtype=np.uint64)
        else:
            keys = np.array([content_key(e, seed) for e in examples], dtype=np.uint64)
        batch.update(mask_tokens(batch["input_ids"], keys, ids, mask_prob))
    if objective == "mlm_nsp":
        batch["next_sentence_label"] = np.array([e.is_random_next for e in examples], dtype=np.int64)
    batch["example_uid"] = np.array([e.uid for e in examples], dtype=np.uint64).view(np.int64)
    return batch
