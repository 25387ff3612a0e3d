"""The output layer's cross-entropy: bert_ds's (model/vocab_cross_entropy.py, a few rows at a time
in the logits' own buffer) against megatron-core's `vocab_parallel_cross_entropy` on an fp32 copy
of the logits (what bert_ds ran before 2026-12-08), in one process, on this device.

The shape is a left-to-right model's micro-batch by default: 4,096 rows (32 x 128 tokens, every
position predicted) of BERT's padded 30,592-entry vocabulary. Each repeat times each side once,
alternately: forward and backward of the mean loss over the rows, from logits in the given
precision (a fresh copy each time, which is not timed). Reported per precision: the median
seconds of each side (wall; on a CPU also the process's CPU seconds, which a busy machine
disturbs less), their ratio, the largest difference of the losses and of the gradients, and the
peak memory each side adds over its input (a child process per side on a CPU, its peak resident
memory; torch's peak allocation on a GPU).

Usage: python benchmarks/vocab_cross_entropy.py [--rows 4096] [--vocab 30592] [--precisions fp32 bf16]
       [--repeats 5] [--threads N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SIDES = ("megatron", "bert_ds")


def _single_process_group() -> None:
    """A world of one, with megatron's tensor-parallel group (its CE reduces over that global group)."""
    from bert_ds.config import model_preset
    from bert_ds.runtime.distributed import init_parallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29571")
    init_parallel(model_preset("tiny"))


def _problem(rows: int, vocab: int, precision: str, device):
    generator = torch.Generator().manual_seed(0)
    # Drawn in the logits' own dtype: an fp32 draw would set the child's peak memory before the run.
    logits = torch.empty(rows, vocab, dtype=DTYPES[precision]).normal_(0.0, 3.0, generator=generator).to(device)
    targets = torch.randint(0, vocab, (rows,), generator=generator).to(device)
    return logits, targets


def _run(side: str, logits: torch.Tensor, targets: torch.Tensor):
    """(mean loss, gradient of the logits) of one side, from its own copy of `logits`."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    from bert_ds.model.vocab_cross_entropy import row_statistics, vocab_cross_entropy

    group = parallel_state.get_tensor_model_parallel_group()
    mine = logits.clone().requires_grad_()
    work = mine * 1  # the decoder's output is not a leaf: both sides may overwrite theirs
    if side == "megatron":
        loss = vocab_parallel_cross_entropy(work.float(), targets).mean()
    else:
        loss = vocab_cross_entropy(work, row_statistics(work, targets, group), group).mean()
    loss.backward()
    return loss.detach(), mine.grad


def _timed(side, logits, targets, device):
    from bert_ds.runtime.device import synchronize

    synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    _run(side, logits, targets)
    synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu


MEMORY_CHILD = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
sys.argv = sys.argv[1:]
import vocab_cross_entropy as bench
side, rows, vocab, precision = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
bench._single_process_group()
logits, targets = bench._problem(rows, vocab, precision, "cpu")
bench._run(side, logits[:64], targets[:64])  # imports and first-call set-up, not the peak
def status_kib(field):
    return int(open("/proc/self/status").read().split(field + ":")[1].split()[0])
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident memory (VmHWM) starts again from here
except OSError:
    print(-1)  # a kernel that cannot reset it: no figure rather than a wrong one
    sys.exit(0)
before = status_kib("VmRSS")
bench._run(side, logits, targets)
print((status_kib("VmHWM") - before) * 1024)
"""


def peak_memory(side: str, rows: int, vocab: int, precision: str, device) -> int:
    """Bytes `side` adds at its peak over its input (with the leaf copy whose gradient is taken
    and the non-leaf copy it computes on: both sides pay those); -1 where it cannot be measured."""
    if device.type == "cuda":
        logits, targets = _problem(rows, vocab, precision, device)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        _run(side, logits, targets)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, here, side, str(rows), str(vocab), precision],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def measure(precision: str, args, device) -> dict:
    logits, targets = _problem(args.rows, args.vocab, precision, device)
    losses, grads = zip(*(_run(side, logits, targets) for side in SIDES))
    for side in SIDES:  # warm-up
        _timed(side, logits, targets, device)
    times = {side: [] for side in SIDES}
    for _ in range(args.repeats):
        for side in SIDES:
            times[side].append(_timed(side, logits, targets, device))
    row = dict(precision=precision, rows=args.rows, vocab=args.vocab)
    for side in SIDES:
        row[f"{side}_seconds"] = statistics.median(t[0] for t in times[side])
        row[f"{side}_cpu_seconds"] = statistics.median(t[1] for t in times[side])
        row[f"{side}_peak_bytes"] = peak_memory(side, args.rows, args.vocab, precision, device)
    row["speedup"] = row["megatron_seconds"] / row["bert_ds_seconds"]
    row["cpu_speedup"] = row["megatron_cpu_seconds"] / row["bert_ds_cpu_seconds"]
    row["loss_difference"] = float((losses[0] - losses[1]).abs())
    row["gradient_difference"] = float((grads[0].float() - grads[1].float()).abs().max())
    row["gradient_scale"] = float(grads[0].float().abs().max())
    return row


def _mib(count: int) -> str:
    return "n/a" if count < 0 else f"{count / 2**20:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=30592)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from bert_ds.runtime.device import device as current_device

    if args.threads:
        torch.set_num_threads(args.threads)
    _single_process_group()
    device = current_device()
    rows = [measure(precision, args, device) for precision in args.precisions]
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    print(f"cross-entropy over {args.rows:,} x {args.vocab:,} logits, forward + backward, median of {args.repeats}, {name}")
    print("precision | megatron s | bert_ds s | speedup (wall) | speedup (CPU time) | megatron peak MiB | bert_ds peak MiB | loss diff | grad diff / max")
    for r in rows:
        print(f"{r['precision']} | {r['megatron_seconds']:.3f} | {r['bert_ds_seconds']:.3f} | {r['speedup']:.2f}x | "
              f"{r['cpu_speedup']:.2f}x | {_mib(r['megatron_peak_bytes'])} | {_mib(r['bert_ds_peak_bytes'])} | "
              f"{r['loss_difference']:.1e} | {r['gradient_difference']:.1e} / {r['gradient_scale']:.1e}")
    if args.json:
        args.json.write_text(json.dumps(dict(device=name, results=rows), indent=2) + "\n")


if __name__ == "__main__":
    main()
