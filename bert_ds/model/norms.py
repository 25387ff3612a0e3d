"""LayerNorm and embedding tables whose gradients are summed in fp32 on CPUs.

Why: a LayerNorm's weight and bias gradients, and each row of an embedding table (two token
types, a few hundred positions, [MASK] and the frequent words), are sums over many tokens of the
batch. torch's CPU kernels form those sums in the parameters' dtype, and bert_ds's bf16 keeps the
whole model in bf16 behind fp32 master weights (as Megatron does). For a 128 x 128 batch (torch
2.13) those gradients came out 13-20% away from their fp32 values, where the matrices' (fp32-
accumulated matmuls) were within 2%; a bf16 model trained that way fell behind Hugging Face's
under autocast once both left the frequent-token phase (docs/benchmarks.md, "Past the plateau").

Here, on a CPU, a half-precision LayerNorm input is normalised in fp32 and the result cast back to
its dtype (the forward differs only by that rounding), and an embedding lookup's backward sums
each row in fp32 (its forward is unchanged): only the sums' results are rounded. fp32 models, and
GPUs, whose LayerNorm (torch's, apex's) and embedding backward kernels accumulate in fp32
already, take the plain path. The parameters keep their names, shapes and dtype, so checkpoints
and the Hugging Face mapping are unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel import layers as megatron_embedding
from megatron.core.tensor_parallel import mappings as megatron_mappings


def sums_in_fp32_here(tensor: torch.Tensor) -> bool:
    """Whether this module computes in fp32 for `tensor`: a half-precision tensor on a CPU."""
    return tensor.device.type == "cpu" and tensor.dtype in (torch.bfloat16, torch.float16)


def _fp32(parameter):
    return None if parameter is None else parameter.float()


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm, computed in fp32 for half-precision inputs on a CPU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not sums_in_fp32_here(x):
            return super().forward(x)
        return F.layer_norm(x.float(), self.normalized_shape, _fp32(self.weight), _fp32(self.bias), self.eps).to(x.dtype)


class MegatronLayerNorm(LayerNorm):
    """The LayerNorm a Megatron-core layer spec builds (`config`, `hidden_size`, `eps`), in place
    of megatron's WrappedTorchNorm (which returns a plain torch.nn.LayerNorm)."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_unused):
        if config.normalization != "LayerNorm":
            raise ValueError(f"bert_ds's encoder uses LayerNorm, not {config.normalization}")
        super().__init__(hidden_size, eps=eps)


class _GatherSummingInFp32(torch.autograd.Function):
    """`table[ids]`, whose backward sums each row's gradient in fp32 and rounds the sums to the
    table's dtype (the forward is torch's lookup, unchanged)."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.table_shape = table.shape
        return F.embedding(ids, table)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        sums = torch.zeros(ctx.table_shape, dtype=torch.float32, device=grad.device)
        sums.index_add_(0, ids.reshape(-1), grad.reshape(-1, ctx.table_shape[-1]).float())
        return None, sums.to(grad.dtype)


class Embedding(torch.nn.Embedding):
    """torch.nn.Embedding whose rows' gradients are summed in fp32 for a half-precision table on a
    CPU (the position and token-type tables: each row gathers many tokens of a batch)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        plain = self.padding_idx is not None or self.max_norm is not None or self.sparse or self.scale_grad_by_freq
        if plain or not sums_in_fp32_here(self.weight):
            return super().forward(ids)
        return _GatherSummingInFp32.apply(ids, self.weight)


class VocabParallelEmbedding(megatron_embedding.VocabParallelEmbedding):
    """Megatron's vocabulary-parallel word embeddings, the rows' gradients summed in fp32 for a
    half-precision table on a CPU ([MASK], [CLS], [SEP] and frequent words gather hundreds of
    tokens a batch). Otherwise, and with sequence parallelism or megatron's deterministic mode,
    megatron's forward."""

    def forward(self, input_: torch.Tensor) -> torch.Tensor:
        if not sums_in_fp32_here(self.weight) or self.reduce_scatter_embeddings or self.deterministic_mode:
            return super().forward(input_)
        ids, outside = input_, None
        if self.tp_group.size() > 1:  # ids of other ranks' vocabulary slices look up row 0, then count 0
            outside = (input_ < self.vocab_start_index) | (input_ >= self.vocab_end_index)
            ids = (input_ - self.vocab_start_index).masked_fill(outside, 0)
        rows = _GatherSummingInFp32.apply(ids, self.weight)
        if outside is not None:
            rows = rows.masked_fill(outside[..., None], 0.0)
        return megatron_mappings.reduce_from_tensor_model_parallel_region(rows, group=self.tp_group)
