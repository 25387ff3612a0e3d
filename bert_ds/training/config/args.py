"""Command-line options of `bert_ds/pretrain.py` -> one validated `RunConfig`, a tree of sections
(model, parallel, data, optim, eval, checkpoint, log, plan; training/config/sections.py holds the ones
fine-tuning shares).

Defaults depend on the preset: the paper's recipe (Devlin et al. 2018, appendix A.2) for base and large; small, fast
values for tiny/mini/small so a CPU run finishes in minutes. Every user error becomes a
ConfigError with one sentence naming the option, which the entrypoint prints without a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional

from bert_ds.config import (
    OBJECTIVES, PRESETS, SENTENCE_SPLITTERS, ConfigError, DataConfig, ModelConfig, model_preset, padded_vocab_size, validate_layout,
)
from bert_ds.options import HelpFormatter, add_options, flat, from_namespace, option, refuse_empty_values, sections
from bert_ds.training.config.sections import (
    OptimizerOptions, ParallelOptions, PlanOptions, at_least, dropout_problems, micro_batch_size, num_workers, positive_finite,
)

# Presets as data: the training values each preset overrides (the model's are config.PRESETS).
# The paper: batch 256 x 512 tokens... as 256 sequences, Adam lr 1e-4, 10k warm-up, 1M steps.
# The micro batch is not here: by default `auto` picks it per layout (training/config/batch_plan.py).
_PAPER = dict(global_batch_size=256, lr=1e-4, warmup_steps=10_000, train_steps=1_000_000)
TRAINING_DEFAULTS = {
    "tiny": dict(global_batch_size=16, lr=1e-3, warmup_steps=10, train_steps=100),
    "mini": dict(global_batch_size=32, lr=5e-4, warmup_steps=50, train_steps=1_000),
    "small": dict(global_batch_size=64, lr=3e-4, warmup_steps=500, train_steps=20_000),
    "base": dict(_PAPER),
    "large": dict(_PAPER),
}


BY_PRESET = dict(parser_default=None)
"""Metadata of a field whose default is the preset's (TRAINING_DEFAULTS): absent from the command
line it is None until parse_args fills it in."""


@dataclass
class ModelOptions:
    """The encoder: its size preset and what pre-training changes about it."""

    preset: str = field(default="tiny", metadata=option(choices=sorted(PRESETS)))
    """Model size: tiny, mini, small, base or large (bert_ds/config.py PRESETS)."""
    dropout: Optional[float] = None
    """Hidden and attention dropout (default: the preset's 0.1; 0 turns it off)."""
    layer_norm_position: str = field(default="post", metadata=option(choices=["post", "pre"]))
    """post: original BERT (LayerNorm after each residual add); pre: LayerNorm before each sub-layer."""
    activation_checkpointing: bool = False
    """Recompute each layer's activations in backward: less memory, about 1/3 more compute."""

    def problems(self) -> list[str]:
        return dropout_problems(self)


@dataclass
class PretrainParallel(ParallelOptions):
    """How the job is split over processes (world = TP x PP x DP) and run by DeepSpeed."""

    deepspeed_config: str = field(default="zero1", metadata=option(parser_default=None))
    """A ds_configs/ name (zero1, zero2, zero3, pipeline, zero2_offload, ...) or a JSON path
    (default: zero1; pipeline for PP > 1)."""
    pipeline_parallel: int = 1
    """Pipeline-parallel size PP (DeepSpeed PipelineModule)."""

    def problems(self) -> list[str]:
        return super().problems() + at_least(self, 1, "pipeline_parallel")

    def deepspeed_setup(self, batch, device_type: str, clip_grad: float, pipeline_parallel: Optional[int] = None):
        return super().deepspeed_setup(batch, device_type, clip_grad, self.pipeline_parallel)


@dataclass
class DataOptions:
    """Where the text comes from and how it becomes masked-LM/NSP examples. The fields after
    `lowercase` are DataConfig's (bert_ds/config.py), with its defaults."""

    sources: list[str] = field(default_factory=lambda: ["sample"], metadata=option(flag="--data"))
    """Sources [NAME=]LOCATION[@WEIGHT][#LAYOUT]; LAYOUT: book, article, sentences[:N] or lines
    (default by kind: sentences:256 for the hub's BookCorpus, article for other hub data and
    JSON/Parquet, book for .txt); "sample" is the built-in corpus."""
    tokenizer: Optional[str] = None
    """sentencepiece .model, vocab.txt, a folder, or bert-base-uncased / bert-base-cased (built in);
    default: bert-base-uncased for base/large on your own --data, a sentencepiece model trained
    on the built-in sample for the sample."""
    lowercase: Optional[bool] = None
    """Lowercase and strip accents before WordPiece lookup (default: the vocabulary's own casing, data/tokenizer/wordpiece.py)."""
    seq_length: int = DataConfig.seq_length
    """Tokens per sequence ([CLS]/[SEP] included): 128 in the paper's phase 1, 512 in phase 2."""
    objective: str = field(default=DataConfig.objective, metadata=option(choices=OBJECTIVES))
    """Table 5's objectives: mlm_nsp (masked LM + next sentence prediction), mlm (the paper's "No
    NSP": the same sentence pairs, no NSP loss), mlm_full_sentences (RoBERTa's: one full-length
    segment, no NSP) or ltr (left-to-right LM on full segments, "LTR & No NSP")."""
    mask_prob: float = DataConfig.mask_prob
    """Share of non-special tokens selected for masked-LM prediction."""
    dynamic_masking: bool = field(default=DataConfig.dynamic_masking, metadata=option(flag="--static-masking"))
    """New masks each time an example is drawn (the default); --static-masking: one fixed mask per
    example, from the seed."""
    short_seq_prob: float = DataConfig.short_seq_prob
    """Probability of a shorter target length for an NSP pair."""
    block_documents: int = DataConfig.block_documents
    """Documents read, paired and shuffled together; NotNext partners come from the same block.
    A resume re-reads at most one block."""
    txt_documents: str = field(default=DataConfig.txt_documents, metadata=option(choices=["file", "blank_line"]))
    """.txt sources of layout `book`: one document per file, or one per blank-line separated block."""
    sentence_splitter: str = field(default=DataConfig.sentence_splitter, metadata=option(choices=SENTENCE_SPLITTERS))
    """How paragraphs are cut into NSP's sentences (data/text/splitters.py)."""
    num_workers: Optional[int] = field(default=None, metadata=option(parse=num_workers))
    """DataLoader worker processes per rank (0: batches are built in the training process), or
    auto (the default): when resuming, the count that keeps the checkpoint's data shards (so the
    data stream continues exactly), else 2 per GPU rank and 0 on CPUs (training/plan/resolve.py,
    loader_workers)."""
    seed: int = DataConfig.seed
    """Seeds the weights, dropout, file order, pairing, shuffling and masking."""

    def data_config(self, micro_batch_size: Optional[int]) -> DataConfig:
        """The data loader's settings (every DataConfig field but the micro batch is one of ours)."""
        names = [f.name for f in dataclasses.fields(DataConfig) if f.name != "micro_batch_size"]
        return DataConfig(micro_batch_size=micro_batch_size, **{name: getattr(self, name) for name in names})


@dataclass
class OptimOptions(OptimizerOptions):
    """The batch, the optimizer and its learning-rate schedule (batch, steps and lr: by preset)."""

    global_batch_size: int = field(default=None, metadata=BY_PRESET)
    """Sequences per optimizer step over all data-parallel ranks (default: by preset)."""
    micro_batch_size: Optional[int] = field(default=None, metadata=option(parse=micro_batch_size))
    """Sequences per forward/backward on one rank, or auto: the largest that divides the per-rank
    batch up to the preset's ceiling (training/config/batch_plan.py; default auto)."""
    train_steps: int = field(default=None, metadata=BY_PRESET)
    """Optimizer steps (default: by preset)."""
    lr: float = field(default=None, metadata=BY_PRESET)
    """Peak learning rate (default: by preset)."""
    warmup_steps: int = field(default=None, metadata=BY_PRESET)
    """Linear warm-up steps, then linear decay to 0 at --train-steps (default: by preset)."""

    def problems(self) -> list[str]:
        problems = super().problems() + at_least(self, 1, "train_steps", "global_batch_size")
        if self.warmup_steps < 0:
            problems.append(f"--warmup-steps must be >= 0, got {self.warmup_steps}")
        if not positive_finite(self.lr):
            problems.append(f"--lr must be positive and finite, got {self.lr}")
        return problems

    def settings(self):
        """The optimizer and LR schedule of this run (training/engine/optim.py)."""
        return self.optimizer_settings(self.lr, self.warmup_steps, self.train_steps)


@dataclass
class EvalOptions:
    """Held-out evaluation: masked-LM and NSP accuracy on text the run never trains on."""

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

    @property
    def evaluating(self) -> bool:
        return self.eval_interval is not None or self.eval_only

    def problems(self) -> list[str]:
        problems = at_least(self, 1, "eval_interval", "eval_samples")
        if self.evaluating and self.eval_data is None:
            problems.append("--eval-interval needs --eval-data (held-out text, the --data syntax) unless training on the sample")
        if self.eval_data is not None and not self.evaluating:
            problems.append("--eval-data needs --eval-interval (or --eval-only)")
        if self.eval_samples is not None and not self.evaluating:
            problems.append("--eval-samples needs --eval-interval (or --eval-only)")
        target = self.target_mlm_accuracy
        if target is not None and not (math.isfinite(target) and 0.0 < target <= 1.0):
            problems.append(f"--target-mlm-accuracy must be in (0, 1], got {target}")
        if target is not None and self.eval_interval is None:
            problems.append("--target-mlm-accuracy needs --eval-interval")
        if self.eval_only and (target is not None or self.keep_best):
            problems.append("--eval-only trains nothing: it takes no --target-mlm-accuracy or --keep-best")
        return problems


@dataclass
class CheckpointOptions:
    """Where checkpoints go, how many are kept, and where a run resumes from."""

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

    @property
    def load_dir(self) -> Optional[str]:
        """The folder the run resumes from, if any (--load, or --save with --auto-resume)."""
        return self.load or (self.save if self.auto_resume else None)

    def problems(self) -> list[str]:
        problems = at_least(self, 1, "keep_last", "stop_at_step", "phase_start_step")
        if self.save_interval < 0:
            problems.append(f"--save-interval must be >= 0, got {self.save_interval}")
        if self.phase_start_step is not None and not (self.load or self.auto_resume):
            problems.append("--phase-start-step needs the checkpoint to continue from (--load, or --save with --auto-resume)")
        if self.auto_resume and not self.save:
            problems.append("--auto-resume needs --save (the folder to resume from)")
        if self.load and self.auto_resume:
            problems.append("--load and --auto-resume exclude each other")
        return problems


@dataclass
class LogOptions:
    """Progress lines, metrics files and the run's health checks."""

    log_interval: int = 10
    """Steps between progress lines (console, --metrics-file, --tensorboard-dir)."""
    metrics_file: Optional[str] = None
    """JSON Lines file, one object per logged step and per evaluation."""
    tensorboard_dir: Optional[str] = None
    """TensorBoard event folder (train/ and eval/ scalars)."""
    example_log: Optional[str] = None
    """Write each step's example ids to EXAMPLE_LOG.dpN (one file per data-parallel rank); on resume
    the log is cut back to the checkpoint's step, so it lists exactly the examples trained on."""
    max_skipped_steps: int = 20
    """Stop after this many consecutive steps whose gradients were not finite (each is skipped)."""

    def problems(self) -> list[str]:
        return at_least(self, 1, "log_interval", "max_skipped_steps")


@dataclass
class PretrainPlan(PlanOptions):
    """The launch plan: print what the run would do, for any world size, without starting it."""

    plan_from_step: Optional[int] = None
    """With --dry-run: plan as if resuming at this step, without looking for the checkpoint (a
    later phase planned before the earlier one ran)."""
    node_gpus: int = 8
    """GPUs per node, for a GPU plan's scaling estimate (which parallel groups span nodes)."""
    intra_node_bandwidth: float = 450.0
    """GB/s one GPU sends inside a node, for the scaling estimate (NVLink 4, H100/H200: 450)."""
    inter_node_bandwidth: float = 50.0
    """GB/s one GPU sends to other nodes, for the scaling estimate (a 400 Gb/s NIC per GPU: 50)."""
    gpu_tflops: float = 300.0
    """Model TFLOP/s one GPU achieves, for the scaling estimate's step time (default: about 30% of
    H100/H200's dense bf16 peak; use the FLOP/s your runs log)."""

    def problems(self) -> list[str]:
        problems = super().problems() + at_least(self, 1, "plan_from_step", "node_gpus")
        problems += [f"--{name.replace('_', '-')} must be > 0, got {getattr(self, name)}"
                     for name in ("intra_node_bandwidth", "inter_node_bandwidth", "gpu_tflops") if getattr(self, name) <= 0]
        if self.plan_from_step is not None and not self.dry_run:
            problems.append("--plan-from-step only goes with --dry-run")
        return problems


@dataclass
class RunConfig:
    """Everything one pre-training run needs, as a tree of sections; built by `parse_args`. Each
    leaf field is one command-line option (bert_ds/options.py): its docstring the --help, its
    section the --help group."""

    model: ModelOptions = field(default_factory=ModelOptions)
    """The encoder: its size preset and what pre-training changes about it."""
    parallel: PretrainParallel = field(default_factory=PretrainParallel)
    """How the job is split over processes (world = TP x PP x DP) and run by DeepSpeed."""
    data: DataOptions = field(default_factory=DataOptions)
    """Where the text comes from and how it becomes masked-LM/NSP examples."""
    optim: OptimOptions = field(default_factory=OptimOptions)
    """The batch, the optimizer and its learning-rate schedule (batch, steps and lr: by preset)."""
    eval: EvalOptions = field(default_factory=EvalOptions)
    """Held-out evaluation: masked-LM and NSP accuracy on text the run never trains on."""
    checkpoint: CheckpointOptions = field(default_factory=CheckpointOptions)
    """Where checkpoints go, how many are kept, and where a run resumes from."""
    log: LogOptions = field(default_factory=LogOptions)
    """Progress lines, metrics files and the run's health checks."""
    plan: PretrainPlan = field(default_factory=PretrainPlan)
    """The launch plan: print what the run would do, for any world size, without starting it."""

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model for this run, with `vocab_size` from the tokenizer (padded for TP)."""
        overrides = dict(
            vocab_size=vocab_size,
            layer_norm_position=self.model.layer_norm_position,
            causal=self.data.objective == "ltr",
            activation_checkpointing=self.model.activation_checkpointing,
        )
        if self.model.dropout is not None:
            overrides.update(hidden_dropout=self.model.dropout, attention_dropout=self.model.dropout)
        return model_preset(self.model.preset, **overrides)

    def deepspeed_setup(self, batch, device_type: str):
        """The run's DeepSpeed setup for its batch plan (the launch plan's and the engine's)."""
        return self.parallel.deepspeed_setup(batch, device_type, self.optim.clip_grad)

    def data_config(self) -> DataConfig:
        """The data loader's settings: the data section and the (resolved) micro batch."""
        return self.data.data_config(self.optim.micro_batch_size)

    def flat(self) -> dict:
        """{option name: value}: the shape of the records (checkpoints, plan JSON)."""
        return flat(self)

    def with_num_workers(self, workers: int) -> "RunConfig":
        """A copy with --num-workers `auto` resolved (the launch plan's)."""
        return dataclasses.replace(self, data=dataclasses.replace(self.data, num_workers=workers))

    def with_micro_batch(self, micro_batch_size: int) -> "RunConfig":
        """A copy with `auto` resolved to this micro batch (the launch plan's)."""
        return dataclasses.replace(self, optim=dataclasses.replace(self.optim, micro_batch_size=micro_batch_size))

    def validate(self, world_size: Optional[int] = None, vocab_size: Optional[int] = None) -> None:
        """Every rule, in one place. Without `world_size`: each section's values and the rules
        between sections, as one ConfigError naming every wrong option. With it (the launch plan,
        which a dry run and a real run share): also whether the model splits over world = TP x PP
        x DP (config.validate_layout, with `vocab_size`: the tokenizer's, padded; default BERT's)
        and whether the global batch splits over DP (training/config/batch_plan.py)."""
        # The data section's rules need the micro batch and the preset: data_config() checks them.
        problems = [p for name in sections(RunConfig) if name != "data" for p in getattr(self, name).problems()]
        problems += self.data.data_config(self.optim.micro_batch_size).problems(PRESETS[self.model.preset].max_position_embeddings)
        if self.eval.keep_best and (self.eval.eval_interval is None or not self.checkpoint.save):
            problems.append("--keep-best needs --eval-interval and --save")
        if problems:
            raise ConfigError("Invalid options: " + "; ".join(problems) + ".")
        if world_size is not None:
            from bert_ds.training.config.batch_plan import micro_batch_ceiling, plan_batches

            model = self.model_config(vocab_size or padded_vocab_size(ModelConfig.vocab_size))
            dp = validate_layout(model, world_size, self.parallel.tensor_parallel, self.parallel.pipeline_parallel)
            plan_batches(self.optim.global_batch_size, self.optim.micro_batch_size, dp,
                         micro_batch_ceiling(model, self.data.seq_length))

    def validate_batch(self, data_parallel: int) -> int:
        """Gradient-accumulation steps: global batch = micro batch x DP x accumulation."""
        from bert_ds.training.config.batch_plan import plan_batches

        micro = self.optim.micro_batch_size
        if micro is None:
            raise ConfigError("The micro batch is `auto` until the launch plan resolves it (training/plan/resolve.py).")
        return plan_batches(self.optim.global_batch_size, micro, data_parallel, micro).accumulation


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bert_ds/pretrain.py",
        description="Pre-train BERT (masked LM + next sentence prediction) with DeepSpeed and megatron-core.",
        formatter_class=HelpFormatter,
    )
    add_options(parser, RunConfig)
    # The deepspeed launcher appends --local_rank=N; LOCAL_RANK in the environment says the same.
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: Optional[list[str]] = None) -> RunConfig:
    """Parse and validate; the preset's training defaults (TRAINING_DEFAULTS) fill what was not given."""
    parser = _parser()
    refuse_empty_values(parser, argv)
    values = vars(parser.parse_args(argv))
    for name, default in TRAINING_DEFAULTS[values["preset"]].items():
        if values[name] is None:
            values[name] = default
    if values["deepspeed_config"] is None:
        values["deepspeed_config"] = "pipeline" if values["pipeline_parallel"] > 1 else "zero1"
    _default_eval_data(values)
    run = from_namespace(RunConfig, values)
    run.validate()
    return run


def _default_eval_data(values: dict) -> None:
    """Evaluating on the sample without --eval-data: score its held-out articles and train on the
    rest (data/sources.py SAMPLE_TRAIN_SPECS), so the evaluation never scores training text."""
    from bert_ds.data.sources import SAMPLE_HELD_OUT_SPEC, SAMPLE_TRAIN_SPECS

    evaluating = values["eval_interval"] is not None or values["eval_only"]
    if evaluating and values["eval_data"] is None and values["sources"] == ["sample"]:
        values["sources"], values["eval_data"] = list(SAMPLE_TRAIN_SPECS), [SAMPLE_HELD_OUT_SPEC]
