"""The DeepSpeed JSON config of a run: a ds_configs/ file plus the run's sizes.

Users pick a ready config by name (`zero1`, `zero2`, `zero3`, `pipeline`, `zero2_offload`,
`zero2_fp16`) or pass their own JSON. bert_ds fills in what it owns: batch sizes (the run's batch
plan: global = micro x DP x accumulation), gradient clipping, an optional ZeRO-stage override and the
precision (`--precision`, decided in bert_ds/runtime/precision.py: the JSON's `bf16`/`fp16` sections keep
their settings, but whether one is enabled follows that choice). The optimizer and LR schedule come
from bert_ds options (the paper's recipe), so a JSON `optimizer`/`scheduler` section is refused
rather than silently ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

from bert_ds.config import ConfigError
from bert_ds.runtime.precision import MIXED, PrecisionChoice, choose_precision

CONFIG_DIR = Path(__file__).resolve().parents[3] / "ds_configs"


def available_configs() -> list[str]:
    return sorted(path.stem for path in CONFIG_DIR.glob("*.json"))


def resolve_config_path(name_or_path: str) -> Path:
    # os.path.isfile, not Path.is_file: a name too long for the file system (or holding a NUL
    # byte) is simply not a file, rather than an OSError.
    if os.path.isfile(name_or_path):
        return Path(name_or_path)
    named = CONFIG_DIR / f"{name_or_path}.json"
    if os.path.isfile(named):
        return named
    raise ConfigError(
        f"DeepSpeed config {name_or_path!r} is neither a file nor one of ds_configs/: "
        f"{', '.join(available_configs())}."
    )


def load_json(path: Path) -> dict:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ConfigError(f"DeepSpeed config {path}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}.") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"DeepSpeed config {path} is not UTF-8 (byte {error.start}: {error.reason}).") from None
    except RecursionError:
        raise ConfigError(f"DeepSpeed config {path}: JSON nested too deeply.") from None
    except OSError as error:
        raise ConfigError(f"DeepSpeed config {path} cannot be read: {error.strerror}.") from None
    if not isinstance(config, dict):
        raise ConfigError(f"DeepSpeed config {path} must hold a JSON object.")
    return config


class DeepSpeedSetup(NamedTuple):
    """A built config and what was decided while building it. `zero_stage` is the effective stage
    (after --zero-stage and the single-replica rule below): the one value the optimizer choice,
    the engine, malloc tuning and the plan read; DeepSpeed's `engine.zero_optimization_stage()`
    reads the same number back out of `config`."""

    config: dict
    notes: list[str]
    precision: PrecisionChoice

    @property
    def zero_stage(self) -> int:
        return self.config["zero_optimization"].get("stage", 0)

    @property
    def keeps_own_masters(self) -> bool:
        """bf16 with bert_ds's fp32 masters (training/engine/master_weights.py): one replica, no ZeRO;
        DeepSpeed's own bf16 section is then off, so it neither casts the model nor wraps the optimizer."""
        return self.precision.name == "bf16" and not self.config.get("bf16", {}).get("enabled")

    @property
    def offloaded(self) -> bool:
        """Whether ZeRO-Offload steps the optimizer on the CPU."""
        return _offloaded(self.config["zero_optimization"])


def build_deepspeed_config(name_or_path: str, batch, device_type: str, *, zero_stage=None, pipeline_parallel: int = 1,
                           tensor_parallel: int = 1, clip_grad: float = 1.0, precision: str = "auto") -> DeepSpeedSetup:
    """The config dict for deepspeed.initialize, notes worth telling the user, and the precision.

    `batch` is the run's BatchPlan (training/config/batch_plan.py); `zero_stage` overrides the file's;
    `device_type` is "cpu" or an accelerator's (a launch plan made without one says "gpu");
    `precision` is --precision (auto, fp32, bf16, fp16)."""
    path = resolve_config_path(name_or_path)
    config = load_json(path)
    notes = []
    for section in ("optimizer", "scheduler"):
        if section in config:
            raise ConfigError(
                f"DeepSpeed config {path}: remove the '{section}' section; bert_ds sets the optimizer and "
                "learning-rate schedule from --optimizer, --lr, --warmup-steps and --train-steps."
            )
    for section in ("zero_optimization", "bf16", "fp16"):
        if not isinstance(config.get(section, {}), dict):
            raise ConfigError(f"DeepSpeed config {path}: '{section}' must be an object.")
    zero = config.setdefault("zero_optimization", {})
    offload = zero.get("offload_optimizer")
    if offload is not None and not (isinstance(offload, dict) and isinstance(offload.get("device", "none"), str)):
        raise ConfigError(
            f"DeepSpeed config {path}: zero_optimization.offload_optimizer must be an object with a 'device' string."
        )
    if zero_stage is not None:
        zero["stage"] = zero_stage
    stage = zero.get("stage", 0)
    if type(stage) is not int or stage not in (0, 1, 2, 3):  # not 1.0 or true: DeepSpeed wants an int
        raise ConfigError(f"DeepSpeed config {path}: zero_optimization.stage must be 0-3, got {stage!r}.")
    if pipeline_parallel > 1 and stage > 1:
        raise ConfigError(
            f"ZeRO stage {stage} cannot be combined with pipeline parallelism {pipeline_parallel} "
            "(DeepSpeed supports stage 0 or 1 with pipelines); use --zero-stage 1."
        )
    if pipeline_parallel > 1 and stage == 0 and clip_grad > 0:
        raise ConfigError(
            "Pipeline parallelism with gradient clipping needs ZeRO stage 1: without it DeepSpeed 0.19.8 "
            "computes the clipping norm over the wrong parameters; use --zero-stage 1 or --clip-grad 0."
        )
    # Our optimizers (torch AdamW, LAMB) are tested with ZeRO here; DeepSpeed asks for this opt-in.
    config["zero_allow_untested_optimizer"] = True
    config["train_micro_batch_size_per_gpu"] = batch.micro_batch_size
    config["gradient_accumulation_steps"] = batch.accumulation
    config["train_batch_size"] = batch.global_batch_size
    config["gradient_clipping"] = clip_grad
    asked_by_file = training_precision(config)
    choice = choose_precision(precision, device_type, asked_by_file)
    if asked_by_file != "fp32" and asked_by_file != choice.name:
        notes.append(f"{path.name} enables {asked_by_file}; --precision {precision} trains in {choice.describe()}")
    if choice.warning:
        notes.append(f"--precision {choice.name}: {choice.warning}")
    _apply_precision(config, choice)
    pipeline_clipping = pipeline_parallel > 1 and clip_grad > 0
    if zero_stage is None and _partitions_nothing(config, batch.data_parallel, pipeline_clipping):
        notes.append(
            f"{path.name}: one data-parallel replica in fp32, so ZeRO stage {zero['stage']} would partition "
            "nothing and only copy every gradient and weight each step; using stage 0 (--zero-stage overrides)."
        )
        zero["stage"] = 0
    single_rank = batch.data_parallel == 1 and tensor_parallel == 1 and pipeline_parallel == 1
    if choice.name == "bf16" and single_rank and zero_stage in (None, 0) and zero.get("stage", 0) < 3 and not _offloaded(zero):
        if zero.get("stage", 0) != 0:
            notes.append(
                f"{path.name}: one replica in bf16, so ZeRO stage {zero['stage']} would partition nothing; bert_ds keeps "
                "the fp32 master weights itself, without DeepSpeed's flat copies, at stage 0 (--zero-stage overrides)."
            )
            zero["stage"] = 0
        config["bf16"]["enabled"] = False
    config.setdefault("steps_per_print", 10**9)  # bert_ds logs progress itself
    return DeepSpeedSetup(config, notes, choice)


# DeepSpeed's documented dynamic loss scaling, for an fp16 run whose JSON has no fp16 section.
FP16_DEFAULTS = dict(loss_scale=0, initial_scale_power=16, loss_scale_window=1000, hysteresis=2, min_loss_scale=1)


def _apply_precision(config: dict, choice: PrecisionChoice) -> None:
    """Enable exactly the chosen 16-bit mode; the JSON's other settings for it are kept."""
    for name in MIXED:
        section = config.setdefault(name, {})
        section["enabled"] = name == choice.name
        if not section["enabled"] and len(section) == 1:
            del config[name]
    if choice.name == "fp16":
        for key, value in FP16_DEFAULTS.items():
            config["fp16"].setdefault(key, value)
    if choice.name == "bf16":
        # A step whose gradients overflowed is skipped rather than applied (training/loop/health.py).
        config["bf16"].setdefault("check_grad_overflow", True)


def _partitions_nothing(config: dict, data_parallel: int, pipeline_clipping: bool) -> bool:
    """ZeRO-1/2 over a single fp32 replica: no memory saved, only copies. Offload needs ZeRO,
    pipelines with clipping need ZeRO-1 (see above), and bf16/fp16 keep DeepSpeed's ZeRO master
    weights, so those keep their stage."""
    zero = config["zero_optimization"]
    if any(config.get(p, {}).get("enabled") for p in ("bf16", "fp16")):
        return False
    return data_parallel == 1 and zero.get("stage", 0) in (1, 2) and not _offloaded(zero) and not pipeline_clipping


def _offloaded(zero: dict) -> bool:
    return (zero.get("offload_optimizer") or {}).get("device", "none") != "none"


def configured_precision(requested: str, name_or_path: str, device_type: str) -> PrecisionChoice:
    """The choice `build_deepspeed_config` makes for this --precision, DeepSpeed JSON and device,
    for records written after the engine is built (the decision is deterministic)."""
    return choose_precision(requested, device_type, training_precision(load_json(resolve_config_path(name_or_path))))


def training_precision(config: dict) -> str:
    """"bf16", "fp16" or "fp32": what a built config trains in."""
    for name in ("bf16", "fp16"):
        if config.get(name, {}).get("enabled"):
            return name
    return "fp32"


def skip_single_replica_allreduce(engine, data_parallel: int) -> None:
    """Without ZeRO and with one data-parallel replica there is nothing to average, but DeepSpeed
    would still flatten, "all-reduce" and copy back every gradient after each backward."""
    if data_parallel == 1 and engine.zero_optimization_stage() == 0 and not engine.pipeline_parallelism:
        engine.enable_backward_allreduce = False
