"""Host memory of the vocabulary decoder over many steps: a new row count at every step against
the row count bert_ds pads to (model/selection.py), in the precision `auto` picks on this CPU.

Each step draws a 128 x 128 batch's masked positions (15%, as pre-training does), takes that many
rows of hidden size 256 through the decoder (rows x 256 -> 30,522, forward and backward, in bf16
autocast where this CPU has a fast bf16 matmul, else fp32), and frees everything. Three cases, each
in a fresh process so that one's caches never reach another:
  - varying: the exact number of masked positions (bert_ds before 2026-12-05);
  - padded:  that number rounded up to model/selection.py's ROW_MULTIPLE (bert_ds now);
  - fixed:   one count for every step (the floor).
It prints each case's resident memory after every 100 steps and, at the end, the growth
(last - after the first 20 steps) and each case's final resident memory against `padded`'s.

Usage: python benchmarks/decoder_memory.py [--steps 600] [--precision auto|fp32|bf16] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CASES = ("varying", "padded", "fixed")

CHILD = r"""
import sys
import numpy as np
import torch
from bert_ds.model.selection import padded_selection
case, steps, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def resident_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 // 2**20

torch.manual_seed(0)
rng = np.random.default_rng(0)
weight = torch.randn(30522, 256, requires_grad=True)
hidden = torch.randn(128 * 128, 256)
labels = np.zeros((128, 128), dtype=np.int64)
for step in range(1, steps + 1):
    mask = rng.random((128, 128)) < 0.15
    rows = {"varying": int(mask.sum()), "padded": padded_selection(mask, labels)[0].size, "fixed": 2432}[case]
    x = hidden[:rows].clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        logits = x @ weight.t()
    logits.float().sum().backward()
    weight.grad = None
    if step in (20,) or step % 100 == 0:
        print(step, resident_mib(), flush=True)
"""


def _auto_precision() -> str:
    """What `--precision auto` trains in on this CPU (runtime/precision.py)."""
    from bert_ds.runtime.precision import choose_precision

    return choose_precision("auto", "cpu").name


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    precision = _auto_precision() if args.precision == "auto" else args.precision
    print(f"decoder 256 -> 30,522, {args.steps} steps, {precision}, one fresh process per case")
    results = {}
    for case in CASES:
        out = subprocess.run([sys.executable, "-c", CHILD, case, str(args.steps), precision],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"error: case {case} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
            return 1
        # (step, MiB) lines only: an import may print its own (DeepSpeed's accelerator warning).
        series = [tuple(map(int, line.split())) for line in out.stdout.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
        for step, mib in series:
            print(f"  {case:8s} step {step:5d}: {mib:6,d} MiB", flush=True)
        results[case] = {"series": series, "growth_mib": series[-1][1] - series[0][1], "final_mib": series[-1][1]}
    base = results["padded"]["final_mib"]
    for case, result in results.items():
        result["final_vs_padded"] = round(result["final_mib"] / base, 2)
        print(f"{case:8s} grew {result['growth_mib']:6,d} MiB after step 20, ends at {result['final_mib']:6,d} MiB "
              f"({result['final_vs_padded']:.2f}x padded)")
    if args.json:
        args.json.write_text(json.dumps(dict(precision=precision, steps=args.steps, cases=results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
