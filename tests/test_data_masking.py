"""The paper's 15% / 80-10-10 corruption, measured over > 100k real tokens."""

import numpy as np
import pytest

from bert_ds.data.masking import IGNORE_INDEX, SpecialIds, assemble, collate, mask_tokens
from bert_ds.data.pairs import Example, full_segment_examples, nsp_examples


@pytest.fixture(scope="module")
def masked(sample_tokenizer, sample_documents):
    ids = SpecialIds.from_tokenizer(sample_tokenizer)
    examples = nsp_examples(sample_documents, 128, 0.1, np.random.default_rng(0))
    batch = assemble(examples, ids, 128)
    keys = np.arange(len(examples), dtype=np.uint64) * np.uint64(7919) + np.uint64(11)
    return ids, batch, mask_tokens(batch["input_ids"], keys, ids)


def test_selects_fifteen_percent_of_real_tokens(masked):
    ids, batch, out = masked
    candidates = ~ids.is_special[batch["input_ids"]]
    assert candidates.sum() >= 100_000
    fraction = out["loss_mask"].sum() / candidates.sum()
    assert abs(fraction - 0.15) <= 0.003, fraction


def test_eighty_ten_ten_within_the_selection(masked):
    ids, batch, out = masked
    selected = out["loss_mask"]
    original, corrupted = batch["input_ids"][selected], out["input_ids"][selected]
    masked_share = np.mean(corrupted == ids.mask_id)
    unchanged_share = np.mean(corrupted == original)
    random_share = 1.0 - masked_share - unchanged_share
    assert abs(masked_share - 0.8) <= 0.01, masked_share
    assert abs(random_share - 0.1) <= 0.01, random_share
    assert abs(unchanged_share - 0.1) <= 0.01, unchanged_share
    replaced = corrupted[(corrupted != ids.mask_id) & (corrupted != original)]
    assert not ids.is_special[replaced].any(), "a random replacement was a special token"


def test_special_tokens_and_padding_are_never_selected(masked):
    ids, batch, out = masked
    special = ids.is_special[batch["input_ids"]]
    assert special.any() and (batch["attention_mask"] == 0).any()
    assert not (out["loss_mask"] & special).any()
    assert not (out["loss_mask"] & (batch["attention_mask"] == 0)).any()
    unselected = ~out["loss_mask"]
    assert np.array_equal(out["input_ids"][unselected], batch["input_ids"][unselected])


def test_labels_exactly_at_selected_positions_including_unchanged(masked):
    ids, batch, out = masked
    selected = out["loss_mask"]
    assert np.array_equal(out["labels"] != IGNORE_INDEX, selected)
    assert np.array_equal(out["labels"][selected], batch["input_ids"][selected])
    unchanged = selected & (out["input_ids"] == batch["input_ids"])
    assert unchanged.sum() > 0 and (out["labels"][unchanged] != IGNORE_INDEX).all()


def _examples_twice(sample_documents):
    example = Example(sample_documents[0][0][:40], sample_documents[0][1][:40], 0, uid=1)
    again = Example(list(example.tokens_a), list(example.tokens_b), 0, uid=2)
    return [example, again]


def test_static_masking_is_fixed_per_example(sample_tokenizer, sample_documents):
    ids = SpecialIds.from_tokenizer(sample_tokenizer)
    examples = _examples_twice(sample_documents)
    first = collate(examples, ids, 128, "mlm_nsp", seed=3, dynamic_masking=False)
    assert np.array_equal(first["loss_mask"][0], first["loss_mask"][1])  # same content, same mask
    other_seed = collate(examples, ids, 128, "mlm_nsp", seed=4, dynamic_masking=False)
    assert not np.array_equal(first["loss_mask"][0], other_seed["loss_mask"][0])


def test_dynamic_masking_changes_per_occurrence(sample_tokenizer, sample_documents):
    ids = SpecialIds.from_tokenizer(sample_tokenizer)
    examples = _examples_twice(sample_documents)
    batch = collate(examples, ids, 128, "mlm_nsp", seed=3, dynamic_masking=True)
    assert not np.array_equal(batch["loss_mask"][0], batch["loss_mask"][1])
    replay = collate(examples, ids, 128, "mlm_nsp", seed=3, dynamic_masking=True)
    assert np.array_equal(batch["input_ids"], replay["input_ids"])  # reproducible from the uid


def test_left_to_right_targets_are_the_next_tokens(sample_tokenizer, sample_documents):
    ids = SpecialIds.from_tokenizer(sample_tokenizer)
    examples = full_segment_examples(sample_documents[:3], 64)[:4]
    batch = collate(examples, ids, 64, "ltr", seed=0, dynamic_masking=True)
    assert "next_sentence_label" not in batch
    rows, cols = np.nonzero(batch["loss_mask"])
    assert np.array_equal(batch["labels"][rows, cols], batch["input_ids"][rows, cols + 1])
    assert not (batch["input_ids"] == ids.mask_id).any()  # no corruption
    lengths = batch["attention_mask"].sum(1)
    assert np.array_equal(batch["loss_mask"].sum(1), lengths - 1)
