"""Layout-independent weight initialisation: every tensor drawn from a seed keyed by its name.

megatron draws a layer's weights from the process's RNG stream in construction order, so the
same seed gives different weights once the model is cut into pipeline stages (each stage builds
different layers). Here each full-size tensor is drawn from its own generator, seeded by
(seed, full parameter name), and this rank keeps its tensor-parallel slice: TP=1, TP=2 and PP=2
start from identical weights, which makes their losses comparable step for step.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Optional

import torch

from bert_ds.config import ModelConfig
from bert_ds.model.construction import PLAIN, Construction


def _generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF)


def is_norm_parameter(name: str) -> bool:
    """A LayerNorm weight or bias, by parameter name (BERT initialises them to 1 and 0 and
    exempts them from weight decay, training/engine/optim.py)."""
    lowered = name.lower()
    return "layernorm" in lowered or "norm." in lowered


def is_bias_parameter(name: str) -> bool:
    """A bias, by parameter name (`...bias`, and an LSTM's `bias_ih_l0` / `bias_hh_l0`)."""
    return name.rsplit(".", 1)[-1].startswith("bias")


def initial_full_tensor(full_name: str, shape, std: float, seed: int) -> torch.Tensor:
    """The full-size fp32 initial value of the parameter `full_name` (a BertForPretraining name).

    BERT's init: LayerNorm weight 1 and bias 0, other biases 0, every other tensor N(0, std) drawn
    from a generator seeded by (seed, full_name), so it does not depend on what else is built.
    """
    if is_norm_parameter(full_name):
        return torch.full(tuple(shape), 1.0 if full_name.endswith("weight") else 0.0)
    if is_bias_parameter(full_name):
        return torch.zeros(tuple(shape))
    return torch.empty(list(shape), dtype=torch.float32).normal_(0.0, std, generator=_generator(seed, full_name))


@torch.no_grad()
def initialize_weights(
    model: torch.nn.Module,
    config: ModelConfig,
    seed: int,
    tp_rank: int,
    tp_size: int,
    full_names: Optional[Mapping[str, str]] = None,
    construction: Construction = PLAIN,
) -> None:
    """`initial_full_tensor` for every parameter, keyed by full parameter name; each rank keeps its
    tensor-parallel slice.

    `full_names` maps this model's parameter names to BertForPretraining names (pipeline stages
    name their parameters differently); identity when None. `construction` gathers a partitioned
    parameter to write it (model/construction.py).
    """
    for name, param in model.named_parameters():
        full_name = full_names.get(name, name) if full_names is not None else name
        shape = list(construction.full_shape(param))
        dim = getattr(param, "partition_dim", None) if getattr(param, "tensor_model_parallel", False) else None
        if dim is not None:
            shape[dim] *= tp_size
        full = initial_full_tensor(full_name, shape, config.init_method_std, seed)
        if dim is not None:
            full = full.chunk(tp_size, dim=dim)[tp_rank]
        with construction.writable(param):
            param.copy_(full.to(param.dtype))
