"""Cross-entropy over the vocabulary decoder's logits (split over tensor-parallel ranks), a row
chunk at a time, with the logits' own buffer holding the exponentials and then the gradient.

Why not megatron's `vocab_parallel_cross_entropy` (nor its fused variant): both work on whole
[n, vocab] fp32 tensors: the caller's fp32 copy of bf16 logits, the softmax kept for backward and
a gradient built in fp32 before its cast. With every position predicted (the LTR objective: 4,096
rows of 30,592 at a micro-batch of 32 x 128) each is a fresh 0.5 GB, page-faulted again at every
micro-batch, and every pass over it goes to memory. Here, in bf16 on a CPU, forward and backward
took 1.5-1.8x less time and no memory of the logits' size (benchmarks/vocab_cross_entropy.py,
docs/benchmarks.md); in fp32, where megatron worked in place too, the same. The fused variant
also casts its gradient to bf16 whatever the logits' dtype.

- `row_statistics`: each row's largest logit and its target's logit, reduced over the TP group
  (two [n]-sized all-reduces): what the accuracy reads too (model/loss.py), computed once.
- forward: per chunk of rows, in fp32 scratch of a bounded size (1 MiB on a CPU, in cache;
  256 MiB on a GPU) or, for fp32 logits, in place: exp(logit - row max) and its row sum; the
  exponentials are written back over the logits (in their dtype), whose values the caller must
  not use afterwards (megatron's CE overwrote fp32 logits too). One all-reduce of the sums;
  loss = log(sum) + max - target logit, in fp32.
- backward: the stored exponentials times grad / sum, per chunk in fp32, written in place: the
  logits' buffer becomes their gradient. The target's entry is recomputed from [n]-sized fp32
  values, since p - 1 taken in bf16 cancels (p = 0.999 rounds to 1 in bf16).
- fp16 logits are not overwritten: an unscaled exponential below 6e-8 is 0 in fp16, and the loss
  scale (DeepSpeed's fp16 mode multiplies the gradient by up to 2^16) would have kept it. Backward
  recomputes exp(logit - log-sum-exp) x grad in fp32 instead and rounds once, as megatron did.

Precision: the loss is the fp32 reference's (to ~2e-6). In bf16 a gradient entry is rounded twice
(the exponential, then the scaled gradient) instead of once: within one bf16 unit of the last
place of the single-rounding gradient; fp16 and fp32 round once (tests/test_loss.py). Not bitwise
megatron's: its fp32 operations come in another order.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist

CPU_CHUNK_ELEMENTS = 1 << 18
"""fp32 entries of one chunk on a CPU (1 MiB, about a core's L2; 8 rows of a 30k vocabulary):
8 rows measured a little faster than 32 and clearly faster than 128."""
GPU_CHUNK_ELEMENTS = 1 << 26
"""On a GPU (256 MiB of fp32 scratch): no cache to fit, only a bound on the scratch, in chunks few
enough (4 for 8,192 x 30,592) that their kernel launches cost nothing."""


class RowStatistics(NamedTuple):
    """Per row, reduced over the TP group: fp32 [n] each except the last two."""

    row_max: torch.Tensor
    """the largest logit of the full vocabulary"""
    target_logit: torch.Tensor
    """the target's logit (0 on padding rows, whose target is negative)"""
    local_target: torch.Tensor
    """int64 [n]: the target's column in this rank's slice (clamped into it when elsewhere)"""
    in_slice: torch.Tensor
    """bool [n]: the target's column is in this rank's slice"""


def _tp_size(tp_group) -> int:
    return dist.get_world_size(tp_group) if tp_group is not None and dist.is_initialized() else 1


@torch.no_grad()
def row_statistics(logits: torch.Tensor, targets: torch.Tensor, tp_group) -> RowStatistics:
    """logits: [n, vocab / tp], this rank's slice; targets: [n] full-vocabulary ids, negative on
    padding rows (model/selection.py), which are in no rank's slice."""
    part = logits.shape[-1]
    start = dist.get_rank(tp_group) * part if _tp_size(tp_group) > 1 else 0
    in_slice = (targets >= start) & (targets < start + part)
    local_target = (targets - start).clamp(0, part - 1)
    row_max = logits.amax(dim=-1).float()  # exact in any dtype; max(dim) also finds indices: 6x slower
    target_logit = torch.where(in_slice, logits.gather(1, local_target[:, None])[:, 0].float(), 0.0)
    if _tp_size(tp_group) > 1:
        dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=tp_group)
        dist.all_reduce(target_logit, op=dist.ReduceOp.SUM, group=tp_group)
    return RowStatistics(row_max, target_logit, local_target, in_slice)


def _rows_per_chunk(logits: torch.Tensor) -> int:
    budget = CPU_CHUNK_ELEMENTS if logits.device.type == "cpu" else GPU_CHUNK_ELEMENTS
    return max(1, budget // max(1, logits.shape[-1]))


def _chunks(buffer: torch.Tensor, in_place: bool):
    """(rows of `buffer`, the fp32 tensor to compute them in) per chunk: the rows themselves when
    `in_place` (fp32), else one bounded scratch reused by every chunk, whose result the caller
    copies back when it keeps it."""
    rows, part = buffer.shape
    size = _rows_per_chunk(buffer)
    scratch = None if in_place else torch.empty(min(size, rows), part, dtype=torch.float32, device=buffer.device)
    for start in range(0, rows, size):
        block = buffer[start : start + size]
        yield start, block, block if in_place else scratch[: block.shape[0]]


class _ChunkedVocabCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, row_max, target_logit, local_target, in_slice, tp_group):
        ctx.in_place = logits.dtype == torch.float32  # the chunks are fp32 already: no scratch
        ctx.keeps_exponentials = logits.dtype != torch.float16  # fp16: recomputed in backward (docstring)
        sum_exp = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for start, block, chunk in _chunks(logits, ctx.in_place):
            end = start + block.shape[0]
            torch.sub(block, row_max[start:end, None], out=chunk)
            chunk.exp_()
            torch.sum(chunk, dim=-1, out=sum_exp[start:end])
            if ctx.keeps_exponentials and not ctx.in_place:
                block.copy_(chunk)  # the exponentials, kept in the logits' buffer for backward
        if _tp_size(tp_group) > 1:
            dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=tp_group)
        log_sum_exp = torch.log(sum_exp).add_(row_max)
        ctx.save_for_backward(logits, sum_exp, log_sum_exp, target_logit, local_target, in_slice)
        return log_sum_exp - target_logit

    @staticmethod
    def backward(ctx, grad_loss):
        buffer, sum_exp, log_sum_exp, target_logit, local_target, in_slice = ctx.saved_tensors
        grad_loss = grad_loss.float()
        scale = grad_loss / sum_exp  # softmax = exponentials / sum_exp
        for start, block, chunk in _chunks(buffer, ctx.in_place):
            end = start + block.shape[0]
            if ctx.keeps_exponentials:
                torch.mul(block, scale[start:end, None], out=chunk)
            else:  # fp16: the softmax from the logits, times the (loss-scaled) gradient, rounded once
                torch.sub(block, log_sum_exp[start:end, None], out=chunk)
                chunk.exp_().mul_(grad_loss[start:end, None])
            if not ctx.in_place:
                block.copy_(chunk)
        # Every row's entry at its (clamped) target column, rewritten only where the target is in
        # this rank's slice: no nonzero(), which would wait for the device (model/selection.py).
        every_row = torch.arange(buffer.shape[0], device=buffer.device)
        target_gradient = (torch.exp(target_logit - log_sum_exp) - 1.0) * grad_loss
        at_target = buffer[every_row, local_target]
        buffer[every_row, local_target] = torch.where(in_slice, target_gradient.to(buffer.dtype), at_target)
        return buffer, None, None, None, None, None


def vocab_cross_entropy(logits: torch.Tensor, statistics: RowStatistics, tp_group) -> torch.Tensor:
    """Per-row cross-entropy, fp32 [n], of `logits` [n, vocab / tp] (any float dtype) against the
    targets that `statistics` (`row_statistics` of the same logits) was taken for. A padding
    row's loss is finite (the caller zeroes it). Overwrites `logits` (see the module's
    docstring); their gradient comes back in their dtype."""
    return _ChunkedVocabCrossEntropy.apply(logits, *statistics, tp_group)
