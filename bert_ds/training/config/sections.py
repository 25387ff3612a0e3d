"""The sections of a job's configuration that pre-training and fine-tuning share: how it is
parallelised and run by DeepSpeed (`ParallelOptions`), the optimizer (`OptimizerOptions`) and
the launch plan (`PlanOptions`). Each entrypoint's tree (training/config/args.py RunConfig,
finetune/args.py FinetuneConfig) uses them or a subclass that adds its own fields, so a setting
both have is declared, defaulted and checked once.

Each section's `problems()` lists its values that are wrong on their own, as sentences naming
the option; rules between sections sit in the tree's `validate`.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Optional

from bert_ds.options import option
from bert_ds.runtime.precision import PRECISIONS


def auto_or_at_least(minimum: int, expected: str):
    """A parser of `auto` (None) or an integer of at least `minimum` (`expected` says it in words)."""

    def parse(text: str) -> Optional[int]:
        if text == "auto":
            return None
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected} or auto, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum} (or auto), got {value}")
        return value

    return parse


micro_batch_size = auto_or_at_least(1, "a positive integer")
"""--micro-batch-size: `auto` (None) or a positive integer."""
num_workers = auto_or_at_least(0, "a number of worker processes")
"""--num-workers: `auto` (None) or 0 or more."""


def step_timeout(text: str) -> Optional[float]:
    """--step-timeout: `auto` (None), 0 (off) or seconds (at least 1)."""
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, 0 (off) or auto, got {text!r}") from None
    if not (math.isfinite(value) and (value == 0 or value >= 1)):
        raise argparse.ArgumentTypeError(f"must be 0 (off), auto or at least 1 second, got {text}")
    return value


def flag(name: str) -> str:
    """The option of a field: lr -> --lr, clip_grad -> --clip-grad."""
    return "--" + name.replace("_", "-")


def at_least(section, minimum: int, *names: str) -> list[str]:
    """A problem for each named field below `minimum` (None, where allowed, means unset)."""
    return [f"{flag(name)} must be at least {minimum}, got {getattr(section, name)}"
            for name in names if getattr(section, name) is not None and getattr(section, name) < minimum]


def finite_non_negative(section, *names: str) -> list[str]:
    return [f"{flag(name)} must be a finite number >= 0, got {getattr(section, name)}"
            for name in names if not (math.isfinite(getattr(section, name)) and getattr(section, name) >= 0)]


def dropout_problems(section) -> list[str]:
    """--dropout, where given, is a probability below 1."""
    if section.dropout is not None and not 0.0 <= section.dropout < 1.0:
        return [f"--dropout must be in [0, 1), got {section.dropout}"]
    return []


def positive_finite(value: float) -> bool:
    return math.isfinite(value) and value > 0


@dataclass
class ParallelOptions:
    """How the job is split over processes and run by DeepSpeed."""

    tensor_parallel: int = 1
    """Tensor-parallel size TP (megatron-core layers)."""
    deepspeed_config: str = "zero1"
    """A ds_configs/ name (zero1, zero2, zero3, pipeline, zero2_offload, ...) or a JSON path."""
    zero_stage: Optional[int] = field(default=None, metadata=option(choices=[0, 1, 2, 3]))
    """Override the DeepSpeed config's ZeRO stage."""
    precision: str = field(default="auto", metadata=option(choices=PRECISIONS))
    """auto: bf16 on GPUs and on CPUs with a bf16 matrix instruction (AMX, AVX512-BF16), fp32
    elsewhere; bf16/fp16 are DeepSpeed mixed precision with fp32 master weights (fp16: GPUs only)."""
    collective_timeout: float = 600.0
    """Seconds a collective (all-reduce, broadcast, ...) may wait for a peer before the run fails,
    in every process group: the world's, megatron's TP/PP/DP groups and DeepSpeed's (torch's own
    defaults are 30 minutes for gloo and 10 for NCCL; megatron's groups get 30)."""
    step_timeout: Optional[float] = field(default=None, metadata=option(parse=step_timeout))
    """Seconds a rank may go without progress (a micro batch, an evaluation batch) before its
    watchdog writes every thread's stack to SAVE/hang/rank-R.txt (fine-tuning: OUTPUT/hang/) and
    ends the run with exit 98, which the pre-training Slurm script requeues: auto (10x the median
    measured step, at least 300 s), a number of seconds, or 0 (off). Start-up, the first step and
    checkpoint writes have --startup-timeout instead (training/loop/watchdog.py)."""
    startup_timeout: float = 1800.0
    """Seconds the watchdog allows for start-up (model, engine, data, checkpoint load), the first
    step and each checkpoint write."""

    def problems(self) -> list[str]:
        problems = at_least(self, 1, "tensor_parallel")
        for name in ("collective_timeout", "startup_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 10):
                problems.append(f"{flag(name)} must be at least 10 seconds, got {value:g}")
        return problems

    def watchdog_limits(self):
        """The watchdog's limits (training/loop/watchdog.py Limits)."""
        from bert_ds.training.loop.watchdog import Limits

        return Limits(step=self.step_timeout, startup=self.startup_timeout)

    def deepspeed_setup(self, batch, device_type: str, clip_grad: float, pipeline_parallel: int = 1):
        """The DeepSpeed config of these options for one batch plan (training/engine/ds_config.py
        DeepSpeedSetup: the config, its notes, the precision and the effective ZeRO stage)."""
        from bert_ds.training.engine.ds_config import build_deepspeed_config

        return build_deepspeed_config(self.deepspeed_config, batch, device_type, zero_stage=self.zero_stage,
                                      pipeline_parallel=pipeline_parallel, tensor_parallel=self.tensor_parallel,
                                      clip_grad=clip_grad, precision=self.precision)


@dataclass
class OptimizerOptions:
    """The optimizer: the paper's Adam with decoupled weight decay, or LAMB."""

    optimizer: str = field(default="adamw", metadata=option(choices=["adamw", "lamb"]))
    """adamw (the paper's Adam with decoupled weight decay) or lamb (large batches)."""
    weight_decay: float = 0.01
    """Decoupled weight decay of the weight matrices (biases and LayerNorm are exempt)."""
    adam_beta1: float = 0.9
    """Adam's first-moment decay."""
    adam_beta2: float = 0.999
    """Adam's second-moment decay."""
    adam_eps: float = 1e-6
    """Adam's epsilon (BERT's 1e-6)."""
    clip_grad: float = 1.0
    """Gradient-norm clipping threshold (0 turns it off)."""

    def problems(self) -> list[str]:
        problems = finite_non_negative(self, "weight_decay", "clip_grad", "adam_eps")
        problems += [f"{flag(name)} must be in [0, 1), got {getattr(self, name)}"
                     for name in ("adam_beta1", "adam_beta2") if not 0.0 <= getattr(self, name) < 1.0]
        return problems

    def optimizer_settings(self, lr: float, warmup_steps: int, total_steps: int):
        """The optimizer and LR schedule (training/engine/optim.py) for one run of these options."""
        from bert_ds.training.engine.optim import OptimizerSettings

        return OptimizerSettings(name=self.optimizer, lr=lr, weight_decay=self.weight_decay,
                                 betas=(self.adam_beta1, self.adam_beta2), eps=self.adam_eps,
                                 warmup_steps=warmup_steps, total_steps=total_steps)

    def describe(self) -> str:
        """One line for the launch plan."""
        name = {"adamw": "AdamW", "lamb": "LAMB"}[self.optimizer]
        return (f"{name} betas {self.adam_beta1:g}/{self.adam_beta2:g}, eps {self.adam_eps:g}, "
                f"weight decay {self.weight_decay:g}")


@dataclass
class PlanOptions:
    """The launch plan: print what the job would do, for any world size, without starting it."""

    dry_run: Optional[str] = field(default=None, metadata=option(nargs="?", const="auto", choices=["auto", "gpu", "cpu"]))
    """Print the launch plan (sizes, batch, ZeRO, precision, tokenizer, data, memory) for this
    device (auto), or for GPUs or CPUs, and exit: 0 if the job would start, 2 otherwise."""
    world_size: Optional[int] = None
    """Processes the plan is for (default: from the launcher's variables, as the real run)."""
    plan_json: Optional[str] = None
    """Also write the resolved launch plan as JSON to this path (dry run or real run)."""

    def problems(self) -> list[str]:
        return at_least(self, 1, "world_size")
