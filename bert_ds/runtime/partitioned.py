"""ZeRO-3 models built partitioned: no rank ever holds the whole model.

Under `deepspeed.zero.Init` every module's parameters are split over the data-parallel group as
soon as that module is constructed, so building BERT-LARGE costs each rank 1/DP of its weights
(plus, for one module at a time, that module's full tensors). Parameters below DeepSpeed's
`stage3_param_persistence_threshold` (biases, LayerNorms) stay whole on every rank by design.

Writing a partitioned parameter (initial weights, weights loaded from another layout) goes
through `writable`: the full tensor is gathered, rank 0 of the data-parallel group writes it and
DeepSpeed re-partitions (and broadcasts) it on exit. Every rank computes the same value anyway:
the weights are drawn per parameter name (model/init.py).
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch


def is_partitioned(param: torch.Tensor) -> bool:
    """Whether ZeRO-3 manages this parameter (it then holds only this rank's partition)."""
    return hasattr(param, "ds_id")


def full_shape(param: torch.Tensor) -> torch.Size:
    """The parameter's shape on this TP rank, partitioned by ZeRO-3 or not."""
    return param.ds_shape if is_partitioned(param) else param.shape


def builds_partitioned(deepspeed_config: Optional[dict]) -> bool:
    """Whether a model for this DeepSpeed config is built partitioned (ZeRO-3)."""
    return deepspeed_config is not None and deepspeed_config.get("zero_optimization", {}).get("stage", 0) == 3


class ZeroInitConstruction:
    """The ZeRO-3 form of model/construction.py's `Construction`: modules built under
    `deepspeed.zero.Init` over the layout's data-parallel group, parameters written through
    `writable`."""

    partitioned = True

    def __init__(self, deepspeed_config: dict, layout):
        self.deepspeed_config, self.layout = deepspeed_config, layout

    def context(self):
        import deepspeed

        from bert_ds.runtime.distributed import DeepSpeedMPU

        # The group must be named: zero.Init reads only sizes from the mpu and would otherwise
        # partition over the whole world, mixing different TP ranks' slices of a parameter.
        return deepspeed.zero.Init(config_dict_or_path=self.deepspeed_config, mpu=DeepSpeedMPU(self.layout),
                                   data_parallel_group=self.layout.dp_group)

    def writable(self, param: torch.Tensor):
        return writable(param)

    def full_shape(self, param: torch.Tensor) -> torch.Size:
        return full_shape(param)


def writable(param: torch.Tensor):
    """A context in which `param` is whole and writes to it are kept (see the module docstring)."""
    if not is_partitioned(param):
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters([param], modifier_rank=0)


def local_partition(param: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """This rank's ZeRO-3 partition of `full` (a tensor of `param`'s full shape): DeepSpeed pads
    the flattened tensor to DP equal parts, rank r keeping part r."""
    import torch.distributed as dist

    group = param.ds_process_group
    size, rank = param.partition_numel(), dist.get_rank(group)
    flat = full.flatten()
    padded = torch.cat([flat, flat.new_zeros(size * dist.get_world_size(group) - flat.numel())])
    return padded.narrow(0, size * rank, size)
