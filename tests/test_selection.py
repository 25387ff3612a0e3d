"""model/selection.py: the predicted rows padded to a repeating count, so that a run's
vocabulary decoder sees a handful of matmul shapes (oneDNN compiles and keeps a kernel per shape:
with a new count at every step a bf16 CPU run's memory grew by gigabytes)."""

import numpy as np
import torch

from bert_ds.model.selection import PADDING_TARGET, ROW_MULTIPLE, padded_selection, selected_rows


def test_padding_repeats_a_real_position_under_the_padding_target():
    mask = np.zeros((2, 8), dtype=bool)
    mask[0, [1, 5]] = mask[1, 6] = True
    labels = np.arange(16).reshape(2, 8) + 100
    positions, targets = padded_selection(mask, labels, multiple=4)
    assert positions.tolist() == [1, 5, 14, 1] and targets.tolist() == [101, 105, 114, PADDING_TARGET]
    values = torch.arange(16).reshape(2, 8)
    assert selected_rows(values, torch.from_numpy(positions)).tolist() == [1, 5, 14, 1]
    exact, _ = padded_selection(mask[:, :6], labels[:, :6], multiple=2)
    assert exact.tolist() == [1, 5]  # already a multiple: nothing added
    empty, none = padded_selection(np.zeros((2, 8), dtype=bool), labels, multiple=4)
    assert empty.size == none.size == 0


def test_a_run_of_batches_gives_the_decoder_a_handful_of_shapes(sample_tokenizer):
    from bert_ds.config import DataConfig
    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import sample_sources
    from bert_ds.training.loop.steps import read_on_host

    config = DataConfig(seq_length=128, micro_batch_size=16, block_documents=4, seed=5)
    counts, shapes = set(), set()
    for _, batch in zip(range(40), PretrainingLoader(sample_sources(), sample_tokenizer, config)):
        host, result, _ = read_on_host(batch)
        counts.add(int(result.predicted_tokens))
        shapes.add(tuple(host["predicted_positions"].shape))
        assert (host["predicted_labels"] >= 0).sum() == result.predicted_tokens
        assert host["predicted_positions"].shape == host["predicted_labels"].shape
        assert host["predicted_positions"].numel() % ROW_MULTIPLE == 0
    assert len(counts) >= 10 and len(shapes) <= 3, (sorted(counts), shapes)
