"""When the pre-training loop evaluates, and what it does with the result.

Every `--eval-interval` steps (and at the run's last step) the loop scores the held-out set
(training/evaluation.py), logs it (`eval/` keys), says what share of the interval's time the
evaluation took, and then:
- `--keep-best`: a new best held-out masked-LM accuracy is checkpointed now and named in
  SAVE/best.json, which `--keep-last` rotation never removes;
- `--target-mlm-accuracy X`: the first evaluation at or above X stops the run with a checkpoint
  and reports steps, tokens and training time to get there (the MLPerf BERT measure). The time
  counts training and evaluation from the first step, summed over resumed runs (start-up excluded).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bert_ds.training.loop.metrics import format_duration


@dataclass
class EvalOutcome:
    improved: bool
    """The best held-out masked-LM accuracy of the run so far."""
    reached_target: bool


class HeldOutEvaluation:
    def __init__(self, run, eval_set, logger):
        self.run, self.eval_set, self.logger = run, eval_set, logger
        self._interval_start = time.perf_counter()

    def due(self, step: int, last_step: int) -> bool:
        return step % self.run.eval.eval_interval == 0 or step == self.run.optim.train_steps == last_step

    def __call__(self, engine, model, layout, state) -> EvalOutcome:
        """Collective: evaluate now, log, and update the state's best."""
        from bert_ds.training.evaluation import evaluate

        interval = time.perf_counter() - self._interval_start
        result = evaluate(engine, model, self.eval_set, layout)
        improved = state.best_eval_mlm_accuracy is None or result.mlm_accuracy > state.best_eval_mlm_accuracy
        if improved:
            state.best_eval_mlm_accuracy, state.best_eval_step = result.mlm_accuracy, state.step
        target = self.run.eval.target_mlm_accuracy
        reached = target is not None and result.mlm_accuracy >= target
        record = {**result.record(state), "eval/interval_share": result.seconds / max(interval, 1e-9),
                  "train_seconds": state.wall_seconds}
        if reached:
            record.update({"target/mlm_accuracy": target, "target/steps": state.step,
                           "target/tokens": state.consumed_tokens, "target/seconds": state.wall_seconds})
        self.logger.log_eval(record)
        self.logger.message(f"evaluation took {100 * record['eval/interval_share']:.1f}% of the "
                            f"{interval:.1f}s since the previous one")
        if reached:
            self.logger.message(
                f"reached the target held-out masked-LM accuracy {target:g} ({result.mlm_accuracy:.4f}) at step "
                f"{state.step:,}: {state.consumed_tokens:,} tokens, {format_duration(state.wall_seconds)} of training "
                "and evaluation; saving and stopping")
        self._interval_start = time.perf_counter()
        return EvalOutcome(improved, reached)

    def summary(self, state) -> str:
        """The closing line of a run with a target that it did not reach."""
        if self.run.eval.target_mlm_accuracy is None or state.best_eval_mlm_accuracy is None:
            return ""
        if state.best_eval_mlm_accuracy >= self.run.eval.target_mlm_accuracy:
            return ""
        return (f"the held-out masked-LM accuracy did not reach {self.run.eval.target_mlm_accuracy:g}: best "
                f"{state.best_eval_mlm_accuracy:.4f} at step {state.best_eval_step:,}")
