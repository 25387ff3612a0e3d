"""A one-layer bidirectional LSTM over padded sequences (Table 5's "+ BiLSTM" head), without
packing.

On a CPU, torch's bidirectional LSTM on a packed sequence (`pack_padded_sequence`) is 7x slower
than this one (`benchmarks/bilstm_speed.py`: forward + backward of [256, 32, 256] on one thread,
docs/benchmarks.md), since only a padded tensor reaches oneDNN's fused kernel; packed, it doubled
a SQuAD fine-tuning step of the mini model. Packing is only needed for the backward direction,
which would otherwise read a sequence's padding before its last real token. Here each direction is
its own LSTM on the padded tensor: the forward one reads the sequences as they are (padding comes
after every real token, so it changes no real output), the backward one reads each sequence with
its real tokens reversed in place (its padding, again, after them). The outputs equal a packed
bidirectional LSTM's with the same weights (tests/test_bilstm.py).
"""

from __future__ import annotations

import torch


def reverse_real_tokens(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x [s, b, ...] with the first lengths[i] positions of sequence i in reverse order and its
    padding where it was (applied twice: x again)."""
    positions = torch.arange(x.shape[0], device=x.device).unsqueeze(1)  # [s, 1]
    index = torch.where(positions < lengths, lengths - 1 - positions, positions)  # [s, b]
    return x.gather(0, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class PaddedBiLSTM(torch.nn.Module):
    """Per-token outputs [s, b, 2 * hidden] (zeros at padding, as `pad_packed_sequence` gives) and
    the final states [b, 2 * hidden]: the forward one at each sequence's last real token, the
    backward one at its first."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.forward_lstm = torch.nn.LSTM(input_size, hidden_size)
        self.backward_lstm = torch.nn.LSTM(input_size, hidden_size)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = lengths.to(x.device).clamp(min=1)
        forward, _ = self.forward_lstm(x)
        backward = reverse_real_tokens(self.backward_lstm(reverse_real_tokens(x, lengths))[0], lengths)
        real = torch.arange(x.shape[0], device=x.device).unsqueeze(1) < lengths  # [s, b]
        outputs = torch.cat([forward, backward], dim=-1) * real.unsqueeze(-1).to(x.dtype)
        batch = torch.arange(x.shape[1], device=x.device)
        final = torch.cat([forward[lengths - 1, batch], backward[0]], dim=-1)
        return outputs, final
