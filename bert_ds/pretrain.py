"""Pre-train BERT: `deepspeed bert_ds/pretrain.py ...` (also torchrun, or plain python for one process).

main() reads top to bottom: options -> tokenizer -> launch plan -> parallel layout -> DeepSpeed
engine -> data -> resume -> train -> save. Each phase is a function below; `python
bert_ds/pretrain.py --help` lists the options. `--dry-run` stops after the plan (training/plan.py):
no process group, no model, no GPU touched.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script (the deepspeed launcher's way): import bert_ds as a package, never its
    # modules as top-level names from this folder.
    _here = Path(__file__).resolve().parent
    sys.path = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from bert_ds.checkpoint import zero as checkpoints  # noqa: E402
from bert_ds.config import ConfigError  # noqa: E402
from bert_ds.data.sources import DataError  # noqa: E402
from bert_ds.data.tokenizer import TokenizerError  # noqa: E402
from bert_ds.training.args import RunConfig, parse_args  # noqa: E402

from bert_ds.training.health import TrainingDiverged  # noqa: E402

USER_ERRORS = (ConfigError, DataError, TokenizerError, checkpoints.CheckpointError)
EXIT_DIVERGED = 3  # non-finite steps: stopped without saving, the last checkpoint is the good state


@dataclasses.dataclass
class TrainState:
    """Progress that a checkpoint carries besides the weights and optimizer."""

    step: int = 0
    consumed_samples: int = 0
    consumed_tokens: int = 0
    stopped_by: int = dataclasses.field(default=0, compare=False, repr=False)
    """The signal that ended the run early (not saved: a resumed run starts afresh)."""


# Exit codes of a run stopped by a signal after its checkpoint: Slurm's time-limit warning
# (SIGUSR1, the batch script requeues the job) and SIGTERM (scancel, preemption).
EXIT_CODE_FOR_SIGNAL = {signal.SIGUSR1: 99, signal.SIGTERM: 143}


class StopRequest:
    """Remembers SIGUSR1/SIGTERM; ranks agree on it at a step boundary (see `agreed`)."""

    def __init__(self):
        self.signal = 0
        for number in EXIT_CODE_FOR_SIGNAL:
            signal.signal(number, self._record)

    def _record(self, number, _frame):
        self.signal = self.signal or number

    def agreed(self, layout, nonfinite_loss: bool, skipped: bool) -> tuple[int, bool, bool]:
        """Collective: (the signal any rank received, whether any rank's loss was not finite,
        whether the update was skipped); ranks get signals at different moments."""
        import torch
        import torch.distributed as dist

        flags = torch.tensor([int(self.signal), int(nonfinite_loss), int(skipped)], device=layout.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        signal_number, nonfinite, skip = flags.tolist()
        return signal_number, bool(nonfinite), bool(skip)


def setup_tokenizer(run: RunConfig):
    from bert_ds.training.tokenizer_setup import resolve_tokenizer

    return resolve_tokenizer(run)


def setup_parallel(run: RunConfig, tokenizer):
    """Model config (vocab from the tokenizer, padded) and the process layout."""
    import deepspeed

    from bert_ds.config import padded_vocab_size
    from bert_ds.distributed import backend, init_parallel

    vocab = padded_vocab_size(tokenizer.vocab_size)
    model_config = run.model_config(vocab)
    layout = init_parallel(model_config, run.tensor_parallel, run.pipeline_parallel, seed=run.seed)
    deepspeed.init_distributed(dist_backend=backend())  # adopts the process group just made
    return model_config, layout


def setup_engine(run: RunConfig, model_config, layout, ds_config: dict | None = None):
    """The model (plain or pipelined), optimizer, LR schedule and DeepSpeed engine; `ds_config`
    is the launch plan's (built here when a caller has no plan: tests, benchmarks)."""
    import deepspeed

    from bert_ds.distributed import DeepSpeedMPU
    from bert_ds.host_memory import tune_malloc_for_training
    from bert_ds.training.ds_config import optimizer_offloaded, pretraining_deepspeed_config, skip_single_replica_allreduce, zero_stage
    from bert_ds.training.optim import build_optimizer, build_scheduler, share_clip_norm

    notes = []
    if ds_config is None:
        from bert_ds.training.plan import pretraining_batch_plan

        batch = pretraining_batch_plan(run, model_config, layout.data_parallel)
        ds_config, notes, _ = pretraining_deepspeed_config(run, batch, layout.device.type)
    with_nsp = run.objective == "mlm_nsp"
    if layout.pipeline_parallel > 1:
        from bert_ds.model.pipeline import build_pipeline_model

        model, mpu = build_pipeline_model(model_config, layout, with_nsp=with_nsp), None
    else:
        from bert_ds.model import build_pretraining_model

        model, mpu = build_pretraining_model(model_config, layout, with_nsp=with_nsp), DeepSpeedMPU(layout)
        if zero_stage(ds_config) == 3:
            # The MLM decoder reads the word-embedding matrix outside the embedding's own forward.
            deepspeed.zero.register_external_parameter(model.lm_head, model.bert.embeddings.word_embeddings.weight)
    optimizer = build_optimizer(run, model, layout.device.type, optimizer_offloaded(ds_config), zero_stage(ds_config))
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=build_scheduler(run), config=ds_config, mpu=mpu
    )
    skip_single_replica_allreduce(engine, layout.data_parallel)
    share_clip_norm(engine)
    # CPU steps stop page-faulting big buffers
    tune_malloc_for_training(layout.device.type, zero_stage(ds_config), layout.data_parallel)
    return engine, model, notes


def setup_data(run: RunConfig, tokenizer, layout):
    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import parse_sources

    return PretrainingLoader(parse_sources(run.data), tokenizer, run.data_config(), layout.dp_rank, layout.data_parallel)


def say(layout, text: str) -> None:
    """A console line from rank 0 only."""
    if layout.rank == 0:
        print(text, flush=True)


def resume(run: RunConfig, engine, model, loader, layout, model_config) -> TrainState:
    """Restore everything from the latest complete checkpoint (any layout), or start fresh."""
    from bert_ds.training import checkpointing

    resumed = checkpointing.resume(run, engine, model, loader, layout, model_config)
    if resumed.message:
        say(layout, resumed.message)
    return TrainState(**resumed.progress) if resumed.progress else TrainState()


def save(run: RunConfig, engine, model, loader, layout, state: TrainState, model_config, logger) -> None:
    from bert_ds.training import checkpointing

    progress = dict(step=state.step, consumed_samples=state.consumed_samples, consumed_tokens=state.consumed_tokens)
    tag_dir = checkpointing.save(run, engine, model, loader, layout, progress, model_config)
    logger.message(f"saved checkpoint {tag_dir}")


def train(run: RunConfig, engine, model, loader, layout, model_config, state: TrainState, logger) -> TrainState:
    """The loop: optimizer steps, logging every --log-interval, checkpoints every --save-interval."""
    from bert_ds.training.steps import StepResult, pipeline_step, plain_step, reduce_step_results

    from bert_ds.training import faults
    from bert_ds.training.health import ExampleLog, NonFiniteSteps

    pipeline = layout.pipeline_parallel > 1
    accumulation = run.validate_batch(layout.data_parallel)
    batches = iter(loader)
    if run.example_log:
        batches = ExampleLog(run.example_log, layout, state.step).wrap(batches, lambda: state.step + 1)
    window, window_start, saved_at = StepResult(), time.perf_counter(), state.step
    last_step = min(run.train_steps, run.stop_at_step or run.train_steps)
    stop, health = StopRequest(), NonFiniteSteps(run.max_skipped_steps)
    while state.step < last_step:
        lr, skipped_before = engine.get_lr()[0], engine.skipped_steps
        if pipeline:
            result = pipeline_step(engine, batches, accumulation, layout.device, model)
        else:
            poison = faults.poisoned(state.step + 1, layout.rank)
            result = plain_step(engine, batches, accumulation, layout.device, poison)
        window.add(result)
        state.step += 1
        state.consumed_samples += run.global_batch_size
        faults.at("step", state.step, layout.rank)
        state.stopped_by, nonfinite, skipped = stop.agreed(layout, not math.isfinite(result.loss), engine.skipped_steps > skipped_before)
        health.record(state.step, nonfinite, skipped, logger.message)
        save_due = bool(run.save and run.save_interval and state.step % run.save_interval == 0)
        # A checkpoint also closes the logging window, so its token count includes every step.
        if state.step % run.log_interval == 0 or state.step == last_step or save_due or state.stopped_by:
            total = reduce_step_results(window, layout, pipeline)
            elapsed = time.perf_counter() - window_start
            state.consumed_tokens += int(total.tokens)
            logger.log(_metrics(state, total, lr, engine, elapsed, model_config, run))
            window, window_start = StepResult(), time.perf_counter()
        if state.stopped_by:
            logger.message(f"received {signal.Signals(state.stopped_by).name}: saving and stopping at step {state.step}")
            break
        if save_due:
            saved_at = _save_or_warn(run, engine, model, loader, layout, state, model_config, logger, saved_at)
    if run.save and saved_at != state.step:
        save(run, engine, model, loader, layout, state, model_config, logger)  # the final one: failing it is an error
    return state


def _save_or_warn(run, engine, model, loader, layout, state, model_config, logger, saved_at: int) -> int:
    """A periodic checkpoint; if it cannot be written (full disk...), say so and train on: the
    previous checkpoint is intact and the next interval tries again."""
    try:
        save(run, engine, model, loader, layout, state, model_config, logger)
        return state.step
    except checkpoints.CheckpointError as error:
        logger.message(f"error: {error} Training continues; the next checkpoint is due at step {state.step + run.save_interval}.")
        return saved_at


def _metrics(state, total, lr, engine, elapsed, model_config, run) -> dict:
    from bert_ds.training.metrics import bert_flops_per_sequence

    micro = max(total.micro_batches, 1.0)
    samples = max(total.samples, 1.0)
    flops = bert_flops_per_sequence(
        model_config.num_layers, model_config.hidden_size, model_config.vocab_size, run.seq_length,
        total.predicted_tokens / samples, with_nsp=total.has_nsp > 0,
    )
    grad_norm = engine.get_global_grad_norm()
    return dict(
        step=state.step,
        consumed_samples=state.consumed_samples,
        consumed_tokens=state.consumed_tokens,
        loss=total.loss / micro,
        mlm_loss=total.mlm_loss / micro,
        nsp_loss=total.nsp_loss / total.has_nsp if total.has_nsp else None,
        mlm_accuracy=total.mlm_accuracy / micro,
        nsp_accuracy=total.nsp_accuracy / total.has_nsp if total.has_nsp else None,
        lr=lr,
        grad_norm=float(grad_norm) if grad_norm is not None else None,
        skipped_steps=int(engine.skipped_steps),
        tokens_per_s=total.tokens / elapsed,
        samples_per_s=total.samples / elapsed,
        model_flops_per_s=flops * total.samples / elapsed,
    )


@dataclasses.dataclass
class PretrainingRun:
    """What a finished run leaves for in-process callers (the demo, evaluation)."""

    engine: object
    model: object
    tokenizer: object
    layout: object
    model_config: object
    state: TrainState


def plan_launch(run: RunConfig, tokenizer):
    """The launch plan with the run's own tokenizer; rank 0 prints it (and writes --plan-json) and
    checks the tokenizer against the first documents of every source."""
    from bert_ds.launcher import discover
    from bert_ds.training.plan import resolve_plan, sample_sources
    from bert_ds.training.plan_report import format_pretrain_plan, pretrain_plan_json, write_plan_json

    plan = resolve_plan(run, tokenizer=tokenizer, sample_data=False)
    if discover(os.environ).rank == 0:
        print(format_pretrain_plan(plan), flush=True)
        if run.plan_json:
            write_plan_json(run.plan_json, pretrain_plan_json(plan))
        for sample in sample_sources(plan.run, tokenizer, include_hub=True):
            print(f"tokenizer check: {sample.describe()}", flush=True)
            if sample.warning():
                print("\n" + "!" * 100 + f"\n{sample.warning()}\n" + "!" * 100 + "\n", file=sys.stderr, flush=True)
    return plan


def run_pretraining(run: RunConfig) -> PretrainingRun:
    """Every phase of a run, in order; the process group stays up for the caller."""
    from bert_ds.training.metrics import MetricsLogger

    tokenizer = setup_tokenizer(run)
    plan = plan_launch(run, tokenizer)
    run = plan.run  # every `auto` resolved
    model_config, layout = setup_parallel(run, tokenizer)
    engine, model, _ = setup_engine(run, model_config, layout, plan.ds_config)
    loader = setup_data(run, tokenizer, layout)
    if run.save:
        checkpoints.prepare_save_dir(run.save, tokenizer)  # an unwritable --save fails here, not hours later
    state = resume(run, engine, model, loader, layout, model_config)
    logger = MetricsLogger(
        total_steps=run.train_steps, metrics_file=run.metrics_file, tensorboard_dir=run.tensorboard_dir,
        enabled=layout.rank == 0, start_step=state.step,
    )
    try:
        train(run, engine, model, loader, layout, model_config, state, logger)
    finally:
        logger.close()
    return PretrainingRun(engine, model, tokenizer, layout, model_config, state)


def dry_run(run: RunConfig) -> int:
    """Print the launch plan for `--dry-run`'s device kind and exit 0 (a user error raises)."""
    # `datasets` (which reads the sources' first documents) would import torch for its torch
    # formatter; this process never trains, and without it a plan takes about a second.
    os.environ.setdefault("USE_TORCH", "0")
    from bert_ds.training.plan import resolve_plan
    from bert_ds.training.plan_report import format_pretrain_plan, pretrain_plan_json, write_plan_json

    plan = resolve_plan(run, target=run.dry_run)
    print(format_pretrain_plan(plan), flush=True)
    if run.plan_json:
        write_plan_json(run.plan_json, pretrain_plan_json(plan))
    return 0


def main(argv=None) -> int:
    try:
        run = parse_args(argv)
        if run.dry_run:
            return dry_run(run)  # without torch for --dry-run gpu/cpu: seconds on a login node
        from bert_ds.distributed import teardown_parallel

        finished = run_pretraining(run)
        teardown_parallel()
        return EXIT_CODE_FOR_SIGNAL.get(finished.state.stopped_by, 0)
    except USER_ERRORS as error:
        return _report(error, 2)
    except TrainingDiverged as error:
        return _report(error, EXIT_DIVERGED)


def _report(error: Exception, code: int) -> int:
    rank = os.environ.get("RANK", "0")
    prefix = f"[rank {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
    print(f"{prefix}error: {error}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
