"""The rows of the predicted (masked) positions, chosen without reading the device.

Boolean indexing (`hidden[loss_mask]`) must learn how many rows there are before it can allocate
its result, which on a GPU is a device-to-host read that stalls the step. A batch whose
`loss_mask` is still in host memory knows that number already: the flat indices of its True
entries (training/loop/steps.py reads them there) select the same rows with `index_select`.

Their number is also rounded up to a multiple of ROW_MULTIPLE (`padded_selection`): the added
rows repeat a real position under a negative target, which the loss counts nowhere
(model/loss.py). A count that changes at every step gives the vocabulary decoder a new matmul
shape at every step; oneDNN compiles and caches a kernel per shape, and on a CPU run the host
memory grew by about 7 MB a step (18 GB at step 3,000 of the mini model at batch 128). With the
count rounded, a run sees a handful of shapes and its memory stays level (tests/test_selection.py).
"""

from __future__ import annotations

import numpy as np
import torch

ROW_MULTIPLE = 64
"""The selected rows are padded to a multiple of this (a few percent of the decoder's work)."""
PADDING_TARGET = -100
"""The padding rows' target: the ignore index of the labels (data/masking.py), never a token id."""


def selected_rows(values: torch.Tensor, selection: torch.Tensor, *, seq_first: bool = False) -> torch.Tensor:
    """Rows of `values` at the selected positions, batch-major (the order of `labels[loss_mask]`).

    values: [b, s, ...], or [s, b, ...] (megatron's layout) with `seq_first`.
    selection: the bool [b, s] loss mask, or the flat batch-major indices of its True entries
    (int64 [n]), e.g. `np.flatnonzero(loss_mask)`.
    """
    if selection.dtype == torch.bool:
        return (values.transpose(0, 1) if seq_first else values)[selection]
    if seq_first:  # batch-major index b * s + j -> row j * b_size + b of the [s, b] flattening
        seq, batch = values.shape[0], values.shape[1]
        selection = (selection % seq) * batch + torch.div(selection, seq, rounding_mode="floor")
    return values.flatten(0, 1).index_select(0, selection)


def padded_selection(loss_mask: np.ndarray, labels: np.ndarray, multiple: int = ROW_MULTIPLE) -> tuple[np.ndarray, np.ndarray]:
    """(flat batch-major indices of the True entries of `loss_mask`, their labels), both padded
    to a multiple of `multiple` rows: the padding repeats the first position under PADDING_TARGET.
    Host arrays in, host arrays out (int64 [n_padded] each)."""
    positions = np.flatnonzero(loss_mask)
    targets = labels.reshape(-1)[positions].astype(np.int64)
    extra = -positions.size % multiple
    if positions.size and extra:
        positions = np.concatenate([positions, np.full(extra, positions[0], dtype=positions.dtype)])
        targets = np.concatenate([targets, np.full(extra, PADDING_TARGET, dtype=np.int64)])
    return positions, targets
