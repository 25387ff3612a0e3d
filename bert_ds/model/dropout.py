"""Dropout whose mask is cheap to draw on CPUs; torch's own dropout everywhere else.

Why: torch's CPU dropout draws one Mersenne-Twister number per element (`bernoulli_`), a tenth
of a base pre-training step on CPUs (37 dropouts per step; docs/benchmarks.md), and attention
dropout also pushes SDPA onto its slowest path. Here each mask costs one 64-bit draw from torch's
generator, used as the seed of a numpy SFC64 stream that supplies 16 random bits per element.

Because the seed comes from torch's default generator, everything that governs torch's dropout
governs this one too: `torch.manual_seed`, the RNG states saved in checkpoints, the model-parallel
stream forks (`RNGStatesTracker.fork`), and activation checkpointing's replay.

The keep probability is quantised to 1/65536 (p = 0.1 drops 0.099991 of the elements) and kept
values are scaled by its exact inverse, so the expectation of the output is the input's.
GPUs keep torch's dropout: their Philox kernels are fast and SDPA fuses attention dropout.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

_LEVELS = 1 << 16  # 16 random bits per element


def _keep_count(p: float) -> int:
    """How many of the 65536 equally likely 16-bit values keep an element."""
    return round((1.0 - p) * _LEVELS)


def keep_probability(p: float) -> float:
    """The exact keep probability a CPU mask uses for drop probability `p`."""
    return _keep_count(p) / _LEVELS


def draws_own_masks(x: torch.Tensor) -> bool:
    """Whether `dropout` builds its mask here (CPU tensors) rather than calling torch's kernel."""
    return x.device.type == "cpu"


def scaled_keep_mask(shape: torch.Size, p: float, dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of `shape`: 1 / keep_probability(p) where kept, 0 where dropped.

    Draws exactly one number from torch's default CPU generator, whatever the shape.
    """
    count = _keep_count(p)
    seed = int(torch.randint(0, 2**62, ()))
    if count in (0, _LEVELS):  # everything dropped, or kept (a threshold of 32768 overflows int16)
        return torch.full(shape, float(count > 0), dtype=dtype)
    numel = math.prod(shape)
    words = np.random.SFC64(seed).random_raw((numel + 3) // 4)  # 4 x 16 bits per 64-bit word
    bits = torch.from_numpy(words.view(np.int16)[:numel]).view(shape)  # uniform on [-32768, 32767]
    keep = bits < count - _LEVELS // 2
    return keep.to(dtype).mul_(_LEVELS / count)


def _check_probability(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """`F.dropout(x, p, training)` with the cheap CPU mask; the backward multiplies by the same mask."""
    if not training or p == 0.0:
        return x
    if not draws_own_masks(x):
        return F.dropout(x, p, training=True)
    _check_probability(p)
    return x * scaled_keep_mask(x.shape, p, x.dtype)


class Dropout(torch.nn.Module):
    """`torch.nn.Dropout` on `dropout` above (same `p` attribute, same train/eval behaviour)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        _check_probability(p)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def get_bias_dropout_add(training: bool, fused: bool):
    """megatron's `get_bias_dropout_add` slot of a layer spec: residual + dropout(x + bias).

    CPU training uses the cheap mask (and one fused multiply-add); anything else is megatron's own.
    """
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add as megatron_bda

    fallback = megatron_bda(training, fused)

    def bias_dropout_add(x_with_bias, residual: torch.Tensor, prob: float) -> torch.Tensor:
        x, bias = x_with_bias
        if not training or prob == 0.0 or not draws_own_masks(x):
            return fallback(x_with_bias, residual, prob)
        if bias is not None:
            x = x + bias
        # As megatron: the residual follows x's dtype (mixed precision keeps half-precision outputs).
        residual = residual if residual.dtype == x.dtype else residual.to(x.dtype)
        return torch.addcmul(residual, x, scaled_keep_mask(x.shape, prob, x.dtype))

    return bias_dropout_add
