"""Bytes each rank sends per step in a real 4-rank CPU job, by parallelism, next to the launch
plan's scaling estimate for the same layout (bert_ds/training/plan/scaling.py), and the estimate's
table for BERT-LARGE at 64 and 256 GPUs.

    python benchmarks/comm_volume.py [--layouts tp2pp2 tp2dp2 pp2dp2 dp4zero2] [--skip-measure]

Each layout is a real job (torchrun, 4 ranks, the `mini` preset, fp32, 2 and 4 steps) whose ranks
wrap torch.distributed's collectives and point-to-point calls (this file is the worker too) and
add up, per process group, what each call sends from this rank: a ring all-reduce 2(n-1)/n of its
tensor, a reduce-scatter or all-gather (n-1)/n of the whole, a send its tensor, a broadcast its
tensor on the source. A group is TP, DP or PP by its ranks (DeepSpeed's order: TP innermost, then
DP, then PP; the world group is DP when there is no TP or PP); DeepSpeed's pipeline sends on the
world group, so sends count as PP; other world-group calls (loss averages) are "other". The
per-step figure is the 4-step job's total minus the 2-step job's over 2, so start-up (weight
broadcasts, checks) cancels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = {"tp2pp2": (2, 2, 1), "tp2dp2": (2, 1, 1), "pp2dp2": (1, 2, 1), "dp4zero2": (1, 1, 2)}
COMMON = ["--preset", "mini", "--precision", "fp32", "--dropout", "0", "--global-batch-size", "16",
          "--micro-batch-size", "4", "--seq-length", "128", "--log-interval", "1", "--data", "sample"]


# --- worker: one rank, counting -----------------------------------------------------------------

def _worker(out: str, tp: int, pp: int, argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    sent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)

    def kind(group) -> str:
        ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
        world = dist.get_world_size()
        if len(ranks) == world and tp == pp == 1:
            return "DP"  # plain data parallelism: the world is the DP group
        if len(ranks) == world or len(ranks) < 2:
            return "other"
        stride = ranks[1] - ranks[0]
        dp = world // (tp * pp)
        return {1: "TP" if tp > 1 else "DP", tp: "DP" if dp > 1 else "PP", tp * dp: "PP"}.get(stride, "other")

    def size(tensor) -> int:
        return tensor.numel() * tensor.element_size()

    def wrap(name, share):
        original = getattr(dist, name)

        def counted(*args, **kwargs):
            group = kwargs.get("group")
            if group is None:
                group = next((a for a in args[1:] if isinstance(a, dist.ProcessGroup)), None)
            n = len(dist.get_process_group_ranks(group)) if group is not None else dist.get_world_size()
            tensor = kwargs.get("tensor", args[0] if args else None)
            if name == "all_gather_into_tensor":  # (output_tensor, input_tensor, ...): the output is the whole
                tensor_bytes = size(kwargs.get("output_tensor", args[0] if args else None))
            elif name == "reduce_scatter_tensor":  # (output, input, ...): the input is the whole
                tensor_bytes = size(kwargs.get("input", kwargs.get("input_tensor", args[1] if len(args) > 1 else None)))
            elif isinstance(tensor, (list, tuple)):
                tensor_bytes = sum(size(t) for t in tensor)
            else:
                tensor_bytes = size(tensor) if isinstance(tensor, torch.Tensor) else 0
            if name == "broadcast":
                src = kwargs.get("src", args[1] if len(args) > 1 else 0)
                share_now = 1.0 if src == dist.get_rank() else 0.0
            else:
                share_now = share(n)
            key = "PP" if name in ("send", "isend") else kind(group)  # DeepSpeed's pipeline sends on the world group
            sent[key] += tensor_bytes * share_now
            calls[f"{key} {name} {tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else ''}"] += 1
            return original(*args, **kwargs)

        setattr(dist, name, counted)

    wrap("all_reduce", lambda n: 2 * (n - 1) / n)
    wrap("reduce_scatter_tensor", lambda n: (n - 1) / n)  # its input is the whole
    wrap("all_gather_into_tensor", lambda n: (n - 1) / n)  # its output is the whole
    for name in ("send", "isend"):
        wrap(name, lambda n: 1.0)
    wrap("broadcast", lambda n: 1.0)

    sys.argv = ["pretrain.py", *argv]
    from bert_ds.pretrain import main

    code = main(argv)
    with open(f"{out}.{os.environ['RANK']}.json", "w") as file:
        json.dump(dict(sent=sent, calls=calls), file)
    return code


# --- driver -------------------------------------------------------------------------------------

def _job(tp: int, pp: int, zero: int, steps: int, folder: Path) -> list[dict]:
    out = folder / f"tp{tp}pp{pp}z{zero}-{steps}"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4", "--master_port=29671", __file__,
               "--worker", str(out), str(tp), str(pp), *COMMON, "--tensor-parallel", str(tp), "--pipeline-parallel",
               str(pp), "--zero-stage", str(zero), "--train-steps", str(steps)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), BERT_DS_CPU_BF16="0")
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    if result.returncode != 0:
        raise SystemExit(f"job tp{tp} pp{pp} failed:\n{result.stderr[-3000:]}")
    return [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(4)]


def _estimate(tp: int, pp: int, zero: int):
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.resolve import resolve_plan
    from bert_ds.training.plan.report import scaling_estimate

    run = parse_args([*COMMON, "--tensor-parallel", str(tp), "--pipeline-parallel", str(pp), "--zero-stage", str(zero),
                      "--world-size", "4", "--node-gpus", "4"])
    plan = resolve_plan(run, target="cpu", sample_data=False)
    return scaling_estimate(plan)[0].volume, plan


def measured_vs_estimate(names: list[str]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            tp, pp, zero = LAYOUTS[name]
            short, long = _job(tp, pp, zero, 2, Path(folder)), _job(tp, pp, zero, 4, Path(folder))
            volume, plan = _estimate(tp, pp, zero)
            name = f"TP {tp} x PP {pp} x DP {plan.data_parallel}, ZeRO-{plan.zero_stage}"
            for kind, estimated in (("TP", volume.tp), ("PP", volume.pp), ("DP", volume.dp)):
                per_rank = [(b["sent"].get(kind, 0) - a["sent"].get(kind, 0)) / 2 for a, b in zip(short, long)]
                if estimated or any(per_rank):
                    rows.append(dict(layout=name, kind=kind, estimate=estimated,
                                     measured_max=max(per_rank), measured_min=min(per_rank)))
            other = [(b["sent"].get("other", 0) - a["sent"].get("other", 0)) / 2 for a, b in zip(short, long)]
            rows.append(dict(layout=name, kind="other (world group)", estimate=0.0,
                             measured_max=max(other), measured_min=min(other)))
    return rows


def large_table(worlds=(64, 256), layouts=((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2), (4, 2))) -> list[dict]:
    """The GPU plan's estimate for BERT-LARGE (phase 1: 256 x 128 tokens, bf16, ZeRO-1), default interconnect."""
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.resolve import resolve_plan
    from bert_ds.training.plan.report import scaling_estimate

    rows = []
    for world in worlds:
        for tp, pp in layouts:
            run = parse_args(["--preset", "large", "--data", "sample", "--tokenizer", "bert-base-uncased", "--world-size",
                              str(world), "--tensor-parallel", str(tp), "--pipeline-parallel", str(pp)])
            plan = resolve_plan(run, target="gpu", sample_data=False)
            est, _ = scaling_estimate(plan)
            rows.append(dict(gpus=world, layout=f"TP {tp} x PP {pp} x DP {plan.data_parallel}",
                             micro=plan.batch.micro_batch_size, accumulation=plan.batch.accumulation,
                             tp_gb=est.volume.tp / 1e9, pp_gb=est.volume.pp / 1e9, dp_gb=est.volume.dp / 1e9,
                             crosses=",".join(k for k, v in est.crosses_nodes.items() if v) or "-",
                             compute_ms=est.compute_s * 1e3, step_ms=est.step_s * 1e3, tokens_per_s=est.tokens_per_s))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--skip-measure", action="store_true", help="only the BERT-LARGE estimate table")
    args = parser.parse_args()
    print("| GPUs | layout | micro x acc. | TP GB | PP GB | DP GB | across nodes | compute ms | step ms (upper bound) | tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in large_table():
        print(f"| {r['gpus']} | {r['layout']} | {r['micro']} x {r['accumulation']} | {r['tp_gb']:.3f} | {r['pp_gb']:.4f} | "
              f"{r['dp_gb']:.3f} | {r['crosses']} | {r['compute_ms']:.1f} | {r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} |")
    if args.skip_measure:
        return 0
    print("\n| layout (4 CPU ranks, mini, fp32) | group | estimate MB/step | measured MB/step (max rank) | min rank | measured / estimate |")
    print("|---|---|---|---|---|---|")
    for r in measured_vs_estimate(args.layouts):
        ratio = f"{r['measured_max'] / r['estimate']:.3f}" if r["estimate"] else "-"
        print(f"| {r['layout']} | {r['kind']} | {r['estimate'] / 1e6:.3f} | {r['measured_max'] / 1e6:.3f} | "
              f"{r['measured_min'] / 1e6:.3f} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]))
    sys.exit(main())
