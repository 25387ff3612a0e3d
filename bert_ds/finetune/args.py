"""Options shared by the fine-tuning entrypoints (glue.py, squad.py, swag.py) -> `FinetuneConfig`.

Defaults follow the paper's fine-tuning recipe for BERT-LARGE: batch 32, lr 2e-5, 3 epochs, 10%
linear warm-up then linear decay, dropout 0.1, Adam with weight decay 0.01. `--grid` replaces
batch/lr/epochs by the paper's grid; `--restarts N` reruns every setting with N seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Optional

from bert_ds.config import PRESETS, ConfigError
from bert_ds.data.tokenizer import add_lowercase_argument
from bert_ds.training.args import add_precision_argument, micro_batch_size

PAPER_GRID = dict(batch_sizes=(16, 32), lrs=(5e-5, 3e-5, 2e-5), epochs=(2, 3, 4))


@dataclass
class FinetuneConfig:
    """One fine-tuning job: every run of its grid and restarts."""

    output: str
    """Folder for results.json, predictions and the selected model."""
    init: Optional[str] = None
    """A bert_ds checkpoint (ZeRO or portable) or a Hugging Face BERT folder; None: random weights."""
    preset: str = "large"
    """Model size when there is no --init (with --init the checkpoint decides)."""
    tokenizer: Optional[str] = None
    """Tokenizer; default: the one stored with --init."""
    lowercase: Optional[bool] = None
    """Override a WordPiece vocabulary's casing (None: the vocabulary's own)."""
    tensor_parallel: int = 1
    deepspeed_config: str = "zero1"
    zero_stage: Optional[int] = None
    precision: str = "auto"
    """auto, fp32, bf16 or fp16 (bert_ds/precision.py decides what `auto` means here)."""
    max_seq_length: int = 128
    batch_size: int = 32
    """Global batch size (micro batch x DP x accumulation)."""
    micro_batch_size: Optional[int] = None
    """Per-rank micro batch; None (`auto`): the largest divisor of the per-rank batch up to the
    model's ceiling (training/batch_plan.py)."""
    lr: float = 2e-5
    epochs: int = 3
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    clip_grad: float = 1.0
    dropout: Optional[float] = None
    """Hidden/attention/classifier dropout; None keeps the model's (0.1)."""
    seed: int = 42
    grid: bool = False
    grid_batch_sizes: tuple[int, ...] = PAPER_GRID["batch_sizes"]
    grid_lrs: tuple[float, ...] = PAPER_GRID["lrs"]
    grid_epochs: tuple[int, ...] = PAPER_GRID["epochs"]
    restarts: int = 1
    eval_batch_size: int = 64
    save_model: bool = True
    """Keep the selected run's weights as a portable checkpoint (OUTPUT/model), exportable to HF."""
    dry_run: Optional[str] = None
    """Print the launch plan for this device kind (auto, gpu or cpu) and exit; None: train."""
    world_size: Optional[int] = None
    """Processes the plan is for (default: from the launcher's variables)."""
    plan_json: Optional[str] = None
    """Also write the resolved plan as JSON to this path."""

    def settings(self) -> list["RunSettings"]:
        """Every (batch, lr, epochs, seed) to run, grid settings in order, restarts innermost."""
        if self.grid:
            combos = itertools.product(self.grid_batch_sizes, self.grid_lrs, self.grid_epochs)
        else:
            combos = [(self.batch_size, self.lr, self.epochs)]
        return [
            RunSettings(batch, lr, epochs, self.seed + restart)
            for batch, lr, epochs in combos
            for restart in range(self.restarts)
        ]


@dataclass(frozen=True)
class RunSettings:
    batch_size: int
    lr: float
    epochs: int
    seed: int

    def hyperparameters(self) -> dict:
        return dict(batch_size=self.batch_size, lr=self.lr, epochs=self.epochs)


def batch_plan(job: FinetuneConfig, settings: RunSettings, data_parallel: int, model_config, sequences_per_example: int = 1):
    """The BatchPlan of one run (training/batch_plan.py): --micro-batch-size, or `auto` up to the
    model's ceiling at --max-seq-length (a multiple-choice example is one sequence per choice)."""
    from bert_ds.training.batch_plan import micro_batch_ceiling, plan_batches

    ceiling = max(1, micro_batch_ceiling(model_config, job.max_seq_length) // sequences_per_example)
    return plan_batches(settings.batch_size, job.micro_batch_size, data_parallel, ceiling, option="--batch-size")


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--output", required=True, help="folder for results.json, predictions and the selected model")
    add("--init", default=None, help="bert_ds checkpoint (ZeRO or portable) or Hugging Face BERT folder")
    add("--preset", default="large", choices=sorted(PRESETS), help="model size without --init")
    add("--tokenizer", default=None, help="tokenizer (default: the one stored with --init)")
    add_lowercase_argument(parser)
    add("--tensor-parallel", type=int, default=1, help="tensor-parallel size")
    add("--deepspeed-config", default="zero1", help="ds_configs/ name or JSON path")
    add("--zero-stage", type=int, default=None, choices=[0, 1, 2], help="override the config's ZeRO stage")
    add_precision_argument(parser)
    add("--max-seq-length", type=int, default=None, help="tokens per sequence (default: per task)")
    add("--batch-size", type=int, default=32, help="global batch size")
    add("--micro-batch-size", type=micro_batch_size, default=None,
        help="per-rank micro batch, or auto: the largest that divides the per-rank batch up to the model's ceiling (default auto)")
    add("--lr", type=float, default=2e-5, help="peak learning rate")
    add("--epochs", type=int, default=3, help="training epochs")
    add("--warmup-proportion", type=float, default=0.1, help="share of steps for linear warm-up")
    add("--weight-decay", type=float, default=0.01)
    add("--clip-grad", type=float, default=1.0)
    add("--dropout", type=float, default=None, help="dropout (default: the model's 0.1)")
    add("--seed", type=int, default=42, help="seed of the first run; restarts use seed+1, seed+2, ...")
    add("--grid", action="store_true", help="the paper's grid: batch {16,32} x lr {5e-5,3e-5,2e-5} x epochs {2,3,4}")
    add("--grid-batch-sizes", type=_ints, default=PAPER_GRID["batch_sizes"], help="comma-separated, with --grid")
    add("--grid-lrs", type=_floats, default=PAPER_GRID["lrs"], help="comma-separated, with --grid")
    add("--grid-epochs", type=_ints, default=PAPER_GRID["epochs"], help="comma-separated, with --grid")
    add("--restarts", type=int, default=1, help="runs per setting with different seeds (best on dev kept)")
    add("--eval-batch-size", type=int, default=64)
    add("--no-save-model", dest="save_model", action="store_false", help="do not keep the selected model")
    add("--dry-run", nargs="?", const="auto", default=None, choices=["auto", "gpu", "cpu"],
        help="print the launch plan for this device (auto), or for GPUs or CPUs, and exit: 0 if the job would start, 2 otherwise")
    add("--world-size", type=int, default=None, help="processes to plan for (default: the launcher's variables)")
    add("--plan-json", default=None, help="also write the resolved launch plan as JSON to this path")
    add("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # deepspeed launcher


MAX_RUNS = 10_000  # grid settings x restarts: more is a typo, not a plan


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def config_from_args(args: argparse.Namespace, default_seq_length: int) -> FinetuneConfig:
    names = {f.name for f in dataclasses.fields(FinetuneConfig) if f.init}
    values = {k: v for k, v in vars(args).items() if k in names}
    # Python 3.11's argparse reads `--lr=--` as an empty list: a value that is missing.
    empty = sorted(k for k, v in values.items() if isinstance(v, list))
    if empty:
        raise ConfigError(f"Missing value for {', '.join('--' + k.replace('_', '-') for k in empty)}.")
    values["max_seq_length"] = default_seq_length if args.max_seq_length is None else args.max_seq_length
    job = FinetuneConfig(**values)
    grid = len(job.grid_batch_sizes) * len(job.grid_lrs) * len(job.grid_epochs) if job.grid else 1
    checks = [
        ("--restarts", 1 <= job.restarts and grid * job.restarts <= MAX_RUNS), ("--epochs", job.epochs >= 1),
        ("--batch-size", job.batch_size >= 1), ("--lr", _positive(job.lr)), ("--max-seq-length", job.max_seq_length >= 8),
        ("--warmup-proportion", 0 <= job.warmup_proportion < 1), ("--tensor-parallel", job.tensor_parallel >= 1),
        ("--grid-epochs", all(e >= 1 for e in job.grid_epochs)), ("--grid-batch-sizes", all(b >= 1 for b in job.grid_batch_sizes)),
        ("--grid-lrs", all(_positive(lr) for lr in job.grid_lrs)), ("--eval-batch-size", job.eval_batch_size >= 1),
        ("--micro-batch-size", job.micro_batch_size is None or job.micro_batch_size >= 1),
        ("--clip-grad", math.isfinite(job.clip_grad) and job.clip_grad >= 0),
        ("--weight-decay", math.isfinite(job.weight_decay) and job.weight_decay >= 0),
        ("--seed", 0 <= job.seed < 2**32),
        ("--world-size", job.world_size is None or job.world_size >= 1),
    ]
    bad = [name for name, ok in checks if not ok]
    if bad:
        raise ConfigError(f"Invalid value for {', '.join(bad)}.")
    return job
