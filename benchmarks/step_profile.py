"""Where a pre-training step's time goes: torch.profiler's per-op table of bert_ds's real step.

The engine is the one pretrain.py builds (training/job.py setup_engine: DeepSpeed, our model and
loss, `--precision`), stepped by training/loop/steps.py plain_step over batches of the built-in
sample (BERT's 30522-entry vocabulary). After warm-up steps, `--steps` optimizer steps are
profiled; each op's self time per step is printed, largest first, with the share the matrix
multiplies take (mm, addmm, bmm, baddbmm and SDPA's kernels) and the rest, "non-matrix" time:
element-wise work, dtype copies, norms, the optimizer. `--accumulation N` profiles the recipe's
shape: N micro batches of `--micro-batch` per optimizer step.

`--code DIR` profiles another checkout of bert_ds (a `git worktree` of an older commit) with this
script; checkouts from before the package's restructuring (commit 754544b and earlier) are read
through their old module paths. `--code A B --rounds N` compares checkouts in one sitting: N
rounds, each profiling every checkout in a fresh process in turn, and a table of the medians
(a single profile of a step moves by 10-30% from run to run on a shared 2-core machine).

Usage: python benchmarks/step_profile.py [--preset base] [--precision bf16] [--seq-length 128]
       [--micro-batch 8] [--accumulation 1] [--warmup 2] [--steps 3] [--top 25] [--threads N]
       [--code DIR [DIR ...]] [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(Path(__file__).resolve().parent))  # op_profile, beside this file

from op_profile import op_table  # noqa: E402


def build(args):
    """The engine, its layout, a list of batches for `args`' shape and the step function."""
    micro, global_batch = args.micro_batch, args.micro_batch * args.accumulation
    argv = ["--preset", args.preset, "--seq-length", str(args.seq_length), "--global-batch-size", str(global_batch),
            "--micro-batch-size", str(micro), "--lr", "1e-4", "--precision", args.precision]
    try:
        from bert_ds.training.config.args import parse_args
    except ImportError:
        return _build_before_restructure(args, argv)
    from bert_ds.training import job
    from bert_ds.training.loop.steps import plain_step
    from bert_ds.training.plan.resolve import run_model_config
    from bert_ds.training.plan.tokenizer import resolve_tokenizer
    from benchmarks.train_throughput import fixed_batches

    run = parse_args(argv)
    model_config = run_model_config(run, 30522)
    layout = job.setup_parallel(run, model_config)
    engine, _, setup = job.setup_engine(run, model_config, layout)
    batches, _ = fixed_batches(resolve_tokenizer(parse_args([])), args.seq_length, micro, args.accumulation * 2)
    return engine, layout, batches, setup, plain_step


def _build_before_restructure(args, argv):
    """The same for a checkout from before the restructuring (its modules had other paths)."""
    from types import SimpleNamespace

    from bert_ds.training import job
    from bert_ds.training.args import parse_args
    from bert_ds.training.steps import plain_step
    from bert_ds.training.tokenizer_setup import resolve_tokenizer
    from tests.bench.train_throughput import fixed_batches

    run = parse_args(argv)
    model_config, layout = job.setup_parallel(run, SimpleNamespace(vocab_size=30522))
    engine, _, setup = job.setup_engine(run, model_config, layout)
    batches, _ = fixed_batches(resolve_tokenizer(parse_args([])), args.seq_length, args.micro_batch, args.accumulation * 2)
    return engine, layout, batches, setup, plain_step


def profile(args) -> dict:
    engine, layout, batches, setup, plain_step = build(args)

    def step(i: int) -> None:
        chosen = batches[(i % 2) * args.accumulation:(i % 2 + 1) * args.accumulation]
        plain_step(engine, iter(chosen), args.accumulation, layout)

    for i in range(args.warmup):
        step(i)
    return dict(code=_commit(args.code), preset=args.preset, precision=args.precision, zero_stage=setup.zero_stage,
                shape=f"{args.seq_length} x {args.micro_batch} x {args.accumulation}", threads=torch.get_num_threads(),
                **op_table(step, args.steps))


def _commit(code: Path) -> str:
    import subprocess

    found = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or str(code)


def compare(args, argv: list[str]) -> dict:
    """Profile each checkout `args.rounds` times, alternating (so each sees the machine as the
    others did), each in its own process; print and return the median op times per checkout."""
    import statistics
    import subprocess
    import tempfile

    passed = _without_compare_options(argv)
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for code in args.code:
                out = Path(scratch) / f"{round_}-{len(runs.get(str(code), []))}-{code.name}.json"
                subprocess.run([sys.executable, __file__, *passed, "--code", str(code), "--json", str(out), "--top", "0"],
                               check=True, stdout=subprocess.DEVNULL)
                runs.setdefault(str(code), []).append(json.loads(out.read_text()))
    summary = {}
    print(f"medians of {args.rounds} round(s), {args.preset} {args.precision} {args.seq_length} x {args.micro_batch} x "
          f"{args.accumulation}, {args.steps} profiled steps each:")
    print("| checkout | op self time per step (s) | matrix (s) | non-matrix (s) | non-matrix share | copy_ (s) |")
    print("|---|---|---|---|---|---|")
    for code, results in runs.items():
        copies = [sum(o["seconds"] for o in r["ops"] if o["op"] == "aten::copy_") for r in results]
        row = {key: statistics.median(r[key] for r in results)
               for key in ("seconds_per_step", "matrix_seconds", "non_matrix_seconds")}
        row.update(code=results[0]["code"], copy_seconds=statistics.median(copies), rounds=results)
        summary[code] = row
        print(f"| {row['code']} | {row['seconds_per_step']:.3f} | {row['matrix_seconds']:.3f} | {row['non_matrix_seconds']:.3f} | "
              f"{row['non_matrix_seconds'] / row['seconds_per_step']:.1%} | {row['copy_seconds']:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _without_compare_options(argv: list[str]) -> list[str]:
    """argv less --code, --rounds and --json (the comparison's own options) and their values."""
    kept, skipping = [], False
    for arg in argv:
        if arg.startswith("--"):
            skipping = arg.split("=")[0] in ("--code", "--rounds", "--json") and "=" not in arg
            if arg.split("=")[0] in ("--code", "--rounds", "--json"):
                continue
        if not skipping:
            kept.append(arg)
    return kept


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
    parser.add_argument("--code", type=Path, nargs="+", default=[HERE],
                        help="the bert_ds checkout(s) to profile (default: this one); with several, or with --rounds, "
                             "each round profiles each in a fresh process, in turn, and medians are compared")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", help="write the profile to this file")
    args = parser.parse_args(argv)
    if len(args.code) > 1 or args.rounds > 1:
        return compare(args, argv if argv is not None else sys.argv[1:])
    args.code = args.code[0]
    sys.path.insert(0, str(args.code.resolve()))
    if args.threads:
        torch.set_num_threads(args.threads)
    result = profile(args)
    print(f"{result['code']}: {result['preset']} {result['precision']} (ZeRO-{result['zero_stage']}), {result['shape']}, "
          f"{result['threads']} threads: {result['seconds_per_step']:.3f} s of op self time per step; matrix "
          f"{result['matrix_seconds']:.3f} s ({100 * result['matrix_share']:.1f}%), non-matrix "
          f"{result['non_matrix_seconds']:.3f} s")
    print("| op | s per step | share | calls per step |\n|---|---|---|---|")
    for row in result["ops"][:args.top]:
        print(f"| `{row['op']}` | {row['seconds']:.4f} | {100 * row['seconds'] / result['seconds_per_step']:.1f}% | {row['calls']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
