"""The launch plan of a pre-training run, resolved before any process group, model or GPU exists.

`resolve_plan` decides once what the run will do: world size and TP x PP x DP, the batch plan
(micro batch, accumulation), the DeepSpeed config with the ZeRO stage really used, the precision,
the tokenizer (casing, vocabulary padded for TP), the data sources (local files checked), where
training resumes (and whether a phase-2 start is premature), and estimates of memory per device
and checkpoint size (training/plan/footprint.py). `--dry-run` prints it and exits; a real run prints
the same plan and then trains with exactly these values, so the two cannot disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from bert_ds.config import ConfigError, ModelConfig, padded_vocab_size, validate_layout
from bert_ds.training.config.args import RunConfig
from bert_ds.training.config.batch_plan import BatchPlan, micro_batch_ceiling, plan_batches
from bert_ds.training.engine.ds_config import DeepSpeedSetup
from bert_ds.training.plan.data import SourcePlan, plan_sources, words_ratio_note
from bert_ds.training.plan.footprint import MemoryEstimate


@dataclass
class LaunchPlan:
    """Everything a run resolves before it starts (see the module docstring)."""

    run: RunConfig
    """The options with every `auto` resolved (the micro batch)."""
    world_size: int
    world_from: str
    """Where the world size came from (--world-size, a launcher's variables, one process)."""
    device_type: str
    """"gpu" or "cpu" (planned_device_kind)."""
    data_parallel: int
    model_config: ModelConfig
    batch: BatchPlan
    deepspeed: DeepSpeedSetup
    """The DeepSpeed config and its effective ZeRO stage, which the engine is built from."""
    notes: list[str]
    precision: str
    """"fp32", "bf16" or "fp16" (bert_ds/runtime/precision.py)."""
    precision_reason: str
    loader_text: str
    """The loader's worker processes and pinned memory, and why (loader_workers)."""
    tokenizer: object
    """The loaded tokenizer, or None when the sample's is still to be trained (dry run)."""
    tokenizer_text: str
    sources: list[SourcePlan]
    resume_text: str
    start_step: int
    parameters: int
    parameters_per_rank: int
    memory: MemoryEstimate
    checkpoint_bytes: int
    samples: list = field(default_factory=list)

    @property
    def ds_config(self) -> dict:
        return self.deepspeed.config

    @property
    def zero_stage(self) -> int:
        return self.deepspeed.zero_stage
    """vocab_check.SourceSample per sampled source ([UNK] rate of its first documents)."""

    @property
    def last_step(self) -> int:
        return min(self.run.optim.train_steps, self.run.checkpoint.stop_at_step or self.run.optim.train_steps)

    @property
    def tokens_per_step(self) -> int:
        return self.run.optim.global_batch_size * self.run.data.seq_length


def planned_device_kind(target: str) -> str:
    """"gpu" or "cpu": `--dry-run`'s target, or for "auto" this machine's device (runtime/distributed.py
    decides; it is the one place that names accelerators and it needs torch, so an explicit
    target keeps the plan free of it)."""
    if target in ("gpu", "cpu"):
        return target
    from bert_ds.runtime.device import device, is_gpu

    return "gpu" if is_gpu(device().type) else "cpu"


def planned_world(world_size: Optional[int], env: Optional[Mapping[str, str]] = None) -> tuple[int, str]:
    """(world size, where it came from): --world-size when given, else the environment's."""
    if world_size is not None:
        return world_size, "--world-size"
    return world_size_from_environment(os.environ if env is None else env)


def run_model_config(run: RunConfig, vocab_size: int) -> ModelConfig:
    """The run's model shape for a tokenizer of `vocab_size` entries (the embedding padded for TP)."""
    return run.model_config(padded_vocab_size(vocab_size))


def pretraining_batch_plan(run: RunConfig, model_config: ModelConfig, data_parallel: int) -> BatchPlan:
    """The run's batch plan: --micro-batch-size, or `auto` up to the model's ceiling at --seq-length."""
    ceiling = micro_batch_ceiling(model_config, max(run.data.seq_length, 1))
    return plan_batches(run.optim.global_batch_size, run.optim.micro_batch_size, data_parallel, ceiling)


def world_size_from_environment(env: Mapping[str, str]) -> tuple[int, str]:
    """The world size the real run would get: its launcher's variables, or inside a Slurm batch
    script (before srun) the job's task count."""
    from bert_ds.runtime.launcher import discover

    launch = discover(env)
    if launch.launcher != "none":
        return launch.world_size, f"{launch.launcher} launcher variables"
    if "SLURM_NTASKS" in env:
        try:
            return int(env["SLURM_NTASKS"]), "the Slurm job's SLURM_NTASKS"
        except ValueError:
            raise ConfigError(f"Launcher variable SLURM_NTASKS={env['SLURM_NTASKS']!r} is not an integer.") from None
    return 1, "no launcher variables: one process"


def resolve_plan(run: RunConfig, target: str = "auto", tokenizer=None, env: Optional[Mapping[str, str]] = None,
                 sample_data: bool = True) -> LaunchPlan:
    """The plan, or the first user error (ConfigError, DataError, TokenizerError, CheckpointError).

    `tokenizer` is the real run's (already loaded or trained); without it the plan loads the
    configured one and trains nothing. `sample_data` reads each local source's first documents
    for the [UNK] check (the real run also samples hub sources, see pretrain.py)."""
    from bert_ds.training.plan.footprint import checkpoint_bytes, memory_per_device, model_parameters, stage_parameters

    world, world_from = planned_world(run.plan.world_size, env)
    device_type = planned_device_kind(target)
    from bert_ds.training.plan.tokenizer import describe_tokenizer, planned_tokenizer

    # The options' own rules were checked when they were parsed; the layout's and the batch's next.
    tokenizer, tokenizer_text, vocab = describe_tokenizer(tokenizer) if tokenizer is not None else planned_tokenizer(run)
    model_config = run_model_config(run, vocab)
    dp = validate_layout(model_config, world, run.parallel.tensor_parallel, run.parallel.pipeline_parallel)
    batch = pretraining_batch_plan(run, model_config, dp)
    run = run.with_micro_batch(batch.micro_batch_size)
    deepspeed = run.deepspeed_setup(batch, device_type)
    ds_config, notes, choice = deepspeed
    if batch.auto:
        notes.insert(0, f"micro batch auto: {batch.micro_batch_size} (the largest divisor of {run.optim.global_batch_size} / "
                        f"{dp} = {run.optim.global_batch_size // dp} up to the ceiling "
                        f"{micro_batch_ceiling(model_config, run.data.seq_length)} at {run.data.seq_length} tokens)")
    stage = deepspeed.zero_stage
    precision = choice.name
    if run.eval.eval_data:  # a missing or unreadable held-out file fails the plan, not the run
        from bert_ds.data.sources import check_sources, parse_sources

        check_sources(parse_sources(run.eval.eval_data), run.data.txt_documents)
    try:
        resume_text, start_step, saved_layout = _resume(run)
    except OSError as error:  # a name the file system refuses (too long, ...), an unreadable folder
        from bert_ds.checkpoint.zero import CheckpointError

        raise CheckpointError(f"--load/--save {run.checkpoint.load_dir}: {error.strerror or error}.") from None
    workers, workers_reason = loader_workers(run.data.num_workers, device_type, dp, saved_layout)
    run = run.with_num_workers(workers)
    last_step = min(run.optim.train_steps, run.checkpoint.stop_at_step or run.optim.train_steps)
    run_tokens = max(last_step - start_step, 0) * run.optim.global_batch_size * run.data.seq_length
    sources = plan_sources(run, tokenizer, dp * max(run.data.num_workers, 1), run_tokens)
    ratio = words_ratio_note(sources)
    if ratio:
        notes.append(ratio)
    with_nsp = run.data.objective == "mlm_nsp"
    memory = memory_per_device(
        model_config, seq=run.data.seq_length, micro=batch.micro_batch_size, accumulation=batch.accumulation,
        tp=run.parallel.tensor_parallel, pp=run.parallel.pipeline_parallel, dp=dp, zero_stage=stage, precision=precision,
        gpu=device_type == "gpu", offload=deepspeed.offloaded,
        zero_config=ds_config["zero_optimization"], with_nsp=with_nsp,
        predicted=1.0 if run.data.objective == "ltr" else run.data.mask_prob,
    )
    samples = sample_sources(run, tokenizer) if sample_data and tokenizer is not None else []
    return LaunchPlan(
        run=run, world_size=world, world_from=world_from, device_type=device_type, data_parallel=dp,
        model_config=model_config, batch=batch, deepspeed=deepspeed, notes=notes,
        precision=precision, precision_reason=choice.reason,
        loader_text=f"{workers} worker process{'es' if workers != 1 else ''} per rank"
                    f"{', pinned host memory' if device_type == 'gpu' else ''} ({workers_reason})",
        tokenizer=tokenizer, tokenizer_text=tokenizer_text, sources=sources,
        resume_text=resume_text, start_step=start_step,
        parameters=model_parameters(model_config, with_nsp),
        parameters_per_rank=max(stage_parameters(model_config, run.parallel.tensor_parallel, run.parallel.pipeline_parallel, s, with_nsp)
                                for s in range(run.parallel.pipeline_parallel)),
        memory=memory,
        checkpoint_bytes=checkpoint_bytes(model_config, tp=run.parallel.tensor_parallel, pp=run.parallel.pipeline_parallel, dp=dp,
                                          zero_stage=stage, precision=precision, with_nsp=with_nsp),
        samples=samples,
    )


def sample_sources(run: RunConfig, tokenizer, include_hub: bool = False) -> list:
    """The [UNK] check of each source's first documents (vocab_check.SourceSample each)."""
    from bert_ds.data.sources import check_sources, parse_sources
    from bert_ds.data.tokenizer.data_check_cache import checked_sample

    sources = parse_sources(run.data.sources)
    # Reading a local source's first block opens its whole epoch, which builds every file's record
    # index: the start-up check does it first, announcing a long build and naming a bad record.
    check_sources(sources, run.data.txt_documents)
    return [checked_sample(s, tokenizer, run.data.seed, run.data.sentence_splitter, run.data.txt_documents)
            for s in sources if include_hub or not s.is_hub]


# Loader processes per GPU rank for --num-workers auto (Megatron's default too): tokenizing and
# masking run at about 0.7M tokens/s per core, the order of one GPU's BERT-base rate.
GPU_LOADER_WORKERS = 2


def loader_workers(requested: Optional[int], device_type: str, data_parallel: int,
                   saved: Optional[dict] = None) -> tuple[int, str]:
    """(DataLoader workers per rank, why): --num-workers, or for `auto` (None): resuming a
    checkpoint (`saved`: its layout record), the count that keeps its data shards (DP x workers,
    data/loader.py), so that each shard continues where it stopped (the same count on the same DP
    size; another count, or another number of shards, re-divides them: data/reshard.py); else
    GPU_LOADER_WORKERS on GPUs and 0 on CPUs, where a worker takes a core from the model."""
    if requested is not None:
        return requested, "--num-workers"
    default = GPU_LOADER_WORKERS if device_type == "gpu" else 0
    if saved and saved.get("num_workers") is not None and saved.get("data_parallel"):
        saved_workers, saved_dp = saved["num_workers"], saved["data_parallel"]
        if saved_dp == data_parallel:
            return saved_workers, "auto: the checkpoint's count, so its data stream continues exactly"
        shards = saved_dp * max(saved_workers, 1)
        if shards % data_parallel == 0:
            per_rank = shards // data_parallel
            return (per_rank if per_rank > 1 else min(default, 1),
                    f"auto: the checkpoint's {shards} data shards over {data_parallel} ranks, each continuing where it stopped")
    if device_type == "gpu":
        return default, "auto on GPUs: batches are built beside the training process"
    return default, "auto on CPUs: a worker process would take a core from the model"


def _resume(run: RunConfig) -> tuple[str, int, Optional[dict]]:
    """Where the run continues (a description and the step) and the layout its checkpoint was
    written with (None: no ZeRO checkpoint), refusing a premature phase switch."""
    from bert_ds.checkpoint import zero as checkpoints
    from bert_ds.checkpoint.portable import is_portable

    load_dir = run.checkpoint.load_dir
    if run.plan.plan_from_step is not None:
        return f"planned as if resuming at step {run.plan.plan_from_step:,} (--plan-from-step; not checked now)", run.plan.plan_from_step, None
    if load_dir is None:
        return "fresh start (no --load / --auto-resume)", 0, None
    if is_portable(load_dir):
        return f"weights from the portable checkpoint {load_dir}", 0, None
    if (Path(load_dir) / checkpoints.COMPLETE).is_file():
        load_dir, tag = str(Path(load_dir).parent), Path(load_dir).name
    elif run.checkpoint.auto_resume and checkpoints.latest_complete_tag(load_dir) is None:
        _check_phase(run, load_dir, None)
        return f"fresh start (no checkpoint in {load_dir} yet)", 0, None
    else:
        tag = checkpoints.require_latest(load_dir)
    marker = checkpoints.read_marker(load_dir, tag)
    _check_phase(run, load_dir, marker)
    saved_seq = (marker.get("run") or {}).get("seq_length")
    switch = f", sequence length {saved_seq} -> {run.data.seq_length}" if saved_seq and saved_seq != run.data.seq_length else ""
    return f"{Path(load_dir) / tag} (step {marker['step']:,}{switch})", int(marker["step"]), marker.get("layout")


def _check_phase(run: RunConfig, load_dir: str, marker: Optional[dict]) -> None:
    """A run that switches phase (--phase-start-step, or another sequence length than the run
    that wrote the checkpoint) must start from where the previous phase stopped."""
    step = int(marker["step"]) if marker else None
    newest = f"the newest checkpoint in {load_dir} is at step {step:,}" if marker else f"{load_dir} holds no checkpoint"
    if run.checkpoint.phase_start_step is not None:
        if step is None or step < run.checkpoint.phase_start_step:
            raise ConfigError(
                f"This phase starts at step {run.checkpoint.phase_start_step:,} but {newest}: the previous phase has not "
                "finished; let it finish (slurm/pretrain_large_all.sh chains the phases) or lower --phase-start-step."
            )
        return
    saved = (marker or {}).get("run") or {}
    stop = saved.get("stop_at_step")
    if step is not None and saved.get("seq_length") not in (None, run.data.seq_length) and stop and step < stop:
        raise ConfigError(
            f"{newest}, written by a {saved['seq_length']}-token run that stops at step {stop:,}: switching to "
            f"{run.data.seq_length} tokens now would cut that phase short; let it finish, or pass --phase-start-step "
            f"{step} to switch here on purpose."
        )
