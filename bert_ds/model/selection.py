"""The rows of the predicted (masked) positions, chosen without reading the device.

Boolean indexing (`hidden[loss_mask]`) must learn how many rows there are before it can allocate
its result, which on a GPU is a device-to-host read that stalls the step. A batch whose
`loss_mask` is still in host memory knows that number already: the flat indices of its True
entries (training/loop/steps.py reads them there) select the same rows with `index_select`.
"""

from __future__ import annotations

import torch


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
