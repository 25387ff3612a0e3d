"""Golden values: per-step losses of fixed tiny runs, recorded once and compared on every run.

A change meant to leave behaviour alone (a refactor) must reproduce them bitwise. Floating-point
sums depend on the CPU's kernels, so a file keeps one record per CPU (model name and the vector
ISA torch dispatches to): on a CPU that has a record the comparison is exact; on another it is to
1e-4 relative, which still catches a changed draw, order or formula (those move losses by 1e-2 and
more) but not a different CPU's rounding. Record or refresh with `BERT_DS_UPDATE_GOLDEN=1 make test`
(or that variable on one pytest invocation) and commit tests/golden/.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parents[1] / "golden"


def cpu_key() -> str:
    """The CPU a record belongs to: its model name and torch's kernel ISA (AVX2, AVX512...)."""
    import torch

    name = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name} / {torch.backends.cpu.get_cpu_capability()}"


def assert_golden(name: str, values: list) -> None:
    """`values` (floats, or lists/dicts of them) equal tests/golden/NAME.json's record for this CPU."""
    path = GOLDEN_DIR / f"{name}.json"
    records = json.loads(path.read_text()) if path.exists() else {}
    key = cpu_key()
    values = json.loads(json.dumps(values))  # the form a record has after a round trip (tuples -> lists)
    if os.environ.get("BERT_DS_UPDATE_GOLDEN") == "1":
        records[key] = values
        path.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        return
    if not records:
        pytest.fail(f"{path} is missing: record it with BERT_DS_UPDATE_GOLDEN=1 and commit it")
    if key in records:
        expected = records[key]
        if values != expected:
            pytest.fail(f"{name} differs from its golden record for {key} (bitwise): "
                        f"{_first_difference(values, expected)}")
    else:
        recorded_on, expected = next(iter(records.items()))
        assert values == pytest.approx(expected, rel=1e-4), f"{name}: golden recorded on {recorded_on}, this is {key}"


def _first_difference(values, expected) -> str:
    if isinstance(values, list) and isinstance(expected, list):
        if len(values) != len(expected):
            return f"{len(values)} values vs {len(expected)} recorded"
        for index, (got, want) in enumerate(zip(values, expected)):
            if got != want:
                return f"at index {index}: {got!r} vs recorded {want!r}"
    return f"{values!r} vs recorded {expected!r}"
