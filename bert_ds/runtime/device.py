"""The device this process computes on, and everything that depends on which it is.

This is the only module that names an accelerator: everything else asks `device()`, `is_gpu()`
and `backend()`.
"""

from __future__ import annotations

import contextlib
import os

import torch


def device() -> torch.device:
    """The device this process computes on: its local GPU when there is one, else the CPU. The
    local rank is taken modulo the GPUs this process sees, so a task that sees only its own GPU
    (Slurm's per-task binding, CUDA_VISIBLE_DEVICES per rank) uses it rather than a missing one."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return torch.device("cpu")


# Slurm's record of the GPUs given to a job or step (`--gpus`, `--gres=gpu:N`): when it lists
# any, training on the CPU would be a silent mistake.
GPU_ALLOCATION_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def prepare_device(environ=os.environ) -> None:
    """Once per process, before its process group: refuse GPUs that Slurm allocated but torch
    cannot use (a driver older than the wheel's CUDA, a CPU-only torch) in one line, rather than
    train on the CPU over gloo; and let fp32 matrix multiplies use TF32 on GPUs (Ampere and later:
    8x the fp32 rate, the precision PyTorch leaves off by default)."""
    from bert_ds.errors import ConfigError

    allocated = next(((name, environ[name]) for name in GPU_ALLOCATION_VARIABLES
                      if environ.get(name, "").strip() not in ("", "-1", "NoDevFiles")), None)
    if allocated and not torch.cuda.is_available():
        name, value = allocated
        raise ConfigError(f"Slurm allocated GPUs to this job ({name}={value}) but torch {torch.__version__} "
                          f"(CUDA {torch.version.cuda or 'none: a CPU build'}) cannot use them: {_cuda_problem()} "
                          "Install a torch build that matches the node's NVIDIA driver, or submit without GPUs.")
    if device().type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def _cuda_problem() -> str:
    """Why torch cannot use CUDA here, in its own words where it has some."""
    if not torch.backends.cuda.is_built():
        return "this torch was built without CUDA."
    try:
        torch.cuda.init()
    except Exception as error:  # the driver's or the runtime's own reason
        return f"{str(error).splitlines()[0]}."
    return "torch.cuda.is_available() is False."


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


def timing_event(target: torch.device):
    """A device event that can time queued work (record() ... elapsed_time()), or None on CPUs,
    where work runs as the host calls it and the host's clock times it."""
    if target.type == "cpu":
        return None
    return torch.cuda.Event(enable_timing=True)


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


def generator_kind(state) -> str:
    """The device type whose generator a saved RNG state came from (checkpoints written before the
    device type was recorded): a CPU generator's state is thousands of bytes, a CUDA one's 16."""
    if state is None or state.numel() == torch.get_rng_state().numel():
        return "cpu"
    return "cuda"


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


def pins_host_memory(target: torch.device) -> bool:
    """Whether loaders should hand out page-locked batches for `target`: a copy from pinned memory
    to a GPU runs asynchronously beside the compute; to a CPU there is nothing to copy."""
    return is_gpu(target.type)


def to_device(batch: dict, target: torch.device) -> dict:
    """A batch of tensors moved to `target` (asynchronously where the device allows it)."""
    return {name: tensor.to(target, non_blocking=True) for name, tensor in batch.items()}
