"""LAMB (You et al. 2019) with the same maths on every device.

On GPUs `--optimizer lamb` runs DeepSpeed's FusedLamb (a CUDA kernel compiled with nvcc at first
use); elsewhere `Lamb` below, which computes what that kernel computes, so a run keeps its
optimizer when it moves between a CPU and a GPU node:

    m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
    update = m / (sqrt(v) + eps) + weight_decay * w
    trust  = clamp(||w|| / ||update||, 0.01, 10), or 1 when either norm is 0
    w     -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * trust * update

That is FusedLamb's default variant: bias correction folded into the step size (as Adam's
reference implementation does), weight decay inside the update and its norm (the paper's
Algorithm 2), the trust ratio clamped to [min_coeff, max_coeff] as NVIDIA's and DeepSpeed's
BERT recipes run it.
"""

from __future__ import annotations

import math

import torch

from bert_ds.errors import ConfigError

MAX_COEFF = 10.0
MIN_COEFF = 0.01


class Lamb(torch.optim.Optimizer):
    """LAMB as DeepSpeed's FusedLamb computes it (module docstring), in torch operations."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, bias_correction=True,
                 max_coeff=MAX_COEFF, min_coeff=MIN_COEFF):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction,
                                      max_coeff=max_coeff, min_coeff=min_coeff))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] = state.get("step", 0) + 1
                step = state["step"]
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(param.grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                update = exp_avg / (exp_avg_sq.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(param, alpha=group["weight_decay"])
                step_size = group["lr"]
                if group["bias_correction"]:
                    step_size *= math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
                weight_norm, update_norm = param.norm(), update.norm()
                # On the device, without reading the norms back: no host sync per tensor.
                trust = torch.where(
                    (weight_norm > 0) & (update_norm > 0),
                    (weight_norm / update_norm).clamp(group["min_coeff"], group["max_coeff"]),
                    torch.ones_like(weight_norm),
                )
                param.add_(update.mul_(trust), alpha=-step_size)
        return loss


def fused_lamb_class():
    """DeepSpeed's FusedLamb class (importing it builds nothing; its CUDA kernel is compiled when
    an instance is made: build_fused_lamb)."""
    from deepspeed.ops.lamb import FusedLamb

    return FusedLamb


def build_fused_lamb(cls, groups: list[dict], lr: float, betas, eps: float):
    """`cls` (FusedLamb or a subclass) over `groups`, with `Lamb`'s settings spelled out."""
    try:
        return cls(groups, lr=lr, betas=betas, eps=eps, bias_correction=True, eps_inside_sqrt=False,
                   max_coeff=MAX_COEFF, min_coeff=MIN_COEFF)
    except Exception as error:  # the JIT build raises anything from ImportError to CalledProcessError
        cuda = torch.version.cuda or "unknown"
        detail = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"--optimizer lamb on a GPU runs DeepSpeed's fused LAMB, which could not be built on this node ({detail}). "
            f"It is compiled with nvcc at first use: make a CUDA toolkit matching torch's CUDA {cuda} available "
            "(e.g. `module load cuda`, or CUDA_HOME), or install DeepSpeed with DS_BUILD_FUSED_LAMB=1 on a build node; "
            "or use --optimizer adamw."
        ) from None
