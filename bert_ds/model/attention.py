"""Core attention on torch's scaled_dot_product_attention.

megatron-core's DotProductAttention allocates on CUDA; this module fills the same `core_attention`
slot of a megatron layer spec and runs on CPU and GPU (SDPA picks flash/memory-efficient kernels
on GPUs by itself). Padding and causal structure both arrive in one boolean mask built by the
model, in megatron's convention: True = masked out. With unpadding (model/unpadding.py) the
layer's tokens arrive packed, and this module alone works on the padded batch.

On CPUs, training with attention dropout does not call SDPA: its dropout there is the unfused
path with torch's slow per-element mask (about 1.7x this module's explicit
softmax(q k^T) -> cheap mask (model/dropout.py) -> @ v, forward and backward, at base size).
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Callable, ContextManager, Optional

import torch
import torch.nn.functional as F

from bert_ds.model.dropout import draws_own_masks, scaled_keep_mask
from bert_ds.model.unpadding import attention_inputs


class SDPACoreAttention(torch.nn.Module):
    """softmax(q k^T / sqrt(d) + mask) v with dropout on the probabilities.

    Attention dropout runs inside `rng_fork()`: with tensor parallelism each rank holds different
    heads, so it must draw its masks from its own (model-parallel) RNG stream.
    """

    def __init__(
        self,
        *,
        config,
        layer_number: int,
        attn_mask_type=None,
        attention_type: str = "self",
        cp_comm_type: Optional[str] = None,
        softmax_scale: Optional[float] = None,
        pg_collection=None,
        rng_fork: Callable[[], ContextManager] = contextlib.nullcontext,
    ):
        super().__init__()
        self.dropout_p = config.attention_dropout
        head_dim = config.kv_channels
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.rng_fork = rng_fork

    def forward(
        self,
        query: torch.Tensor,  # [s, b, heads, head_dim] (this rank's heads)
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask,  # bool, broadcastable to [b, heads, s, s], True = masked; or a PackedTokens
        /,
        *,
        attn_mask_type=None,
        attention_bias=None,
        packed_seq_params=None,
    ) -> torch.Tensor:
        attention_mask, packing = attention_inputs(attention_mask)
        seq, batch = query.shape[0], query.shape[1]
        if packing is None:  # SDPA wants [b, heads, s, head_dim]
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        else:  # [T, 1, heads, head_dim], real tokens only: back to the padded batch for the scores
            q, k, v = (packing.unpack(t).permute(0, 2, 1, 3) for t in (query, key, value))
        dropout_p = self.dropout_p if self.training else 0.0
        with self.rng_fork() if dropout_p > 0 else contextlib.nullcontext():
            if dropout_p > 0 and draws_own_masks(q):
                context = self._attention_with_cheap_dropout(q, k, v, attention_mask, dropout_p)
            else:
                allowed = None if attention_mask is None else ~attention_mask  # SDPA: True = may attend
                context = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=allowed, dropout_p=dropout_p, scale=self.softmax_scale
                )
        if packing is not None:  # [b, heads, s, head_dim] -> [T, 1, heads * head_dim]
            return packing.pack(context.permute(0, 2, 1, 3).flatten(2))
        # [b, heads, s, head_dim] -> [s, b, heads * head_dim]
        return context.permute(2, 0, 1, 3).reshape(seq, batch, -1)

    def _attention_with_cheap_dropout(self, q, k, v, attention_mask, dropout_p: float) -> torch.Tensor:
        """SDPA's maths written out, with model/dropout.py's mask on the probabilities."""
        if q.dtype != torch.float32:
            # The heads as contiguous [b, heads, s, d] blocks: oneDNN's bf16 batched multiply
            # otherwise copies each permuted operand itself (kᵀ element by element, forward and
            # backward); one plain copy each up front cost 40% less at base (same results,
            # bit for bit). fp32's BLAS path reads the strides as they are.
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        scores = torch.matmul(q, k.transpose(-2, -1)).mul_(self.softmax_scale)  # [b, heads, s, s]
        if attention_mask is not None:
            # Added, not masked_fill'ed: an addition's backward is free. A large negative number
            # rather than -inf, so a fully masked row stays finite.
            bias = torch.zeros(attention_mask.shape, dtype=scores.dtype, device=scores.device)
            scores = scores.add_(bias.masked_fill_(attention_mask, torch.finfo(scores.dtype).min))
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs * scaled_keep_mask(probs.shape, dropout_p, probs.dtype), v)


def sdpa_core_attention(rng_fork: Callable[[], ContextManager] = contextlib.nullcontext):
    """A core-attention builder for a layer spec; `rng_fork` is the TP dropout stream's fork."""
    return functools.partial(SDPACoreAttention, rng_fork=rng_fork)
