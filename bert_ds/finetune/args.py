"""Options shared by the fine-tuning entrypoints (glue.py, squad.py, swag.py) -> `FinetuneConfig`.

Defaults follow the paper's fine-tuning recipe for BERT-LARGE: batch 32, lr 2e-5, 3 epochs, 10%
linear warm-up then linear decay, dropout 0.1, Adam with weight decay 0.01. `--grid` replaces
batch/lr/epochs by the paper's grid; `--restarts N` reruns every setting with N seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Optional

from bert_ds.config import PRESETS, ConfigError, valid_seed, validate_layout
from bert_ds.options import add_options, from_namespace, option, sections
from bert_ds.training.config.sections import (
    OptimizerOptions, ParallelOptions, PlanOptions, at_least, dropout_problems, flag, micro_batch_size, positive_finite,
)

PAPER_GRID = dict(batch_sizes=(16, 32), lrs=(5e-5, 3e-5, 2e-5), epochs=(2, 3, 4))


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


MAX_RUNS = 10_000  # grid settings x restarts: more is a typo, not a plan


@dataclass
class StartOptions:
    """The starting point: the weights fine-tuned, their tokenizer, and where results go."""

    output: str
    """Folder for results.json, predictions and the selected model."""
    init: Optional[str] = None
    """A bert_ds checkpoint (ZeRO or portable) or a Hugging Face BERT folder; none: random weights."""
    preset: str = field(default="large", metadata=option(choices=sorted(PRESETS)))
    """Model size without --init (with --init the checkpoint decides)."""
    layer_norm_position: Optional[str] = field(default=None, metadata=option(choices=["post", "pre"]))
    """Without --init: where the random model's LayerNorms sit (default: the preset's, post);
    with --init the checkpoint decides."""
    tokenizer: Optional[str] = None
    """Tokenizer (default: the one stored with --init)."""
    lowercase: Optional[bool] = None
    """Lowercase and strip accents before WordPiece lookup (default: the vocabulary's own casing)."""

    def problems(self) -> list[str]:
        if self.init and self.layer_norm_position:
            return ["--layer-norm-position is for random weights (no --init): a checkpoint has its own"]
        return []


@dataclass
class HeadOptions:
    """How the encoder runs, and what sits between it and the task's output layer."""

    unpad: bool = field(default=True, metadata=option(flag="--no-unpad"))
    """Run the encoder's token-wise layers on a padded batch's real tokens only (at GLUE's lengths
    about a third of the padded ones); attention still sees the padded batch. Same model, same
    results up to float rounding; dropout masks are drawn for fewer rows, so a run differs from a
    padded one as a different seed would. --no-unpad: compute on the padding too, as Hugging
    Face's models do."""

    bilstm: bool = False
    """Table 5's "+ BiLSTM" row: a randomly initialised one-layer BiLSTM (H/2 per direction) on the
    encoder's token states, trained in fine-tuning only; span extraction scores its outputs,
    classification and multiple choice its final states (no pooler). The kept model is a bert_ds
    portable checkpoint: Hugging Face has no such model, so export-hf refuses it."""

    def problems(self) -> list[str]:
        return []


@dataclass
class FinetuneParallel(ParallelOptions):
    """How the job is split over processes (world = TP x DP) and run by DeepSpeed."""

    def problems(self) -> list[str]:
        return super().problems()


@dataclass
class RecipeOptions(OptimizerOptions):
    """The paper's fine-tuning recipe for one setting (the optimizer's fields are pre-training's)."""

    max_seq_length: int = field(default=128, metadata=option(parser_default=None))
    """Tokens per sequence (default: per task: 128 for GLUE and SWAG, 384 for SQuAD)."""
    batch_size: int = 32
    """Global batch size (micro batch x DP x accumulation)."""
    micro_batch_size: Optional[int] = field(default=None, metadata=option(parse=micro_batch_size))
    """Per-rank micro batch, or auto: the largest that divides the per-rank batch up to the model's
    ceiling (training/config/batch_plan.py; default auto)."""
    lr: float = 2e-5
    """Peak learning rate."""
    epochs: int = 3
    """Training epochs."""
    warmup_proportion: float = 0.1
    """Share of the steps for linear warm-up (then linear decay to 0)."""
    max_train_examples: Optional[int] = None
    """Train on the first N training features only (examples; SQuAD: windows), as Hugging Face's
    --max_train_samples: quick experiments, and Table 5's cpu scale. Dev and test stay whole."""
    dropout: Optional[float] = None
    """Hidden, attention and classifier dropout (default: the model's 0.1)."""
    seed: int = 42
    """Seed of the first run; restarts use seed+1, seed+2, ..."""

    def problems(self) -> list[str]:
        problems = super().problems() + at_least(self, 1, "epochs", "batch_size", "micro_batch_size", "max_train_examples")
        problems += at_least(self, 8, "max_seq_length")
        if not positive_finite(self.lr):
            problems.append(f"--lr must be positive and finite, got {self.lr}")
        if not 0 <= self.warmup_proportion < 1:
            problems.append(f"--warmup-proportion must be in [0, 1), got {self.warmup_proportion}")
        problems += dropout_problems(self)
        if not valid_seed(self.seed):
            problems.append(f"--seed {self.seed} must be in [0, 2**32)")
        return problems


@dataclass
class GridOptions:
    """The paper's hyper-parameter grid and restarts; the best run on dev is kept."""

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

    @property
    def settings_per_restart(self) -> int:
        return len(self.grid_batch_sizes) * len(self.grid_lrs) * len(self.grid_epochs) if self.grid else 1

    def problems(self) -> list[str]:
        problems = []
        if not (1 <= self.restarts and self.settings_per_restart * self.restarts <= MAX_RUNS):
            problems.append(f"--restarts {self.restarts} must be at least 1, with at most {MAX_RUNS:,} runs in all")
        if not all(e >= 1 for e in self.grid_epochs):
            problems.append(f"--grid-epochs must all be at least 1, got {self.grid_epochs}")
        if not all(b >= 1 for b in self.grid_batch_sizes):
            problems.append(f"--grid-batch-sizes must all be at least 1, got {self.grid_batch_sizes}")
        if not all(positive_finite(lr) for lr in self.grid_lrs):
            problems.append(f"--grid-lrs must all be positive and finite, got {self.grid_lrs}")
        return problems


@dataclass
class OutputOptions:
    """Predictions and the kept model."""

    eval_batch_size: int = 64
    """Sequences per forward when predicting dev and test."""
    save_model: bool = field(default=True, metadata=option(flag="--no-save-model"))
    """Keep the selected run's weights as OUTPUT/model (a portable checkpoint, exportable to HF);
    --no-save-model: do not."""

    def problems(self) -> list[str]:
        return at_least(self, 1, "eval_batch_size")


@dataclass
class FinetuneConfig:
    """One fine-tuning job (every run of its grid and restarts) as a tree of sections; parallel,
    the optimizer in recipe, and plan are pre-training's sections (training/config/sections.py). Each
    leaf field is one command-line option of the fine-tuning entrypoints (bert_ds/options.py)."""

    start: StartOptions
    """The starting point: the weights fine-tuned, their tokenizer, and where results go."""
    head: HeadOptions = field(default_factory=HeadOptions)
    """How the encoder runs, and what sits between it and the task's output layer."""
    parallel: FinetuneParallel = field(default_factory=FinetuneParallel)
    """How the job is split over processes (world = TP x DP) and run by DeepSpeed."""
    recipe: RecipeOptions = field(default_factory=RecipeOptions)
    """The paper's fine-tuning recipe for one setting: sequence length, batch, optimizer, schedule."""
    grid: GridOptions = field(default_factory=GridOptions)
    """The paper's hyper-parameter grid and restarts; the best run on dev is kept."""
    outputs: OutputOptions = field(default_factory=OutputOptions)
    """Predictions and the kept model."""
    plan: PlanOptions = field(default_factory=PlanOptions)
    """The launch plan: print what the job would do, for any world size, without starting it."""

    def validate(self, world_size: Optional[int] = None, model_config=None, sequences_per_example: int = 1) -> None:
        """Every rule, in one place: each section's values as one ConfigError naming every wrong
        option; with `world_size` and the starting point's `model_config` (the launch plan, which
        the dry run and the real job share) also whether the model splits over TP and every
        setting's batch over DP."""
        problems = [p for name in sections(FinetuneConfig) for p in getattr(self, name).problems()]
        if problems:
            raise ConfigError("Invalid options: " + "; ".join(problems) + ".")
        if world_size is not None and model_config is not None:
            dp = validate_layout(model_config, world_size, self.parallel.tensor_parallel, 1)
            for settings in self.settings():
                batch_plan(self, settings, dp, model_config, sequences_per_example)

    def with_restarts(self, restarts: int) -> "FinetuneConfig":
        return dataclasses.replace(self, grid=dataclasses.replace(self.grid, restarts=restarts))

    def settings(self) -> list["RunSettings"]:
        """Every (batch, lr, epochs, seed) to run, grid settings in order, restarts innermost."""
        grid, recipe = self.grid, self.recipe
        if grid.grid:
            combos = itertools.product(grid.grid_batch_sizes, grid.grid_lrs, grid.grid_epochs)
        else:
            combos = [(recipe.batch_size, recipe.lr, recipe.epochs)]
        return [
            RunSettings(batch, lr, epochs, recipe.seed + restart)
            for batch, lr, epochs in combos
            for restart in range(grid.restarts)
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
    """The BatchPlan of one run (training/config/batch_plan.py): --micro-batch-size, or `auto` up to the
    model's ceiling at --max-seq-length (a multiple-choice example is one sequence per choice)."""
    from bert_ds.training.config.batch_plan import micro_batch_ceiling, plan_batches

    ceiling = max(1, micro_batch_ceiling(model_config, job.recipe.max_seq_length) // sequences_per_example)
    return plan_batches(settings.batch_size, job.recipe.micro_batch_size, data_parallel, ceiling, option="--batch-size")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Every FinetuneConfig option (the task entrypoints add their own data options first)."""
    add_options(parser, FinetuneConfig)
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # deepspeed launcher


def config_from_args(args: argparse.Namespace, default_seq_length: int) -> FinetuneConfig:
    """The job's config tree from the parsed options (the task's own options stay in `args`),
    its values checked (FinetuneConfig.validate)."""
    values = dict(vars(args))
    # Python 3.11's argparse reads `--lr=--` as an empty list: a value that is missing.
    empty = sorted(k for k, v in values.items() if isinstance(v, list) and not v)
    if empty:
        raise ConfigError(f"Missing value for {', '.join(flag(k) for k in empty)}.")
    if values["max_seq_length"] is None:
        values["max_seq_length"] = default_seq_length
    job = from_namespace(FinetuneConfig, values)
    job.validate()
    return job
