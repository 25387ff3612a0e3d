"""Features -> padded tensors, and model outputs -> one numpy output per feature.

A feature is a dict: `input_ids` and `token_type_ids` (lists of ints; for multiple choice, one
list per choice) and its target: `label` (int, or float for regression), `start_position` /
`end_position` (span extraction), or `tags` (tagging: one int per token, IGNORE_INDEX where a
token is not scored). Batches are padded to their longest sequence, not to the
maximum length: no work is spent on padding that no sequence needs.
"""

from __future__ import annotations

import numpy as np
import torch

from bert_ds.config import POOLED_KINDS
from bert_ds.model.heads import IGNORE_INDEX


def _pad(rows: list[list[int]], length: int, value: int) -> torch.Tensor:
    return torch.tensor([row + [value] * (length - len(row)) for row in rows], dtype=torch.long)


def collate(features: list[dict], kind: str, pad_id: int) -> dict[str, torch.Tensor]:
    """input_ids, token_type_ids, attention_mask: [b, s] (multiple choice: [b, choices, s]), plus
    labels [b] (tagging: [b, s]) or start_positions/end_positions [b] when the features have targets."""
    if kind == "multiple_choice":
        choices = len(features[0]["input_ids"])
        flat = [dict(input_ids=ids, token_type_ids=types) for f in features for ids, types in zip(f["input_ids"], f["token_type_ids"])]
        batch = collate(flat, "classification", pad_id)
        batch = {k: v.view(len(features), choices, -1) for k, v in batch.items()}
    else:
        length = max(len(f["input_ids"]) for f in features)
        batch = dict(
            input_ids=_pad([f["input_ids"] for f in features], length, pad_id),
            token_type_ids=_pad([f["token_type_ids"] for f in features], length, 0),
            attention_mask=_pad([[1] * len(f["input_ids"]) for f in features], length, 0),
        )
    if features[0].get("tags") is not None:
        batch["labels"] = _pad([f["tags"] for f in features], batch["input_ids"].shape[1], IGNORE_INDEX)
    if features[0].get("label") is not None:
        dtype = torch.float32 if isinstance(features[0]["label"], float) else torch.long
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=dtype)
    if features[0].get("start_position") is not None:
        batch["start_positions"] = torch.tensor([f["start_position"] for f in features], dtype=torch.long)
        batch["end_positions"] = torch.tensor([f["end_position"] for f in features], dtype=torch.long)
    return batch


def outputs_per_feature(kind: str, logits, attention_mask: torch.Tensor) -> list:
    """Classification: [num_labels] per feature; multiple choice: [choices]; span: (start, end)
    logits over the feature's own tokens; tagging: [tokens, num_labels] (padding cut off)."""
    if kind in POOLED_KINDS:
        return list(logits.float().cpu().numpy())
    lengths = attention_mask.sum(dim=-1).tolist()
    if kind == "tagging":
        values = logits.float().cpu().numpy()
        return [values[i, :n].copy() for i, n in enumerate(lengths)]
    start, end = (t.float().cpu().numpy() for t in logits)
    return [(start[i, :n].copy(), end[i, :n].copy()) for i, n in enumerate(lengths)]


def pair_feature(tokenizer, text_a: str, text_b, max_length: int) -> dict:
    """[CLS] A [SEP] (B [SEP]) with segment ids 0/1, the longer side trimmed first to fit (BERT)."""
    a = tokenizer.encode_batch([text_a])[0] if text_a else []
    b = tokenizer.encode_batch([text_b])[0] if text_b else []
    room = max_length - (3 if text_b is not None else 2)
    while len(a) + len(b) > room:
        if len(a) >= len(b):
            a.pop()
        else:
            b.pop()
    ids = [tokenizer.cls_id] + a + [tokenizer.sep_id]
    types = [0] * len(ids)
    if text_b is not None:
        ids += b + [tokenizer.sep_id]
        types += [1] * (len(b) + 1)
    return dict(input_ids=ids, token_type_ids=types)


def softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - values.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)
