"""Writing restored state into a live DeepSpeed engine: weights into the model and the optimizer's
fp32 masters, Adam moments, the optimizer step, the LR schedule and DeepSpeed's counters.

Used when a checkpoint is loaded into another layout than it was saved with (checkpoint/pretraining.py)
and, for the 16-bit masters, by fine-tuning's model keeper (finetune/outputs.py).
"""

from __future__ import annotations

from typing import Optional

import torch

from bert_ds.runtime.partitioned import local_partition, writable


def model_param_groups(engine) -> list[list]:
    """The model's parameters in the optimizer's group order. Without ZeRO, bf16/fp16 runs wrap
    torch's optimizer in DeepSpeed's FP16_UnfusedOptimizer (or, bf16 at one replica, in bert_ds's
    MasterWeightsOptimizer, which presents the same attributes), whose groups hold fp32 copies of
    the parameters (`fp32_groups`) beside the 16-bit originals (`fp16_groups`), position for position."""
    if hasattr(engine.optimizer, "fp16_groups"):
        return engine.optimizer.fp16_groups
    return [group["params"] for group in engine.optimizer.param_groups]


def fp32_masters(engine) -> dict:
    """{id(model parameter): its fp32 master} for a bf16/fp16 run without ZeRO ({} otherwise: ZeRO's
    masters are reached with deepspeed.utils.safe_get_full_fp32_param, fp32 runs have none)."""
    if not hasattr(engine.optimizer, "fp32_groups"):
        return {}
    return {id(p): master for group, masters in zip(engine.optimizer.fp16_groups, engine.optimizer.fp32_groups)
            for p, master in zip(group, masters)}


@torch.no_grad()
def set_engine_state(engine, model, slices: dict, training: Optional[dict]) -> None:
    """Weights into the model and the optimizer's fp32 masters; with `training`, also the Adam
    moments, the optimizer step, the LR schedule and DeepSpeed's counters."""
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

    stage = engine.zero_optimization_stage()
    if training is not None:
        _create_optimizer_state(engine)
    base = _torch_optimizer(engine)
    params, masters = dict(model.named_parameters()), fp32_masters(engine)
    for local, kinds in slices.items():
        param = params[local]
        if stage == 3:
            _set_partitioned(param, kinds)
            continue
        param.copy_(kinds["weight"].to(param.dtype))
        moments = [k for k in kinds if k != "weight"]
        if stage == 0:  # torch's optimizer works on the parameters themselves, or on their fp32 masters
            target = masters.get(id(param), param)
            if target is not param:
                target.copy_(kinds["weight"])
            for moment in moments:
                base.state[target][moment].copy_(kinds[moment])
            continue
        safe_set_full_fp32_param(param, kinds["weight"].to(param.device))
        for moment in moments:
            safe_set_full_optimizer_state(param, kinds[moment].to(param.device), moment)
    if training is None:
        return
    if training["optimizer_step"] is not None:
        for state in base.state.values():
            if isinstance(state.get("step"), torch.Tensor):
                state["step"].fill_(training["optimizer_step"])
            elif "step" in state:
                state["step"] = training["optimizer_step"]
    engine.lr_scheduler.load_state_dict(training["scheduler"])
    for group, lr in zip(base.param_groups, training["scheduler"]["_last_lr"]):
        group["lr"] = lr
    counters = training["engine"]
    engine.global_steps = counters["global_steps"]
    engine.global_samples = counters["global_samples"]
    engine.skipped_steps = counters["skipped_steps"]


def _set_partitioned(param, kinds: dict) -> None:
    """A ZeRO-3 parameter: the weight through a gather (every rank holds the same full value;
    DeepSpeed re-partitions it), this rank's partition of the fp32 master and of each moment
    through DeepSpeed's local API. Its full-tensor API cannot be used: it reads the last rank's
    partition past the end of a tensor whose size DP does not divide."""
    from deepspeed.utils import safe_set_local_fp32_param, safe_set_local_optimizer_state

    with writable(param):
        param.copy_(kinds["weight"].to(param.dtype))
    for kind, value in kinds.items():
        local = local_partition(param, value.to(torch.float32))
        if kind == "weight":
            safe_set_local_fp32_param(param, local)
        else:
            safe_set_local_optimizer_state(param, local, kind)


def _torch_optimizer(engine):
    """The torch optimizer: under ZeRO's wrapper or the 16-bit wrapper, or DeepSpeed's optimizer itself."""
    wrapped = engine.zero_optimization_stage() > 0 or hasattr(engine.optimizer, "fp32_groups")
    return engine.optimizer.optimizer if wrapped else engine.optimizer


def _create_optimizer_state(engine) -> None:
    """Make the optimizer create its (lazily built) state now, so moments can be written into it.

    One step with zero gradients at learning rate 0 changes no weight for Adam, AdamW, LAMB or
    DeepSpeed's CPU Adam (decoupled weight decay is scaled by the learning rate too); the step
    count it adds is overwritten afterwards. Under ZeRO-1/2 each parameter is then linked to its
    state. ZeRO-3 keeps its flat fp32 partitions out of the optimizer's groups between steps and
    puts each one into its group only around a step: the same is done here.
    """
    base = _torch_optimizer(engine)
    stage3 = engine.zero_optimization_stage() == 3
    if stage3:
        for sub_group, flat in enumerate(engine.optimizer.fp32_partitioned_groups_flat):
            base.param_groups[engine.optimizer.sub_group_to_group_id[sub_group]]["params"] = [flat]
    tensors = [p for group in base.param_groups for p in group["params"]]
    saved = [(group["lr"], [(p, p.grad) for p in group["params"]]) for group in base.param_groups]
    for group in base.param_groups:
        group["lr"] = 0.0
    for tensor in tensors:
        tensor.grad = torch.zeros_like(tensor)
    base.step()
    for group, (lr, grads) in zip(base.param_groups, saved):
        group["lr"] = lr
        for tensor, grad in grads:
            tensor.grad = grad
        if stage3:
            group["params"] = []
    if engine.zero_optimization_stage() in (1, 2):
        engine.optimizer._lazy_init_hp_params_optimizer_state()
