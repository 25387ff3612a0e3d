"""Move tensors between full (TP=1) shape and this rank's tensor-parallel slice.

megatron marks every sharded parameter with `tensor_model_parallel`, `partition_dim` and
`partition_stride`; these helpers read those marks, so a new sharded layer needs no code here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _partition(param: torch.Tensor):
    """(dim, stride) of a TP-sharded parameter, or None for a replicated one."""
    if not getattr(param, "tensor_model_parallel", False):
        return None
    stride = getattr(param, "partition_stride", 1)
    if stride != 1:
        raise NotImplementedError(f"partition stride {stride} is not supported")
    return param.partition_dim


def shard_full_state_dict(
    model: torch.nn.Module, full: dict[str, torch.Tensor], tp_rank: int, tp_size: int
) -> dict[str, torch.Tensor]:
    """This rank's slice of a full-size state dict, keyed like `model.state_dict()`."""
    params = dict(model.named_parameters())
    missing = sorted(set(model.state_dict()) - set(full))
    if missing:
        raise KeyError(f"full state dict lacks {len(missing)} tensors, e.g. {missing[:3]}")
    sharded = {}
    for name in model.state_dict():
        dim = _partition(params[name]) if name in params else None
        tensor = full[name]
        sharded[name] = tensor if dim is None else tensor.chunk(tp_size, dim=dim)[tp_rank].clone()
    return sharded


def gather_full_tensors(
    model: torch.nn.Module, tensors: dict[str, torch.Tensor], tp_group
) -> dict[str, torch.Tensor]:
    """Full-size copies of per-rank tensors (weights or gradients) keyed by parameter name.

    Collective over `tp_group`: every TP rank must call it with the same names.
    """
    params = dict(model.named_parameters())
    tp_size = dist.get_world_size(tp_group)
    full = {}
    for name, tensor in tensors.items():
        dim = _partition(params[name]) if name in params else None
        if dim is None or tp_size == 1:
            full[name] = tensor.detach().clone()
            continue
        pieces = [torch.empty_like(tensor) for _ in range(tp_size)]
        dist.all_gather(pieces, tensor.detach().contiguous(), group=tp_group)
        full[name] = torch.cat(pieces, dim=dim)
    return full
