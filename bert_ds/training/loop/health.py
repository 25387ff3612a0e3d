"""Watch each step for non-finite losses and gradients, and keep an audit log of examples.

DeepSpeed's ZeRO-1/2 optimizer skips an update whose gradient norm is not finite (fp32 with
clipping, fp16, and bf16 with `check_grad_overflow`), and counts it in `engine.skipped_steps`.
`NonFiniteSteps` turns that into policy: log each skipped step, stop after too many in a row, and
stop at once if a non-finite loss got through to the weights (a configuration without that
check), never writing a checkpoint from a poisoned state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator


class TrainingDiverged(RuntimeError):
    """The run cannot continue from its current weights; the message says what to do."""


class NonFiniteSteps:
    def __init__(self, limit: int):
        self.limit, self.in_a_row, self.total = limit, 0, 0

    def record(self, step: int, nonfinite_loss: bool, skipped: bool, say: Callable[[str], None]) -> None:
        if skipped:
            self.in_a_row += 1
            self.total += 1
            say(f"step {step}: gradients not finite, update skipped ({self.in_a_row} in a row, {self.total} in all)")
        elif nonfinite_loss:
            raise TrainingDiverged(
                f"step {step}: the loss is not finite and this configuration (no gradient clipping, or a ZeRO "
                "stage/precision without an overflow check) applied the update; stopping without saving. "
                "Resume from the last checkpoint, e.g. with a lower --lr."
            )
        else:
            self.in_a_row = 0
        if self.in_a_row >= self.limit:
            raise TrainingDiverged(
                f"{self.in_a_row} consecutive steps ({step - self.in_a_row + 1}-{step}) had non-finite gradients and were "
                "skipped; stopping without saving, so the last checkpoint stays the last good state. "
                "Lower --lr or check the data, then resume."
            )


class ExampleLog:
    """`PATH.dpN`: one line per step, `STEP UID UID ...`, for data-parallel rank N (written by its
    first TP/PP rank). Opening it cuts lines after `start_step`: steps a killed run took after
    its last checkpoint were never kept, so they leave the record too."""

    def __init__(self, path: str, layout, start_step: int):
        self.file = Path(f"{path}.dp{layout.dp_rank}")
        self.enabled = layout.tp_rank == 0 and layout.pp_rank == 0
        if not self.enabled:
            return
        kept = []
        if self.file.is_file():
            kept = [line for line in self.file.read_text().splitlines(keepends=True) if int(line.split()[0]) <= start_step]
        self.file.write_text("".join(kept))

    def wrap(self, batches: Iterator[dict], step_of: Callable[[], int]) -> Iterator[dict]:
        for batch in batches:
            if self.enabled:
                with self.file.open("a") as out:  # flushed per batch: a kill loses nothing already trained
                    out.write(f"{step_of()} {' '.join(str(u) for u in batch['example_uid'].tolist())}\n")
            yield batch
