"""benchmarks/gpu_check.sh runs from the repository root wherever it is called from: its
install-only mode (no GPU needed) finds the interpreter and passes the import check. The scripts
once changed to the folder above the repository (a leftover of a move) and failed at their first
line on the lent GPU."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_install_only_runs_from_the_repository_root(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--install-only", str(out)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = (out / "gpu.txt").read_text()
    assert "imports: ok" in report and "python " in report


def _probe_wheel(folder: Path) -> str:
    """A minimal wheel (a zip with its dist-info), standing for the carried DeepSpeed/megatron wheels."""
    import zipfile

    folder.mkdir()
    name = "gpu_check_probe"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{name}-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
        wheel.writestr(f"{name}-1.0.dist-info/RECORD", record)
    return name


@pytest.mark.slow
def test_gpu_check_cpu_mode_runs_every_part_of_the_script(tmp_path):
    """--cpu: the script as the lent GPU will run it (wheels installed into a target folder, the
    import check, pretrain -> checkpoint -> GLUE step -> the cross-entropy against megatron's ->
    throughput at 128 and 512 tokens), on the
    tiny preset, so that a broken command fails here rather than on the lease."""
    import sys

    probe = _probe_wheel(tmp_path / "wheels")
    out, site = tmp_path / "out", tmp_path / "site"
    env = dict(os.environ, WHEELS=str(tmp_path / "wheels"), SITE=str(site), PYTHON=sys.executable, OMP_NUM_THREADS="1")
    run = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--cpu", str(out)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    report = (out / "gpu.txt").read_text() if (out / "gpu.txt").is_file() else ""
    assert run.returncode == 0, report + run.stdout[-3000:] + run.stderr[-2000:]
    assert (site / probe / "__init__.py").is_file() and "installing 1 wheels" in report
    assert report.splitlines()[-1] == "gpu_check: passed: pretrain glue cross_entropy large_128 large_512; failed: none"
    assert "saved checkpoint" in (out / "pretrain.txt").read_text()
    assert '"accuracy"' in (out / "glue.txt").read_text()  # results.json of the fine-tuning step
    cross_entropy = json.loads((out / "cross_entropy.json").read_text())["results"]
    assert [row["precision"] for row in cross_entropy] == ["fp32", "bf16"]
    assert all(row["loss_difference"] < 1e-4 for row in cross_entropy)
    for seq in (128, 512):
        assert '"bert_ds_tokens_per_s"' in (out / f"large_{seq}.json").read_text()
