"""The one precision choice of a run: `--precision {auto,fp32,bf16,fp16}` -> what it trains in, and why.

bf16 and fp16 are mixed precision: the model computes in 16 bits, fp32 master weights and fp32
optimizer states are kept by DeepSpeed (ZeRO's partitions, or its fp16/bf16 optimizer wrapper
without ZeRO) or, for bf16 at one replica, by bert_ds (training/engine/master_weights.py), and
our losses are taken in fp32 (model/loss.py). fp16 needs loss scaling and
kernels that only GPUs have, so it is a GPU option.

`auto`:
  - on a GPU: fp16 when the DeepSpeed config enables it (zero2_fp16), else bf16 where the card
    supports it (Ampere and later), else fp16 with dynamic loss scaling;
  - on a CPU: bf16 when the processor has a bf16 matrix instruction (Intel AMX tiles, or the
    AVX512-BF16 dot product of Cooper Lake, Zen 4 and later), which oneDNN uses for bf16 matrix
    multiplies; fp32 otherwise, where bf16 is emulated and runs several times slower than fp32.
    The instruction set is read, not timed, so every rank of a node decides the same, at no cost.
    `BERT_DS_CPU_BF16=0` makes `auto` take fp32 on any CPU (=1: bf16 on any CPU), for a cluster
    whose nodes differ, or a test suite that must behave the same on every machine.
  - a launch plan made for a GPU on a machine without one (`--dry-run gpu`) assumes a bf16 card.

This is the only module that decides; everything else reads a PrecisionChoice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bert_ds.config import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
MIXED = ("bf16", "fp16")


@dataclass(frozen=True)
class PrecisionChoice:
    """What a run trains in ("fp32", "bf16" or "fp16"), what was asked for, and why."""

    name: str
    requested: str
    reason: str
    warning: Optional[str] = None
    """Said at start when the choice will be slow on this machine (explicit bf16 on a CPU without
    a bf16 matrix instruction)."""

    def describe(self) -> str:
        return f"{self.name} ({self.reason})"


def cpu_bf16_instructions() -> Optional[str]:
    """The name of this CPU's bf16 matrix instruction set ("AMX" or "AVX512-BF16"), or None."""
    import torch

    cpu = getattr(torch, "cpu", None)
    probes = (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported"))
    for name, probe in probes:
        check = getattr(cpu, probe, None)
        try:
            if check is not None and check():
                return name
        except RuntimeError:  # a torch built without the CPU capability query
            continue
    return None


def gpu_supports_bf16() -> bool:
    from bert_ds.runtime.device import accelerator_supports_bf16  # the one module that names accelerators

    return accelerator_supports_bf16()


def choose_precision(requested: str, device_type: str, config_precision: Optional[str] = None) -> PrecisionChoice:
    """The precision for `device_type`: "cpu", an accelerator's (`distributed.device().type`), or a
    launch plan's "gpu" (this machine's GPU when it has one, else a bf16 card is assumed).

    `config_precision` is what the DeepSpeed JSON enables ("bf16", "fp16" or None); `auto` on a
    GPU follows an enabled fp16."""
    if requested not in PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}, got {requested!r}.")
    on_cpu = device_type == "cpu"
    if on_cpu:
        return _cpu_choice(requested)
    if requested == "fp32":
        return PrecisionChoice("fp32", requested, "asked for with --precision; GPU matrix multiplies in TF32")
    if requested != "auto":
        return PrecisionChoice(requested, requested, "asked for with --precision")
    if config_precision == "fp16":
        return PrecisionChoice("fp16", requested, "the DeepSpeed config enables fp16")
    if device_type == "gpu" and not _gpu_here():
        return PrecisionChoice("bf16", requested, "planned for a GPU with bf16 (Ampere or later)")
    if gpu_supports_bf16():
        return PrecisionChoice("bf16", requested, "this GPU supports bf16")
    return PrecisionChoice("fp16", requested, "this GPU has no bf16; fp16 with dynamic loss scaling")


def _gpu_here() -> bool:
    """Whether this machine has a GPU, asked only when torch is already loaded: a plan for an
    explicit `--dry-run gpu` target stays free of torch (and of the answer)."""
    import sys

    if "torch" not in sys.modules:
        return False
    from bert_ds.runtime.device import device, is_gpu

    return is_gpu(device().type)


CPU_BF16_VARIABLE = "BERT_DS_CPU_BF16"


def _cpu_choice(requested: str) -> PrecisionChoice:
    import os

    if requested == "fp16":
        raise ConfigError("--precision fp16 needs a GPU (loss-scaled fp16 kernels); on a CPU use bf16, fp32 or auto.")
    unit = cpu_bf16_instructions()
    forced = os.environ.get(CPU_BF16_VARIABLE, "")
    if forced not in ("", "0", "1"):
        raise ConfigError(f"{CPU_BF16_VARIABLE}={forced!r}: expected 0 (auto picks fp32) or 1 (auto picks bf16).")
    if requested == "auto" and forced:
        name = "bf16" if forced == "1" else "fp32"
        return PrecisionChoice(name, requested, f"{CPU_BF16_VARIABLE}={forced} (this CPU's bf16 instruction: {unit or 'none'})")
    if requested == "fp32":
        return PrecisionChoice("fp32", requested, "asked for with --precision")
    if requested == "bf16":
        warning = None if unit else (
            "this CPU has no bf16 matrix instruction (neither AMX nor AVX512-BF16): bf16 is emulated and "
            "runs several times slower than fp32 here; --precision auto would pick fp32"
        )
        return PrecisionChoice("bf16", requested, "asked for with --precision", warning)
    if unit:
        return PrecisionChoice("bf16", requested, f"this CPU multiplies bf16 matrices with {unit}")
    return PrecisionChoice("fp32", requested, "this CPU has no bf16 matrix instruction (AMX or AVX512-BF16)")
