"""Reading a metrics.jsonl back (what MetricsLogger in metrics.py writes): training lines (they have
"loss") and held-out evaluation lines ("eval/mlm_loss", no "loss"), other lines ignored. A resumed
run may list a step twice (a file written before the logger cut back on resume): the last line per
step and kind wins, as it is the run that carried on.

Two readers share this: `python -m bert_ds.plot` (strict: a file it cannot read is one error naming
the file and line) and the Table 5 report (`while_written=True`: the file of a pre-training that is
still running, whose last line may be half written, and where one line torn by a kill must not stop
a report of hours of results).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional

Records = list[dict[str, Any]]


class MetricsFileError(ValueError):
    """A metrics file that cannot be read; the message names the file (and line)."""


def read_metrics(path: str | Path, while_written: bool = False) -> tuple[Records, Records]:
    """(training records, evaluation records) of one metrics file, each sorted by step, with the
    last line kept for a step that appears twice. Raises MetricsFileError naming path (and line).

    while_written: a missing or empty file is ([], []), a last line that does not parse is one
    being written (left out silently), and any other bad line is left out with a warning naming
    it on stderr."""
    path = Path(path)
    if while_written and not path.is_file():
        return [], []
    try:
        # Bytes, decoded line by line, so a binary file's error can name its line too.
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise MetricsFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    train: dict[int, dict] = {}
    evals: dict[int, dict] = {}
    seen_content = False
    for line_number, raw in enumerate(lines, 1):
        try:
            text = raw.decode("utf-8").strip()
            record = json.loads(text) if text else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if not while_written:
                raise MetricsFileError(f"{path}:{line_number}: not JSON Lines ({exc})") from None
            if line_number < len(lines):
                _warn(path, line_number, "not JSON", raw)
            continue
        if while_written and text and not isinstance(record, dict) and line_number < len(lines):
            _warn(path, line_number, "not a JSON object", raw)  # a tool's stray line, or a damaged file
        seen_content |= bool(text)
        if not isinstance(record, dict) or not isinstance(record.get("step"), (int, float)):
            continue
        if "loss" in record:
            train[int(record["step"])] = record
        elif "eval/mlm_loss" in record:
            evals[int(record["step"])] = record
    if not while_written:
        if not seen_content:
            raise MetricsFileError(f"{path}: empty file, no metrics lines")
        if not train and not evals:
            raise MetricsFileError(f"{path}: no training or evaluation lines (is it a metrics .jsonl file?)")
    return [train[s] for s in sorted(train)], [evals[s] for s in sorted(evals)]


def _warn(path: Path, line_number: int, what: str, raw: bytes) -> None:
    print(f"bert_ds: warning: {path}, line {line_number}: {what}, left out ({raw[:60]!r})", file=sys.stderr, flush=True)


def number(value: Any) -> float:
    """A metrics value as a float; null (a diverged value, no NSP head) or a non-number is NaN
    (which matplotlib draws as a gap)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else math.nan


def crossing(evals: Records, level: float, x_key: str = "step",
             start: Optional[tuple[float, float]] = None, accuracy_key: str = "eval/mlm_accuracy") -> Optional[float]:
    """Where the held-out MLM accuracy (`accuracy_key`) of `evals` first reaches `level`, on `x_key`, linear
    between the evaluation before and the one that reaches it; None if none does. `start`, an
    (x, accuracy) point before the first evaluation, is where that one's segment begins (without
    it, a first evaluation already at `level` gives its own x)."""
    previous = start
    for record in evals:
        x, accuracy = number(record.get(x_key)), number(record.get(accuracy_key))
        if not (math.isfinite(x) and math.isfinite(accuracy)):
            continue
        if accuracy >= level:
            if previous is None or accuracy == previous[1]:  # nothing to interpolate across
                return x
            x0, accuracy0 = previous
            return x0 + (level - accuracy0) / (accuracy - accuracy0) * (x - x0)
        previous = (x, accuracy)
    return None
