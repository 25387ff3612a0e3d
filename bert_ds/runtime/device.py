"""The device this process computes on, and everything that depends on which it is.

This is the only module that names an accelerator: everything else asks `device()`, `is_gpu()`
and `backend()`.
"""

from __future__ import annotations

import contextlib
import os

import torch


def device() -> torch.device:
    """The device this process computes on: its local GPU when there is one, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def describe_device() -> str:
    """`device()` in words for messages: "CPU", or "GPU cuda:0 (its name)"."""
    here = device()
    if here.type == "cuda":
        return f"GPU {here} ({torch.cuda.get_device_name(here)})"
    return "CPU"


def is_gpu(device_type: str) -> bool:
    """Whether a device type (e.g. `device().type`) gets GPU-only kernels (fused optimizers)."""
    return device_type == "cuda"


def accelerator_supports_bf16() -> bool:
    """Whether this process's accelerator computes in bf16 (NVIDIA: Ampere and later); False on CPUs."""
    return device().type == "cuda" and torch.cuda.is_bf16_supported()


def synchronize() -> None:
    """Wait for queued device work (timing GPU code needs it; a no-op on the CPU)."""
    if device().type == "cuda":
        torch.cuda.synchronize()


def autocast(precision: str):
    """A context running a plain torch model in `precision` (fp32/bf16/fp16) on this device."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device().type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def backend() -> str:
    """The collective backend matching `device()`: nccl on GPUs, gloo on CPUs."""
    return "nccl" if device().type == "cuda" else "gloo"


def get_device_rng_state() -> torch.Tensor:
    """The state of the generator `device()` draws from (the GPU's, or the CPU's)."""
    return torch.cuda.get_rng_state() if device().type == "cuda" else torch.get_rng_state()


def set_device_rng_state(state: torch.Tensor) -> None:
    if device().type == "cuda":
        torch.cuda.set_rng_state(state)
    else:
        torch.set_rng_state(state)


def seed_device(seed: int) -> None:
    """Seed the generator `device()` draws from."""
    if device().type == "cuda":
        torch.cuda.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def set_current_device() -> None:
    """Make this process's GPU the current one before its process group is created (no-op on CPUs)."""
    if device().type == "cuda":
        torch.cuda.set_device(device())


def to_device(batch: dict, target: torch.device) -> dict:
    """A batch of tensors moved to `target` (asynchronously where the device allows it)."""
    return {name: tensor.to(target, non_blocking=True) for name, tensor in batch.items()}
