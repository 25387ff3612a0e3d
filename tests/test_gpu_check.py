"""benchmarks/gpu_check.sh runs from the repository root wherever it is called from: its
install-only mode (no GPU needed) finds the interpreter and passes the import check. The scripts
once changed to the folder above the repository (a leftover of a move) and failed at their first
line on the lent GPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_install_only_runs_from_the_repository_root(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--install-only", str(out)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = (out / "gpu.txt").read_text()
    assert "imports: ok" in report and "python " in report
