"""bf16 training through fp32 master weights, kept by bert_ds for a run of one replica.

What DeepSpeed does for bf16 (its BF16_Optimizer under ZeRO, its FP16_UnfusedOptimizer without)
is made for many ranks: flat buffers to reduce and partition, each gradient and weight copied
into and out of them at every step, a norm and a finite check per tensor. With one replica (DP = 1,
no tensor or pipeline split) there is nothing to reduce or partition, and on a CPU those copies
were a third of a BERT-base bf16 step (docs/benchmarks.md#the-bf16-step). Here each parameter's
work is the least mixed precision needs:

  - backward: a hook on each bf16 parameter adds its gradient into an fp32 accumulator as soon as
    it is complete and drops the bf16 one (so gradient accumulation sums in fp32, as DeepSpeed's);
  - step: one norm over the fp32 gradients, which is also the finite check (a non-finite norm
    skips the step, counted by DeepSpeed as `skipped_steps`, the LR schedule held back); torch's
    fused AdamW steps the fp32 masters with the clipping folded in as its `grad_scale`; one
    `_foreach_copy_` writes the bf16 weights.

The masters, Adam moments and step live in a torch AdamW over the masters (`.optimizer`, which
DeepSpeed's engine and the LR schedule drive); the wrapper presents the attributes and the
checkpoint layout of DeepSpeed's FP16_UnfusedOptimizer (`fp16_groups`, `fp32_groups`, and a
state dict of `fp32_groups` + `optimizer_state_dict`), so checkpoints, the portable conversion,
layout moves and the fp32 export read it as they read DeepSpeed's.
"""

from __future__ import annotations

import math

import torch

from bert_ds.training.engine.optim import global_grad_norm


class MasterWeightsOptimizer:
    """fp32 masters of a bf16 model, stepped by `optimizer` (a torch AdamW over the masters)."""

    overflow = False

    def __init__(self, optimizer: torch.optim.Optimizer, model_groups: list[list[torch.nn.Parameter]], max_norm: float):
        self.optimizer = optimizer
        self.fp16_groups = model_groups
        self.fp32_groups = [group["params"] for group in optimizer.param_groups]
        self.max_norm = max_norm
        self._global_grad_norm = None
        self._scales_in_kernel = isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and bool(optimizer.defaults.get("fused"))
        # Every group's tensors in one list each, position for position, for the per-step loops.
        self._params = [param for group in model_groups for param in group]
        self._masters = [master for group in self.fp32_groups for master in group]
        # One fp32 accumulator per parameter, kept between steps (no allocation per step).
        self._accumulators = [torch.zeros_like(master) for master in self._masters]
        self._hooks = [
            param.register_post_accumulate_grad_hook(self._accumulate_hook(master, accumulator))
            for param, master, accumulator in zip(self._params, self._masters, self._accumulators)
        ]

    @classmethod
    def over(cls, model: torch.nn.Module, param_groups: list[dict], max_norm: float, make_optimizer):
        """Masters copied from `model`'s (still fp32) parameters in `param_groups`, the model then
        cast to bf16; `make_optimizer(master_groups)` builds the torch optimizer over the masters."""
        master_groups = [dict(group, params=[p.detach().clone().float() for p in group["params"]]) for group in param_groups]
        model_groups = [list(group["params"]) for group in param_groups]
        model.to(torch.bfloat16)
        return cls(make_optimizer(master_groups), model_groups, max_norm)

    @staticmethod
    def _accumulate_hook(master: torch.Tensor, accumulator: torch.Tensor):
        def accumulate(param: torch.Tensor) -> None:
            if master.grad is None:
                accumulator.copy_(param.grad)
                master.grad = accumulator
            else:
                accumulator.add_(param.grad)
            param.grad = None

        return accumulate

    # What DeepSpeed's engine and the LR schedule read.
    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    @torch.no_grad()
    def step(self, closure=None):
        grads = [m.grad for m in self._masters if m.grad is not None]
        norm = global_grad_norm(grads)
        self._global_grad_norm = float(norm)
        self.overflow = not math.isfinite(self._global_grad_norm)
        if not self.overflow:
            # torch's clip: scale by max_norm / (norm + 1e-6) when that is below 1. torch's fused
            # AdamW divides each gradient by its grad_scale as it reads it, saving a pass.
            coefficient = self.max_norm / (self._global_grad_norm + 1e-6) if self.max_norm > 0 else 1.0
            if coefficient < 1.0 and self._scales_in_kernel:
                self.optimizer.grad_scale = torch.tensor(1.0 / coefficient, device=norm.device)
            elif coefficient < 1.0:
                torch._foreach_mul_(grads, coefficient)
            self.optimizer.step()
            self.optimizer.grad_scale = None
            self.write_model_weights()
        self.zero_grad()
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for master in self._masters:
            master.grad = None

    @torch.no_grad()
    def write_model_weights(self) -> None:
        """The bf16 weights from the fp32 masters (after a step, or after masters were loaded)."""
        torch._foreach_copy_(self._params, self._masters)

    def state_dict(self) -> dict:
        return dict(fp32_groups=self.fp32_groups, optimizer_state_dict=self.optimizer.state_dict())

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict, load_optimizer_states: bool = True) -> None:
        for group, saved in zip(self.fp32_groups, state_dict["fp32_groups"]):
            for master, value in zip(group, saved):
                master.copy_(value)
        if load_optimizer_states:
            self.optimizer.load_state_dict(state_dict["optimizer_state_dict"])
        self.write_model_weights()


def attach(engine, masters: MasterWeightsOptimizer) -> None:
    """Let DeepSpeed's engine step `masters` instead of the torch optimizer it was given (its
    config has bf16 off, so it neither casts the model nor wraps the optimizer), and skip its
    clipping pass over the bf16 parameters: their gradients are already in the accumulators."""
    engine.optimizer = masters
    engine.clip_fp32_gradients = lambda: None
