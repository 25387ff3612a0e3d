"""Command-line options of `bert_ds/pretrain.py` -> one validated `RunConfig`.

Defaults depend on the preset: the paper's recipe (DESIGN.md) for base and large; small, fast
values for tiny/mini/small so a CPU run finishes in minutes. Every user error becomes a
ConfigError with one sentence naming the option, which the entrypoint prints without a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional

from bert_ds.config import PRESETS, ConfigError, DataConfig, ModelConfig, model_preset
from bert_ds.data.splitters import DEFAULT_SPLITTER, SPLITTERS
from bert_ds.data.tokenizer import add_lowercase_argument

# The paper: batch 256 x 512 tokens... as 256 sequences, Adam lr 1e-4, 10k warm-up, 1M steps.
# The micro batch is not here: by default `auto` picks it per layout (training/batch_plan.py).
_PAPER = dict(global_batch_size=256, lr=1e-4, warmup_steps=10_000, train_steps=1_000_000)
TRAINING_DEFAULTS = {
    "tiny": dict(global_batch_size=16, lr=1e-3, warmup_steps=10, train_steps=100),
    "mini": dict(global_batch_size=32, lr=5e-4, warmup_steps=50, train_steps=1_000),
    "small": dict(global_batch_size=64, lr=3e-4, warmup_steps=500, train_steps=20_000),
    "base": dict(_PAPER),
    "large": dict(_PAPER),
}


@dataclass
class RunConfig:
    """Everything one pre-training run needs; built by `parse_args`."""

    preset: str = "tiny"
    """Model size: tiny, mini, small, base or large."""
    tensor_parallel: int = 1
    """Tensor-parallel size TP (megatron-core layers)."""
    pipeline_parallel: int = 1
    """Pipeline-parallel size PP (DeepSpeed PipelineModule)."""
    deepspeed_config: str = "zero1"
    """A ds_configs/ name (zero1, zero2, zero3, pipeline, zero2_offload, ...) or a JSON path."""
    zero_stage: Optional[int] = None
    """Override of the config's ZeRO stage (0-3)."""
    precision: str = "auto"
    """auto, fp32, bf16 or fp16: bf16 where this device multiplies bf16 fast (bert_ds/precision.py)."""
    data: list[str] = field(default_factory=lambda: ["sample"])
    """Sources `[NAME=]LOCATION[@WEIGHT][#LAYOUT]`; "sample" is the built-in corpus."""
    sentence_splitter: str = DEFAULT_SPLITTER
    """The sentence splitter of the data pipeline (data/splitters.py)."""
    eval_data: Optional[list[str]] = None
    """Held-out sources (the --data syntax); default with the sample: its held-out articles."""
    eval_interval: Optional[int] = None
    """Evaluate every this many steps (None: no evaluation)."""
    eval_samples: Optional[int] = None
    """Examples in the evaluation set (None: up to DEFAULT_EVAL_SAMPLES, as many as the data holds)."""
    eval_only: bool = False
    """Evaluate the loaded checkpoint (or the initial weights) once and exit; nothing is trained or saved."""
    target_mlm_accuracy: Optional[float] = None
    """Stop (with a checkpoint) at the first evaluation reaching this held-out masked-LM accuracy."""
    keep_best: bool = False
    """Checkpoint at every evaluation that improves held-out masked-LM accuracy and keep the best
    one apart from --keep-last (best.json names it)."""
    tokenizer: Optional[str] = None
    """sentencepiece .model, vocab.txt, a folder, or bert-base-uncased / bert-base-cased (built in);
    default: bert-base-uncased for base/large on your own --data, a sentencepiece model trained
    on the built-in sample for the sample."""
    lowercase: Optional[bool] = None
    """Override a WordPiece vocabulary's casing (None: the vocabulary's own, see data/wordpiece.py)."""
    seq_length: int = 128
    """Tokens per sequence ([CLS]/[SEP] included): 128 in the paper's phase 1, 512 in phase 2."""
    micro_batch_size: Optional[int] = None
    """Sequences per forward/backward on one rank; None (`auto`): chosen by the batch plan."""
    global_batch_size: int = 16
    """Sequences per optimizer step over all data-parallel ranks."""
    train_steps: int = 100
    lr: float = 1e-3
    warmup_steps: int = 10
    optimizer: str = "adamw"
    """adamw (default) or lamb."""
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    clip_grad: float = 1.0
    """Gradient-norm clipping threshold (0 turns it off)."""
    objective: str = "mlm_nsp"
    dropout: Optional[float] = None
    """Hidden and attention dropout; None keeps the preset's 0.1."""
    layer_norm_position: str = "post"
    activation_checkpointing: bool = False
    dynamic_masking: bool = True
    num_workers: int = 0
    seed: int = 1234
    save: Optional[str] = None
    save_interval: int = 0
    """Steps between checkpoints (0: only at the end)."""
    keep_last: Optional[int] = None
    """Keep only the newest N complete checkpoints."""
    load: Optional[str] = None
    """Resume from the latest complete checkpoint in this folder (an error if there is none)."""
    auto_resume: bool = False
    """Resume from --save's latest complete checkpoint when there is one, else start fresh."""
    stop_at_step: Optional[int] = None
    """Leave the loop after this step (saving a checkpoint when --save is set) as if interrupted;
    the schedule still follows --train-steps. For time-sliced jobs and resume tests."""
    phase_start_step: Optional[int] = None
    """This run is a phase that starts at this step (phase 2 of the paper's recipe: where phase 1
    stopped): it must resume from a checkpoint at this step or later, else it stops with exit 2."""
    fallback_to_previous: bool = False
    """When the latest checkpoint is damaged (a file missing or truncated), resume from the newest
    intact earlier one instead of stopping."""
    max_skipped_steps: int = 20
    """Stop after this many consecutive steps whose gradients were not finite (each is skipped)."""
    example_log: Optional[str] = None
    """Write each step's example ids to EXAMPLE_LOG.dpN (one file per data-parallel rank); on resume
    the log is cut back to the checkpoint's step, so it lists exactly the examples trained on."""
    log_interval: int = 10
    metrics_file: Optional[str] = None
    tensorboard_dir: Optional[str] = None
    dry_run: Optional[str] = None
    """Print the launch plan for this device kind (auto, gpu or cpu) and exit; None: train."""
    world_size: Optional[int] = None
    """Processes the plan is for (default: from the launcher's variables, as the real run)."""
    plan_from_step: Optional[int] = None
    """With --dry-run: plan as if resuming at this step, without looking for the checkpoint (a
    later phase planned before the earlier one ran)."""
    plan_json: Optional[str] = None
    """Also write the resolved plan as JSON to this path (dry run or real run)."""

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model for this run, with `vocab_size` from the tokenizer (padded for TP)."""
        overrides = dict(
            vocab_size=vocab_size,
            layer_norm_position=self.layer_norm_position,
            causal=self.objective == "ltr",
            activation_checkpointing=self.activation_checkpointing,
        )
        if self.dropout is not None:
            overrides.update(hidden_dropout=self.dropout, attention_dropout=self.dropout)
        return model_preset(self.preset, **overrides)

    def optimizer_settings(self):
        """The optimizer and LR schedule of this run (training/optim.py)."""
        from bert_ds.training.optim import OptimizerSettings

        return OptimizerSettings(
            name=self.optimizer, lr=self.lr, weight_decay=self.weight_decay, betas=(self.adam_beta1, self.adam_beta2),
            eps=self.adam_eps, warmup_steps=self.warmup_steps, total_steps=self.train_steps,
        )

    def data_config(self) -> DataConfig:
        return DataConfig(
            seq_length=self.seq_length,
            micro_batch_size=self.micro_batch_size,
            objective=self.objective,
            dynamic_masking=self.dynamic_masking,
            num_workers=self.num_workers,
            sentence_splitter=self.sentence_splitter,
            seed=self.seed,
        )

    def validate_batch(self, data_parallel: int) -> int:
        """Gradient-accumulation steps: global batch = micro batch x DP x accumulation."""
        from bert_ds.training.batch_plan import plan_batches

        if self.micro_batch_size is None:
            raise ConfigError("The micro batch is `auto` until the launch plan resolves it (training/plan.py).")
        return plan_batches(self.global_batch_size, self.micro_batch_size, data_parallel, self.micro_batch_size).accumulation


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bert_ds/pretrain.py",
        description="Pre-train BERT (masked LM + next sentence prediction) with DeepSpeed and megatron-core.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--preset", default="tiny", choices=sorted(PRESETS), help="model size")
    add("--tensor-parallel", type=int, default=1, help="tensor-parallel size")
    add("--pipeline-parallel", type=int, default=1, help="pipeline-parallel size")
    add("--deepspeed-config", default=None, help="ds_configs/ name or JSON path (default zero1; pipeline for PP>1)")
    add("--zero-stage", type=int, choices=[0, 1, 2, 3], default=None, help="override the config's ZeRO stage")
    add_precision_argument(parser)
    add("--data", nargs="+", default=["sample"],
        help="sources [NAME=]LOCATION[@WEIGHT][#LAYOUT]; LAYOUT: book, article, sentences[:N] or lines "
        "(default by kind: sentences:256 for the hub's BookCorpus, article for other hub data and JSON/Parquet, book for .txt)")
    add("--sentence-splitter", default=DEFAULT_SPLITTER, choices=SPLITTERS, help="how paragraphs are cut into sentences")
    add("--eval-data", nargs="+", default=None,
        help="held-out sources, as --data (default with the sample: its held-out Wikipedia articles)")
    add("--eval-interval", type=int, default=None, help="evaluate on the held-out set every N steps (default: never)")
    add("--eval-samples", type=int, default=None, help="examples in the held-out set (default: up to 1000)")
    add("--eval-only", action="store_true", help="evaluate the loaded checkpoint once and exit")
    add("--target-mlm-accuracy", type=float, default=None,
        help="stop with a checkpoint at the first evaluation reaching this held-out masked-LM accuracy (MLPerf: 0.72)")
    add("--keep-best", action="store_true", help="also keep the checkpoint of the best evaluation (best.json)")
    add("--tokenizer", default=None, help="sentencepiece .model, vocab.txt, folder, or bert-base-uncased / "
        "bert-base-cased (default: bert-base-uncased for base/large on your own --data; the sample's own)")
    add_lowercase_argument(parser)
    add("--seq-length", type=int, default=128)
    add("--micro-batch-size", type=micro_batch_size, default=None,
        help="per rank, or auto: the largest that divides the per-rank batch up to the preset's ceiling (default auto)")
    add("--global-batch-size", type=int, default=None, help="sequences per optimizer step (default: by preset)")
    add("--train-steps", type=int, default=None, help="optimizer steps (default: by preset)")
    add("--lr", type=float, default=None, help="peak learning rate (default: by preset)")
    add("--warmup-steps", type=int, default=None, help="linear warm-up steps (default: by preset)")
    add("--optimizer", default="adamw", choices=["adamw", "lamb"])
    add("--weight-decay", type=float, default=0.01)
    add("--clip-grad", type=float, default=1.0, help="gradient-norm clipping (0: off)")
    add("--objective", default="mlm_nsp", choices=["mlm_nsp", "mlm", "ltr"])
    add("--dropout", type=float, default=None, help="hidden and attention dropout (default 0.1; 0 turns it off)")
    add("--layer-norm-position", default="post", choices=["post", "pre"])
    add("--activation-checkpointing", action="store_true", help="recompute activations in backward")
    add("--static-masking", action="store_true", help="one fixed mask per example (default: dynamic)")
    add("--num-workers", type=int, default=0, help="DataLoader workers per rank")
    add("--seed", type=int, default=1234)
    add("--save", default=None, help="checkpoint folder")
    add("--save-interval", type=int, default=0, help="steps between checkpoints (0: only at the end)")
    add("--keep-last", type=int, default=None, help="keep only the newest N checkpoints")
    add("--load", default=None, help="resume from the latest complete checkpoint in this folder")
    add("--auto-resume", action="store_true", help="resume from --save when it holds a checkpoint")
    add("--stop-at-step", type=int, default=None, help="stop after this step (checkpointing if --save), as if interrupted")
    add("--phase-start-step", type=int, default=None,
        help="a phase starting at this step (phase 2): refuse to start unless resuming from a checkpoint at or after it")
    add("--fallback-to-previous", action="store_true", help="resume from the previous checkpoint if the latest is damaged")
    add("--max-skipped-steps", type=int, default=20, help="stop after this many consecutive non-finite steps")
    add("--example-log", default=None, help="log each step's example ids to PATH.dpN (for audits and tests)")
    add("--log-interval", type=int, default=10)
    add("--metrics-file", default=None, help="JSON Lines file, one object per logged step")
    add("--tensorboard-dir", default=None)
    add("--dry-run", nargs="?", const="auto", default=None, choices=["auto", "gpu", "cpu"],
        help="print the launch plan (sizes, batch, ZeRO, precision, tokenizer, data, memory) for this device "
        "(auto), or for GPUs or CPUs, and exit: 0 if the run would start, 2 otherwise")
    add("--world-size", type=int, default=None, help="processes to plan for (default: the launcher's variables)")
    add("--plan-from-step", type=int, default=None,
        help="with --dry-run: plan as if resuming at this step (phase 2 planned before phase 1 ran)")
    add("--plan-json", default=None, help="also write the resolved launch plan as JSON to this path")
    # The deepspeed launcher appends --local_rank=N; LOCAL_RANK in the environment says the same.
    add("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def add_precision_argument(parser: argparse.ArgumentParser) -> None:
    from bert_ds.precision import PRECISIONS

    parser.add_argument(
        "--precision", default="auto", choices=PRECISIONS,
        help="auto: bf16 on GPUs and on CPUs with a bf16 matrix instruction (AMX, AVX512-BF16), fp32 elsewhere; "
        "bf16/fp16 are DeepSpeed mixed precision with fp32 master weights (fp16: GPUs only)")


def micro_batch_size(text: str) -> Optional[int]:
    """`auto` (None) or a positive integer, for --micro-batch-size."""
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or auto), got {value}")
    return value


def refuse_empty_values(parser: argparse.ArgumentParser, argv: Optional[list[str]]) -> None:
    """Python 3.11's argparse reads `--option=--` as an empty list instead of a missing value."""
    import sys

    for token in sys.argv[1:] if argv is None else argv:
        if token.startswith("--") and token.endswith("=--"):
            parser.error(f"argument {token[:-3]}: expected one argument")


def parse_args(argv: Optional[list[str]] = None) -> RunConfig:
    """Parse and validate; preset-dependent defaults fill what was not given."""
    parser = _parser()
    refuse_empty_values(parser, argv)
    args = parser.parse_args(argv)
    defaults = TRAINING_DEFAULTS[args.preset]
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig) if hasattr(args, f.name)}
    for name, default in defaults.items():
        if values.get(name) is None:
            values[name] = default
    values["dynamic_masking"] = not args.static_masking
    if values["deepspeed_config"] is None:
        values["deepspeed_config"] = "pipeline" if args.pipeline_parallel > 1 else "zero1"
    _default_eval_data(values)
    run = RunConfig(**values)
    _check(run)
    return run


def _default_eval_data(values: dict) -> None:
    """Evaluating on the sample without --eval-data: score its held-out articles and train on the
    rest (data/sources.py SAMPLE_TRAIN_SPECS), so the evaluation never scores training text."""
    from bert_ds.data.sources import SAMPLE_HELD_OUT_SPEC, SAMPLE_TRAIN_SPECS

    evaluating = values["eval_interval"] is not None or values["eval_only"]
    if evaluating and values["eval_data"] is None and values["data"] == ["sample"]:
        values["data"], values["eval_data"] = list(SAMPLE_TRAIN_SPECS), [SAMPLE_HELD_OUT_SPEC]


def _check_evaluation(run: RunConfig, problems: list[str]) -> None:
    evaluating = run.eval_interval is not None or run.eval_only
    if run.eval_interval is not None and run.eval_interval < 1:
        problems.append(f"--eval-interval must be at least 1 (leave it out to not evaluate), got {run.eval_interval}")
    if run.eval_samples is not None and run.eval_samples < 1:
        problems.append(f"--eval-samples must be at least 1, got {run.eval_samples}")
    if evaluating and run.eval_data is None:
        problems.append("--eval-interval needs --eval-data (held-out text, the --data syntax) unless training on the sample")
    if run.eval_data is not None and not evaluating:
        problems.append("--eval-data needs --eval-interval (or --eval-only)")
    if run.eval_samples is not None and not evaluating:
        problems.append("--eval-samples needs --eval-interval (or --eval-only)")
    target = run.target_mlm_accuracy
    if target is not None and not (math.isfinite(target) and 0.0 < target <= 1.0):
        problems.append(f"--target-mlm-accuracy must be in (0, 1], got {target}")
    if target is not None and run.eval_interval is None:
        problems.append("--target-mlm-accuracy needs --eval-interval")
    if run.keep_best and (run.eval_interval is None or not run.save):
        problems.append("--keep-best needs --eval-interval and --save")
    if run.eval_only and (run.target_mlm_accuracy is not None or run.keep_best):
        problems.append("--eval-only trains nothing: it takes no --target-mlm-accuracy or --keep-best")


def _check(run: RunConfig) -> None:
    problems = []
    for name in ("train_steps", "global_batch_size", "log_interval", "max_skipped_steps"):
        if getattr(run, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1, got {getattr(run, name)}")
    for name in ("warmup_steps", "save_interval", "num_workers"):
        if getattr(run, name) < 0:
            problems.append(f"--{name.replace('_', '-')} must be >= 0, got {getattr(run, name)}")
    if not (math.isfinite(run.lr) and run.lr > 0):
        problems.append(f"--lr must be positive and finite, got {run.lr}")
    for name in ("weight_decay", "clip_grad", "adam_eps"):
        value = getattr(run, name)
        if not (math.isfinite(value) and value >= 0):
            problems.append(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")
    for name in ("stop_at_step", "phase_start_step", "world_size", "plan_from_step"):
        if getattr(run, name) is not None and getattr(run, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1, got {getattr(run, name)}")
    if run.plan_from_step is not None and not run.dry_run:
        problems.append("--plan-from-step only goes with --dry-run")
    if run.phase_start_step is not None and not (run.load or run.auto_resume):
        problems.append("--phase-start-step needs the checkpoint to continue from (--load, or --save with --auto-resume)")
    if not 0 <= run.seed < 2**32:
        problems.append(f"--seed must be in [0, 2**32), got {run.seed}")
    if run.dropout is not None and not 0.0 <= run.dropout < 1.0:
        problems.append(f"--dropout must be in [0, 1), got {run.dropout}")
    if run.keep_last is not None and run.keep_last < 1:
        problems.append(f"--keep-last must be at least 1, got {run.keep_last}")
    if run.auto_resume and not run.save:
        problems.append("--auto-resume needs --save (the folder to resume from)")
    if run.load and run.auto_resume:
        problems.append("--load and --auto-resume exclude each other")
    if run.pipeline_parallel > 1 and run.zero_stage is not None and run.zero_stage > 1:
        problems.append(f"--zero-stage {run.zero_stage} cannot be combined with pipeline parallelism (use 0 or 1)")
    _check_evaluation(run, problems)
    if problems:
        raise ConfigError("Invalid options: " + "; ".join(problems) + ".")
