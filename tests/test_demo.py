import re
import subprocess
import sys


def test_demo_trains_the_tiny_model():
    run = subprocess.run(
        [sys.executable, "-m", "bert_ds.demo", "--steps", "40"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+) in 40 steps", run.stdout).groups())
    assert last < 0.8 * first, run.stdout
