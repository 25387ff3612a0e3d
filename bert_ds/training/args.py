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

from bert_ds.config import PRESETS, SENTENCE_SPLITTERS, ConfigError, DataConfig, ModelConfig, model_preset
from bert_ds.options import HelpFormatter, add_options, option, refuse_empty_values
from bert_ds.precision import PRECISIONS

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


BY_PRESET = dict(parser_default=None)
"""Metadata of a field whose default is the preset's (TRAINING_DEFAULTS): absent from the command
line it is None until parse_args fills it in."""


@dataclass
class RunConfig:
    """Everything one pre-training run needs; built by `parse_args`. Each field is one command-line
    option (bert_ds/options.py): its docstring is the option's --help, SECTIONS groups them."""

    preset: str = field(default="tiny", metadata=option(choices=sorted(PRESETS)))
    """Model size: tiny, mini, small, base or large (bert_ds/config.py PRESETS)."""
    tensor_parallel: int = 1
    """Tensor-parallel size TP (megatron-core layers)."""
    pipeline_parallel: int = 1
    """Pipeline-parallel size PP (DeepSpeed PipelineModule)."""
    deepspeed_config: str = field(default="zero1", metadata=option(parser_default=None))
    """A ds_configs/ name (zero1, zero2, zero3, pipeline, zero2_offload, ...) or a JSON path
    (default: zero1; pipeline for PP > 1)."""
    zero_stage: Optional[int] = field(default=None, metadata=option(choices=[0, 1, 2, 3]))
    """Override the DeepSpeed config's ZeRO stage."""
    precision: str = field(default="auto", metadata=option(choices=PRECISIONS))
    """auto: bf16 on GPUs and on CPUs with a bf16 matrix instruction (AMX, AVX512-BF16), fp32
    elsewhere; bf16/fp16 are DeepSpeed mixed precision with fp32 master weights (fp16: GPUs only)."""
    data: list[str] = field(default_factory=lambda: ["sample"])
    """Sources [NAME=]LOCATION[@WEIGHT][#LAYOUT]; LAYOUT: book, article, sentences[:N] or lines
    (default by kind: sentences:256 for the hub's BookCorpus, article for other hub data and
    JSON/Parquet, book for .txt); "sample" is the built-in corpus."""
    sentence_splitter: str = field(default=DataConfig.sentence_splitter, metadata=option(choices=SENTENCE_SPLITTERS))
    """How paragraphs are cut into NSP's sentences (data/splitters.py)."""
    mask_prob: float = DataConfig.mask_prob
    """Share of non-special tokens selected for masked-LM prediction."""
    short_seq_prob: float = DataConfig.short_seq_prob
    """Probability of a shorter target length for an NSP pair."""
    block_documents: int = DataConfig.block_documents
    """Documents read, paired and shuffled together; NotNext partners come from the same block.
    A resume re-reads at most one block."""
    txt_documents: str = field(default=DataConfig.txt_documents, metadata=option(choices=["file", "blank_line"]))
    """.txt sources of layout `book`: one document per file, or one per blank-line separated block."""
    eval_data: Optional[list[str]] = None
    """Held-out sources, the --data syntax (default with the sample: its held-out Wikipedia articles)."""
    eval_interval: Optional[int] = None
    """Evaluate on the held-out set every N steps (default: never)."""
    eval_samples: Optional[int] = None
    """Examples in the held-out set (default: up to 1000, as many as the data holds)."""
    eval_only: bool = False
    """Evaluate the loaded checkpoint (or the initial weights) once and exit; nothing is trained or saved."""
    target_mlm_accuracy: Optional[float] = None
    """Stop with a checkpoint at the first evaluation reaching this held-out masked-LM accuracy (MLPerf: 0.72)."""
    keep_best: bool = False
    """Also checkpoint every evaluation that improves held-out masked-LM accuracy and keep the best
    one apart from --keep-last (best.json names it)."""
    tokenizer: Optional[str] = None
    """sentencepiece .model, vocab.txt, a folder, or bert-base-uncased / bert-base-cased (built in);
    default: bert-base-uncased for base/large on your own --data, a sentencepiece model trained
    on the built-in sample for the sample."""
    lowercase: Optional[bool] = None
    """Lowercase and strip accents before WordPiece lookup (default: the vocabulary's own casing, data/wordpiece.py)."""
    seq_length: int = DataConfig.seq_length
    """Tokens per sequence ([CLS]/[SEP] included): 128 in the paper's phase 1, 512 in phase 2."""
    micro_batch_size: Optional[int] = field(default=None, metadata=option(parse=micro_batch_size))
    """Sequences per forward/backward on one rank, or auto: the largest that divides the per-rank
    batch up to the preset's ceiling (training/batch_plan.py; default auto)."""
    global_batch_size: int = field(default=None, metadata=BY_PRESET)
    """Sequences per optimizer step over all data-parallel ranks (default: by preset)."""
    train_steps: int = field(default=None, metadata=BY_PRESET)
    """Optimizer steps (default: by preset)."""
    lr: float = field(default=None, metadata=BY_PRESET)
    """Peak learning rate (default: by preset)."""
    warmup_steps: int = field(default=None, metadata=BY_PRESET)
    """Linear warm-up steps, then linear decay to 0 at --train-steps (default: by preset)."""
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
    objective: str = field(default=DataConfig.objective, metadata=option(choices=["mlm_nsp", "mlm", "ltr"]))
    """Table 5's objectives: masked LM + next sentence prediction, masked LM only, or left-to-right LM."""
    dropout: Optional[float] = None
    """Hidden and attention dropout (default: the preset's 0.1; 0 turns it off)."""
    layer_norm_position: str = field(default="post", metadata=option(choices=["post", "pre"]))
    """post: original BERT (LayerNorm after each residual add); pre: LayerNorm before each sub-layer."""
    activation_checkpointing: bool = False
    """Recompute each layer's activations in backward: less memory, about 1/3 more compute."""
    dynamic_masking: bool = field(default=DataConfig.dynamic_masking, metadata=option(flag="--static-masking"))
    """New masks each time an example is drawn (the default); --static-masking: one fixed mask per
    example, from the seed."""
    num_workers: int = DataConfig.num_workers
    """DataLoader worker processes per rank (0: batches are built in the training process)."""
    seed: int = DataConfig.seed
    """Seeds the weights, dropout, file order, pairing, shuffling and masking."""
    save: Optional[str] = None
    """Checkpoint folder."""
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
    """Steps between progress lines (console, --metrics-file, --tensorboard-dir)."""
    metrics_file: Optional[str] = None
    """JSON Lines file, one object per logged step and per evaluation."""
    tensorboard_dir: Optional[str] = None
    """TensorBoard event folder (train/ and eval/ scalars)."""
    dry_run: Optional[str] = field(default=None, metadata=option(nargs="?", const="auto", choices=["auto", "gpu", "cpu"]))
    """Print the launch plan (sizes, batch, ZeRO, precision, tokenizer, data, memory) for this device
    (auto), or for GPUs or CPUs, and exit: 0 if the run would start, 2 otherwise."""
    world_size: Optional[int] = None
    """Processes the plan is for (default: from the launcher's variables, as the real run)."""
    plan_from_step: Optional[int] = None
    """With --dry-run: plan as if resuming at this step, without looking for the checkpoint (a
    later phase planned before the earlier one ran)."""
    plan_json: Optional[str] = None
    """Also write the resolved launch plan as JSON to this path (dry run or real run)."""

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
        """The data settings of this run: every DataConfig field is a RunConfig field (one option each)."""
        return DataConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DataConfig)})

    def validate(self) -> None:
        """Every rule on the options alone, the data's included, as one ConfigError naming each
        option that is wrong. Rules that need the world size and the tokenizer's vocabulary
        (config.validate_layout, the batch plan) run in the launch plan, which a dry run shares."""
        problems = _option_problems(self)
        _check_evaluation(self, problems)
        problems += self.data_config().problems(PRESETS[self.preset].max_position_embeddings)
        if problems:
            raise ConfigError("Invalid options: " + "; ".join(problems) + ".")

    def validate_batch(self, data_parallel: int) -> int:
        """Gradient-accumulation steps: global batch = micro batch x DP x accumulation."""
        from bert_ds.training.batch_plan import plan_batches

        if self.micro_batch_size is None:
            raise ConfigError("The micro batch is `auto` until the launch plan resolves it (training/plan.py).")
        return plan_batches(self.global_batch_size, self.micro_batch_size, data_parallel, self.micro_batch_size).accumulation


# The parts of a job, as --help lists them (every option is in exactly one).
SECTIONS = {
    "model": ("preset", "dropout", "layer_norm_position", "activation_checkpointing"),
    "parallelism and DeepSpeed": ("tensor_parallel", "pipeline_parallel", "deepspeed_config", "zero_stage", "precision"),
    "data": ("data", "tokenizer", "lowercase", "seq_length", "objective", "mask_prob", "dynamic_masking", "short_seq_prob",
             "block_documents", "txt_documents", "sentence_splitter", "num_workers", "seed"),
    "batch and optimizer": ("global_batch_size", "micro_batch_size", "train_steps", "lr", "warmup_steps", "optimizer",
                            "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "clip_grad"),
    "held-out evaluation": ("eval_data", "eval_interval", "eval_samples", "eval_only", "target_mlm_accuracy", "keep_best"),
    "checkpoints and resume": ("save", "save_interval", "keep_last", "load", "auto_resume", "stop_at_step", "phase_start_step",
                               "fallback_to_previous"),
    "logging and health": ("log_interval", "metrics_file", "tensorboard_dir", "example_log", "max_skipped_steps"),
    "launch plan": ("dry_run", "world_size", "plan_from_step", "plan_json"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bert_ds/pretrain.py",
        description="Pre-train BERT (masked LM + next sentence prediction) with DeepSpeed and megatron-core.",
        formatter_class=HelpFormatter,
    )
    add_options(parser, RunConfig, SECTIONS)
    # The deepspeed launcher appends --local_rank=N; LOCAL_RANK in the environment says the same.
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: Optional[list[str]] = None) -> RunConfig:
    """Parse and validate; preset-dependent defaults fill what was not given."""
    parser = _parser()
    refuse_empty_values(parser, argv)
    args = parser.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)}
    for name, default in TRAINING_DEFAULTS[args.preset].items():
        if values[name] is None:
            values[name] = default
    if values["deepspeed_config"] is None:
        values["deepspeed_config"] = "pipeline" if args.pipeline_parallel > 1 else "zero1"
    _default_eval_data(values)
    run = RunConfig(**values)
    run.validate()
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


def _option_problems(run: RunConfig) -> list[str]:
    problems = []
    for name in ("train_steps", "global_batch_size", "log_interval", "max_skipped_steps"):
        if getattr(run, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1, got {getattr(run, name)}")
    for name in ("warmup_steps", "save_interval"):
        if getattr(run, name) < 0:
            problems.append(f"--{name.replace('_', '-')} must be >= 0, got {getattr(run, name)}")
    if not (math.isfinite(run.lr) and run.lr > 0):
        problems.append(f"--lr must be positive and finite, got {run.lr}")
    for name in ("weight_decay", "clip_grad", "adam_eps"):
        value = getattr(run, name)
        if not (math.isfinite(value) and value >= 0):
            problems.append(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0.0 <= getattr(run, name) < 1.0:
            problems.append(f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(run, name)}")
    for name in ("stop_at_step", "phase_start_step", "world_size", "plan_from_step"):
        if getattr(run, name) is not None and getattr(run, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1, got {getattr(run, name)}")
    if run.plan_from_step is not None and not run.dry_run:
        problems.append("--plan-from-step only goes with --dry-run")
    if run.phase_start_step is not None and not (run.load or run.auto_resume):
        problems.append("--phase-start-step needs the checkpoint to continue from (--load, or --save with --auto-resume)")
    if run.dropout is not None and not 0.0 <= run.dropout < 1.0:
        problems.append(f"--dropout must be in [0, 1), got {run.dropout}")
    if run.keep_last is not None and run.keep_last < 1:
        problems.append(f"--keep-last must be at least 1, got {run.keep_last}")
    if run.auto_resume and not run.save:
        problems.append("--auto-resume needs --save (the folder to resume from)")
    if run.load and run.auto_resume:
        problems.append("--load and --auto-resume exclude each other")
    return problems
