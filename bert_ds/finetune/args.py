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
from dataclasses import dataclass, field
from typing import Optional

from bert_ds.config import PRESETS, ConfigError, valid_seed
from bert_ds.options import add_options, option
from bert_ds.precision import PRECISIONS
from bert_ds.training.args import micro_batch_size

PAPER_GRID = dict(batch_sizes=(16, 32), lrs=(5e-5, 3e-5, 2e-5), epochs=(2, 3, 4))


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


# Fine-tuning takes ZeRO 0-2: predict() gives the DP ranks different numbers of batches, and a
# ZeRO-3 forward is collective (every rank gathers each layer's weights), so it would wait forever.
FINETUNE_ZERO_STAGES = [0, 1, 2]


@dataclass
class FinetuneConfig:
    """One fine-tuning job: every run of its grid and restarts. Each field is one command-line
    option of the fine-tuning entrypoints (bert_ds/options.py), its docstring the --help."""

    output: str
    """Folder for results.json, predictions and the selected model."""
    init: Optional[str] = None
    """A bert_ds checkpoint (ZeRO or portable) or a Hugging Face BERT folder; none: random weights."""
    preset: str = field(default="large", metadata=option(choices=sorted(PRESETS)))
    """Model size without --init (with --init the checkpoint decides)."""
    tokenizer: Optional[str] = None
    """Tokenizer (default: the one stored with --init)."""
    lowercase: Optional[bool] = None
    """Lowercase and strip accents before WordPiece lookup (default: the vocabulary's own casing)."""
    tensor_parallel: int = 1
    """Tensor-parallel size TP."""
    deepspeed_config: str = "zero1"
    """A ds_configs/ name or a JSON path."""
    zero_stage: Optional[int] = field(default=None, metadata=option(choices=FINETUNE_ZERO_STAGES))
    """Override the DeepSpeed config's ZeRO stage (0-2: see FINETUNE_ZERO_STAGES)."""
    precision: str = field(default="auto", metadata=option(choices=PRECISIONS))
    """auto, fp32, bf16 or fp16 (bert_ds/precision.py decides what auto means on this machine)."""
    max_seq_length: int = field(default=128, metadata=option(parser_default=None))
    """Tokens per sequence (default: per task: 128 for GLUE and SWAG, 384 for SQuAD)."""
    batch_size: int = 32
    """Global batch size (micro batch x DP x accumulation)."""
    micro_batch_size: Optional[int] = field(default=None, metadata=option(parse=micro_batch_size))
    """Per-rank micro batch, or auto: the largest that divides the per-rank batch up to the model's
    ceiling (training/batch_plan.py; default auto)."""
    lr: float = 2e-5
    """Peak learning rate."""
    epochs: int = 3
    """Training epochs."""
    warmup_proportion: float = 0.1
    """Share of the steps for linear warm-up (then linear decay to 0)."""
    weight_decay: float = 0.01
    """Decoupled weight decay of the weight matrices."""
    clip_grad: float = 1.0
    """Gradient-norm clipping threshold (0 turns it off)."""
    dropout: Optional[float] = None
    """Hidden, attention and classifier dropout (default: the model's 0.1)."""
    seed: int = 42
    """Seed of the first run; restarts use seed+1, seed+2, ..."""
    grid: bool = False
    """The paper's grid: batch {16,32} x lr {5e-5,3e-5,2e-5} x epochs {2,3,4}, the best on dev kept."""
    grid_batch_sizes: tuple[int, ...] = field(default=PAPER_GRID["batch_sizes"], metadata=option(parse=_ints))
    """Comma-separated batch sizes of --grid."""
    grid_lrs: tuple[float, ...] = field(default=PAPER_GRID["lrs"], metadata=option(parse=_floats))
    """Comma-separated learning rates of --grid."""
    grid_epochs: tuple[int, ...] = field(default=PAPER_GRID["epochs"], metadata=option(parse=_ints))
    """Comma-separated epoch counts of --grid."""
    restarts: int = 1
    """Runs per setting with different seeds (the best on dev is kept)."""
    eval_batch_size: int = 64
    """Sequences per forward when predicting dev and test."""
    save_model: bool = field(default=True, metadata=option(flag="--no-save-model"))
    """Keep the selected run's weights as OUTPUT/model (a portable checkpoint, exportable to HF);
    --no-save-model: do not."""
    dry_run: Optional[str] = field(default=None, metadata=option(nargs="?", const="auto", choices=["auto", "gpu", "cpu"]))
    """Print the launch plan for this device (auto), or for GPUs or CPUs, and exit: 0 if the job
    would start, 2 otherwise."""
    world_size: Optional[int] = None
    """Processes the plan is for (default: from the launcher's variables)."""
    plan_json: Optional[str] = None
    """Also write the resolved launch plan as JSON to this path."""

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


SECTIONS = {
    "starting point": ("output", "init", "preset", "tokenizer", "lowercase"),
    "parallelism and DeepSpeed": ("tensor_parallel", "deepspeed_config", "zero_stage", "precision"),
    "recipe": ("max_seq_length", "batch_size", "micro_batch_size", "lr", "epochs", "warmup_proportion", "weight_decay",
               "clip_grad", "dropout", "seed"),
    "grid and restarts": ("grid", "grid_batch_sizes", "grid_lrs", "grid_epochs", "restarts"),
    "predictions and outputs": ("eval_batch_size", "save_model"),
    "launch plan": ("dry_run", "world_size", "plan_json"),
}


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Every FinetuneConfig option (the task entrypoints add their own data options first)."""
    add_options(parser, FinetuneConfig, SECTIONS)
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # deepspeed launcher


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
        ("--seed", valid_seed(job.seed)),
        ("--world-size", job.world_size is None or job.world_size >= 1),
    ]
    bad = [name for name, ok in checks if not ok]
    if bad:
        raise ConfigError(f"Invalid value for {', '.join(bad)}.")
    return job
