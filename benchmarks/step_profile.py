"""Where a pre-training step's time goes: torch.profiler's per-op table of bert_ds's real step.

The engine is the one pretrain.py builds (training/job.py setup_engine: DeepSpeed, our model and
loss, `--precision`), stepped by training/loop/steps.py plain_step over batches of the built-in
sample (BERT's 30522-entry vocabulary). After warm-up steps, `--steps` optimizer steps are
profiled; each op's self time per step is printed, largest first, with the share the matrix
multiplies take (mm, addmm, bmm, baddbmm and SDPA's kernels) and the rest, "non-matrix" time:
element-wise work, dtype copies, norms, the optimizer. `--accumulation N` profiles the recipe's
shape: N micro batches of `--micro-batch` per optimizer step.

Usage: python benchmarks/step_profile.py [--preset base] [--precision bf16] [--seq-length 128]
       [--micro-batch 8] [--accumulation 1] [--warmup 2] [--steps 3] [--top 25] [--threads N]
       [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MATRIX_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
              "aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
              "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention")


def build(args):
    """The engine, its layout and a list of batches for `args`' shape."""
    from bert_ds.training import job
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.resolve import run_model_config
    from benchmarks.train_throughput import fixed_batches

    micro, global_batch = args.micro_batch, args.micro_batch * args.accumulation
    run = parse_args(["--preset", args.preset, "--seq-length", str(args.seq_length), "--global-batch-size", str(global_batch),
                      "--micro-batch-size", str(micro), "--lr", "1e-4", "--precision", args.precision])
    model_config = run_model_config(run, 30522)
    layout = job.setup_parallel(run, model_config)
    engine, _, setup = job.setup_engine(run, model_config, layout)
    from bert_ds.training.plan.tokenizer import resolve_tokenizer

    batches, _ = fixed_batches(resolve_tokenizer(parse_args([])), args.seq_length, micro, args.accumulation * 2)
    return engine, layout, batches, setup


def profile(args) -> dict:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from bert_ds.runtime.device import synchronize
    from bert_ds.training.loop.steps import plain_step

    engine, layout, batches, setup = build(args)

    def step(i: int) -> None:
        chosen = batches[(i % 2) * args.accumulation:(i % 2 + 1) * args.accumulation]
        plain_step(engine, iter(chosen), args.accumulation, layout)

    for i in range(args.warmup):
        step(i)
    synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(args.steps):
            step(i)
        synchronize()
    rows = [(e.key, e.self_cpu_time_total / 1e6 / args.steps, e.count // args.steps) for e in prof.key_averages()]
    rows = sorted((r for r in rows if r[1] > 0), key=lambda r: -r[1])
    total = sum(seconds for _, seconds, _ in rows)
    matrix = sum(seconds for name, seconds, _ in rows if name in MATRIX_OPS)
    return dict(preset=args.preset, precision=args.precision, zero_stage=setup.zero_stage,
                shape=f"{args.seq_length} x {args.micro_batch} x {args.accumulation}", threads=torch.get_num_threads(),
                seconds_per_step=total, matrix_seconds=matrix, non_matrix_seconds=total - matrix,
                matrix_share=matrix / total, ops=[dict(op=n, seconds=s, calls=c) for n, s, c in rows])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", help="write the profile to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = profile(args)
    print(f"{result['preset']} {result['precision']} (ZeRO-{result['zero_stage']}), {result['shape']}, "
          f"{result['threads']} threads: {result['seconds_per_step']:.3f} s of op self time per step; matrix "
          f"{result['matrix_seconds']:.3f} s ({100 * result['matrix_share']:.1f}%), non-matrix "
          f"{result['non_matrix_seconds']:.3f} s")
    print("| op | s per step | share | calls per step |\n|---|---|---|---|")
    for row in result["ops"][:args.top]:
        print(f"| `{row['op']}` | {row['seconds']:.4f} | {100 * row['seconds'] / result['seconds_per_step']:.1f}% | {row['calls']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    from bert_ds.runtime.distributed import teardown_parallel

    teardown_parallel()
    return result


if __name__ == "__main__":
    main()
