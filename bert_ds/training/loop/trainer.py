"""One pre-training run as an object: `Trainer` holds the run's options, engine, model, loader,
layout and logger, and reads top to bottom as resume -> train (or evaluate) -> save.

`train()` runs from the resumed state to --train-steps (or --stop-at-step): optimizer steps,
logging every --log-interval, checkpoints every --save-interval, held-out evaluations every
--eval-interval (training/loop/eval_schedule.py), and SIGUSR1/SIGTERM honoured at a step boundary.
TrainState is what a checkpoint carries besides weights, optimizer and data position.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time
from typing import Optional

from bert_ds.checkpoint import pretraining as checkpoint
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.errors import EXIT_CODE_FOR_SIGNAL  # noqa: F401 (training/job.py imports it from here)
from bert_ds.training.loop import faults
from bert_ds.training.loop.watchdog import watching


@dataclasses.dataclass
class TrainState:
    """Progress that a checkpoint carries besides the weights and optimizer."""

    step: int = 0
    consumed_samples: int = 0
    consumed_tokens: int = 0
    wall_seconds: float = 0.0
    """Time in the training loop (steps, evaluations, checkpoints), summed over resumed runs."""
    best_eval_mlm_accuracy: Optional[float] = None
    best_eval_step: int = 0
    stopped_by: int = dataclasses.field(default=0, compare=False, repr=False)
    """The signal that ended the run early (not saved: a resumed run starts afresh)."""

    def progress(self) -> dict:
        """What a checkpoint stores (every field but `stopped_by`)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.compare}


class StopRequest:
    """Remembers the first of the signals in `exit_codes` (SIGUSR1/SIGTERM for pre-training); ranks
    agree on it at a step boundary (see `agreed`)."""

    def __init__(self, exit_codes: dict = EXIT_CODE_FOR_SIGNAL):
        self.signal = 0
        self.exit_codes = exit_codes
        for number in exit_codes:
            signal.signal(number, self._record)

    def _record(self, number, _frame):
        self.signal = self.signal or number

    def exit_code(self) -> int:
        """The exit code of the signal received (0: none)."""
        return self.exit_codes.get(self.signal, 0)

    def agreed(self, layout, loss, skipped: bool) -> tuple[int, bool, bool]:
        """Collective: (the signal any rank received, whether any rank's loss was not finite,
        whether the update was skipped); ranks get signals at different moments. `loss` (this
        step's, a float or a tensor still on the device) is checked on the device: this is the
        step's one read of the device, shared with the signal and skip flags."""
        import torch
        import torch.distributed as dist

        nonfinite = ~torch.isfinite(torch.as_tensor(loss).detach().to(device=layout.device, dtype=torch.float64))
        flags = torch.stack([torch.tensor(int(self.signal), device=layout.device), nonfinite.long(),
                             torch.tensor(int(skipped), device=layout.device)])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        signal_number, nonfinite, skip = flags.tolist()
        return signal_number, bool(nonfinite), bool(skip)


@dataclasses.dataclass
class Trainer:
    """Everything one pre-training run works with, built by training/job.py."""

    run: object
    """The RunConfig (training/config/args.py)."""
    engine: object
    model: object
    loader: object
    layout: object
    model_config: object
    precision: object
    """The PrecisionChoice the engine trains in (recorded in every checkpoint)."""
    state: TrainState = dataclasses.field(default_factory=TrainState)
    logger: object = None
    """The MetricsLogger, open inside `logging()`."""

    def resume(self) -> None:
        """Restore everything from the latest complete checkpoint (any layout), or start fresh."""
        resumed = checkpoint.resume(self)
        if resumed.message:
            self.layout.say(resumed.message)
        self.state = TrainState(**resumed.progress) if resumed.progress else TrainState()

    @contextlib.contextmanager
    def logging(self):
        """The metrics logger (console, --metrics-file, --tensorboard-dir) from the resumed step."""
        from bert_ds.training.loop.metrics import MetricsLogger

        run = self.run
        self.logger = MetricsLogger(total_steps=run.optim.train_steps, metrics_file=run.log.metrics_file, tensorboard_dir=run.log.tensorboard_dir,
                                    enabled=self.layout.rank == 0, start_step=self.state.step,
                                    restarting=run.checkpoint.auto_resume)
        try:
            yield self.logger
        finally:
            self.logger.close()

    def evaluate(self, eval_set) -> None:
        """--eval-only: score the loaded weights once and log it at the checkpoint's step."""
        from bert_ds.training.evaluation import evaluate

        self.logger.log_eval(evaluate(self.engine, self.model, eval_set, self.layout).record(self.state))

    def save(self, best: Optional[dict] = None) -> None:
        """Collective: a complete checkpoint of the current step (`best`: see checkpoint.pretraining.save)."""
        with watching().phase("checkpoint", f"writing checkpoint step {self.state.step} to {self.run.checkpoint.save}"):
            faults.delay("save", self.state.step, self.layout.rank)
            tag_dir = checkpoint.save(self, best, hooks=faults)
        self.logger.message(f"saved checkpoint {tag_dir}" + (" (the best held-out accuracy so far: best.json)" if best else ""))

    def _save_or_warn(self, saved_at: int, best: Optional[dict] = None) -> int:
        """A periodic checkpoint; if it cannot be written (full disk...), say so and train on: the
        previous checkpoint is intact and the next interval tries again."""
        try:
            self.save(best)
            return self.state.step
        except CheckpointError as error:
            self.logger.message(f"error: {error} Training continues; the next checkpoint is due at step "
                                f"{self.state.step + self.run.checkpoint.save_interval}.")
            return saved_at

    def train(self, eval_set=None) -> TrainState:
        """The loop, from the resumed step; `eval_set`: the held-out micro-batches, if any."""
        from bert_ds.training.loop.eval_schedule import HeldOutEvaluation
        from bert_ds.training.loop.health import ExampleLog, NonFiniteSteps
        from bert_ds.training.loop.rank_times import RankTimes
        from bert_ds.training.loop.steps import StepResult, pipeline_step, plain_step, reduce_step_results

        run, engine, layout, state = self.run, self.engine, self.layout, self.state
        evaluation = HeldOutEvaluation(run, eval_set, self.logger) if eval_set is not None else None
        pipeline = layout.pipeline_parallel > 1
        accumulation = run.validate_batch(layout.data_parallel)
        batches = iter(self.loader)
        if run.log.example_log:
            batches = ExampleLog(run.log.example_log, layout, state.step).wrap(batches, lambda: state.step + 1)
        window, window_start, saved_at = StepResult(), time.perf_counter(), state.step
        last_step = min(run.optim.train_steps, run.checkpoint.stop_at_step or run.optim.train_steps)
        stop, health = StopRequest(), NonFiniteSteps(run.log.max_skipped_steps)
        loop_start, wall_before, watchdog = time.perf_counter(), state.wall_seconds, watching()
        times = RankTimes(layout.device)
        while state.step < last_step:
            step_start = time.perf_counter()
            lr, skipped_before = engine.get_lr()[0], engine.skipped_steps
            with watchdog.phase("step", f"step {state.step + 1}: forward and loss (tensor-parallel all-reduces)"):
                if pipeline:
                    result = pipeline_step(engine, batches, accumulation, layout.device, self.model, times)
                else:
                    poison = faults.poisoned(state.step + 1, layout.rank)
                    result = plain_step(engine, batches, accumulation, layout, poison, state.step + 1, times)
            window.add(result)
            state.step += 1
            state.consumed_samples += run.optim.global_batch_size
            faults.at("step", state.step, layout.rank)
            with watchdog.phase("collective", "the all-reduce of the step's flags (signals, non-finite loss)"):
                state.stopped_by, nonfinite, skipped = stop.agreed(layout, result.loss, engine.skipped_steps > skipped_before)
            watchdog.step_done(state.step, time.perf_counter() - step_start)
            health.record(state.step, nonfinite, skipped, self.logger.message)
            save_due = bool(run.checkpoint.save and run.checkpoint.save_interval and state.step % run.checkpoint.save_interval == 0)
            eval_due = evaluation is not None and evaluation.due(state.step, last_step)
            # A checkpoint or an evaluation also closes the logging window, so its token count includes every step.
            if state.step % run.log.log_interval == 0 or state.step == last_step or save_due or eval_due or state.stopped_by:
                # Reading the sums back waits for the device, so the window's time below is the
                # device's time too (no separate synchronize needed on a GPU).
                total = reduce_step_results(window, layout, pipeline)
                elapsed = time.perf_counter() - window_start
                state.consumed_tokens += int(total.tokens)
                state.wall_seconds = wall_before + time.perf_counter() - loop_start
                with watchdog.phase("collective", "the all-gather of every rank's step times"):
                    ranks = times.report()
                self.logger.log({**self._metrics(total, lr, elapsed), **ranks})
                if ranks["straggler"]:
                    self.logger.message(f"straggler: {ranks['straggler']}")
                window, window_start = StepResult(), time.perf_counter()
            state.wall_seconds = wall_before + time.perf_counter() - loop_start
            if eval_due:
                with watchdog.phase("evaluation", f"the held-out evaluation at step {state.step}"):
                    outcome = evaluation(engine, self.model, layout, state)
                if outcome.improved and run.eval.keep_best:
                    best = {"step": state.step, "eval/mlm_accuracy": state.best_eval_mlm_accuracy}
                    saved_at = self._save_or_warn(saved_at, best)
                if outcome.reached_target:
                    break
            if state.stopped_by:
                self.logger.message(f"received {signal.Signals(state.stopped_by).name}: saving and stopping at step {state.step}")
                break
            if save_due and saved_at != state.step:
                saved_at = self._save_or_warn(saved_at)
        if run.checkpoint.save and saved_at != state.step:
            self.save()  # the final one: failing it is an error
        closing = evaluation.summary(state) if evaluation is not None else ""
        if closing:
            self.logger.message(closing)
        return state

    def _metrics(self, total, lr: float, elapsed: float) -> dict:
        from bert_ds.training.loop.metrics import bert_flops_per_sequence

        state, engine, config = self.state, self.engine, self.model_config
        micro = max(total.micro_batches, 1.0)
        samples = max(total.samples, 1.0)
        flops = bert_flops_per_sequence(
            config.num_layers, config.hidden_size, config.vocab_size, self.run.data.seq_length,
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
            train_seconds=state.wall_seconds,  # the training loop's time, summed over resumed runs
        )
