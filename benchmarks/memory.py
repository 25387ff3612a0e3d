"""Peak memory per rank of the base model under ZeRO 0/1/2/3 at DP=1 and DP=2, in fp32 and bf16 (CPU or GPU).

Each configuration is a real job (torch.distributed.run, one process per rank) that builds the
DeepSpeed engine and takes two optimizer steps on a tiny batch (1 x 16 tokens, so activations
are negligible and what is measured is the model states), once per `--precisions` entry (default
fp32 bf16; each job gets `--precision` explicitly, since `auto` on a CPU depends on its instruction
set). Per rank it reports the memory growth from just before the model is built to the peak (CPU:
peak RSS; GPU: max allocated), in bytes per parameter, next to the ZeRO paper's model-state formula
for that precision and to the launch plan's whole estimate for it (bert_ds/training/plan/footprint.py:
model states, DeepSpeed's reduce bucket, activations), so the README can say how close
`--dry-run`'s memory line is. The table has one row per (ZeRO, DP), the precisions side by side;
the JSON is a list of rows, the fp32 ones first with the keys they always had, every row with a
`precision` field.

    fp32 here: parameters 4, gradients 4, optimizer K bytes per parameter, where K = 8 (Adam's two
    moments) plus 4 for the fp32 master copy DeepSpeed keeps with ZeRO >= 1:
      ZeRO-0: 4 + 4 + 8            ZeRO-1: 4 + 4 + 12 / DP
      ZeRO-2: 4 + (4 + 12) / DP    ZeRO-3: (4 + 4 + 12) / DP
    bf16 (DeepSpeed's bf16 mode): parameters 2, gradients 2, K = 12 (fp32 master, Adam m and v):
      ZeRO-0: 2 + 2 + 12           ZeRO-1: 2 + 2 + 12 / DP
      ZeRO-2: 2 + (2 + 12) / DP    ZeRO-3: (2 + 2 + 12) / DP

Where bf16 measures above its formula (base on the 2-core CPU dev machine, 2026-12-01; a trace of
RSS per phase of the DP=1 jobs backs the split):
- ZeRO-0: 20.6 bytes/parameter, not 16, and more than fp32's 17. Without ZeRO DeepSpeed wraps the
  optimizer in FP16_UnfusedOptimizer (runtime/fp16/unfused_optimizer.py): it keeps an fp32 copy of
  every parameter (4) that torch's AdamW steps (m, v: 8), and before each step (and once in its
  constructor, to create the Adam states) converts every bf16 gradient into an fp32 one at once
  (`fp32_param.grad = fp16_param.grad.to(fp32)`): 2 + 2 + 4 + 4 + 8 = 20, reached already in
  deepspeed.initialize. The formula, and so the plan estimate, leave out those 4 bytes of fp32
  gradients.
- ZeRO-1/2: at the step stage_1_and_2.py flattens this rank's bf16 gradient partition into one
  buffer (2/DP) and converts it to fp32 (`flat_grad_partition.to(fp32)`, 4/DP) while the
  parameters' bf16 gradients still exist; in fp32 that `.to` is no copy. Add the reduce bucket
  (5e7 bf16 elements, 1.1 bytes/parameter at base) and what the model's fp32 build, its cast to
  bf16 and the flattening of the weights into one buffer leave freed but resident (RSS after
  deepspeed.initialize stays about 4 bytes/parameter above the live bf16 weights and fp32
  masters): 29 at DP=1 (fp32: 30.5), 17-18 at DP=2 (fp32: 20-22). The plan counts the fp32
  partition and the bucket, not the flat bf16 copy or the resident leftovers.
- ZeRO-3 (built partitioned under deepspeed.zero.Init, ds_configs/zero3.json): at DP=2 the
  model states are the formula's, and the rest is the 1e7-element reduce bucket, the weights
  gathered for the layers being computed (stage3_max_live_parameters, 3e7) and the step's gradient
  copy: 13.9 bytes/parameter in fp32 (formula 10, plan estimate 1% below), 12.1 in bf16
  (formula 8), 2026-12-03. With DeepSpeed's defaults (5e7 bucket, 1e9 live parameters: nothing is
  released between forward and backward) and malloc's own behaviour it peaked at 2.15 GiB fp32
  against 1.20 (host_memory.tune_malloc_for_partitioning).

Each stage runs with the config a user picks for it (CONFIG_OF_STAGE: zero1 for stages 0 and 1).

Usage: python benchmarks/memory.py [--preset base] [--precisions fp32 bf16] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


PRECISIONS = ("fp32", "bf16", "fp16")
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def formula_bytes_per_param(stage: int, dp: int, precision: str = "fp32") -> float:
    sys.path.insert(0, str(REPO))
    from bert_ds.training.plan.footprint import model_state_bytes

    return sum(model_state_bytes(10**6, precision, stage, dp, offload=False)) / 10**6


# The shipped config each stage runs with (what a user picks by name); --zero-stage sets 0 and 1.
CONFIG_OF_STAGE = {0: "zero1", 1: "zero1", 2: "zero2", 3: "zero3"}


def zero_section(stage: int) -> dict:
    return json.loads((REPO / "ds_configs" / f"{CONFIG_OF_STAGE[stage]}.json").read_text())["zero_optimization"]


def plan_estimate_bytes(model_config: dict, stage: int, dp: int, gpu: bool, precision: str = "fp32") -> int:
    """What `--dry-run` would print as memory per device for this job (with its config's buckets)."""
    sys.path.insert(0, str(REPO))
    from bert_ds.config import ModelConfig
    from bert_ds.training.plan.footprint import memory_per_device

    return memory_per_device(ModelConfig(**model_config), seq=16, micro=1, accumulation=1, tp=1, pp=1, dp=dp,
                             zero_stage=stage, precision=precision, gpu=gpu, zero_config=zero_section(stage)).total


def _current_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(preset: str, stage: int, out: str, precision: str) -> None:
    """One rank: build the engine, two steps, report memory growth."""
    import torch

    sys.path.insert(0, str(REPO))
    from bert_ds.training import job
    from bert_ds.training.plan.resolve import run_model_config
    from bert_ds.runtime.device import device
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.loop.steps import plain_step
    from bert_ds.training.plan.tokenizer import resolve_tokenizer

    run = parse_args(["--preset", preset, "--seq-length", "16", "--micro-batch-size", "1", "--global-batch-size",
                      str(int(os.environ.get("WORLD_SIZE", "1"))), "--deepspeed-config", CONFIG_OF_STAGE[stage], "--zero-stage", str(stage),
                      "--precision", precision])
    tokenizer = resolve_tokenizer(run)
    model_config = run_model_config(run, tokenizer.vocab_size)
    layout = job.setup_parallel(run, model_config)
    loader = iter(job.setup_data(run, tokenizer, layout))
    batches = [next(loader) for _ in range(2)]
    gpu = device().type != "cpu"
    before = torch.cuda.memory_allocated() if gpu else _current_rss()
    engine, model, _ = job.setup_engine(run, model_config, layout)
    for batch in batches:
        plain_step(engine, iter([batch]), 1, layout)
    peak = torch.cuda.max_memory_allocated() if gpu else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    import dataclasses

    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    record = dict(rank=layout.rank, growth_bytes=peak - before, params=params, gpu=gpu, param_dtype=dtype,
                  model_config=dataclasses.asdict(model_config))
    with open(f"{out}.{layout.rank}", "w") as handle:
        json.dump(record, handle)


def measure(preset: str, stage: int, dp: int, scratch: Path, precision: str = "fp32") -> dict:
    out = scratch / f"{precision}-z{stage}-dp{dp}"
    port = 29700 + 100 * PRECISIONS.index(precision) + 10 * stage + dp
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={dp}", f"--master_port={port}",
               __file__, "--worker", preset, str(stage), str(out), precision]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    if result.returncode != 0:
        raise RuntimeError(f"{precision} ZeRO-{stage} DP={dp} exited with {result.returncode}:\n{result.stderr[-3000:]}")
    ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(dp)]
    if ranks[0]["param_dtype"] != TORCH_DTYPES[precision]:
        raise RuntimeError(f"asked for {precision}, the model trained with {ranks[0]['param_dtype']} parameters")
    growth = max(r["growth_bytes"] for r in ranks)
    params = ranks[0]["params"]
    estimate = plan_estimate_bytes(ranks[0]["model_config"], stage, dp, ranks[0]["gpu"], precision)
    return dict(preset=preset, zero_stage=stage, dp=dp, peak_growth_gib=growth / 2**30, params=params,
                bytes_per_param=growth / params, formula_bytes_per_param=formula_bytes_per_param(stage, dp, precision),
                plan_estimate_gib=estimate / 2**30, measured_over_estimate=growth / estimate, precision=precision)


def table(results: list[dict], precisions: list[str]) -> list[str]:
    """One row per (ZeRO, DP); per precision: peak, bytes/parameter, that precision's formula and
    plan estimate, and measured / estimate."""
    header = ["ZeRO", "DP"]
    for p in precisions:
        header += [f"{p} peak per rank (GiB)", f"{p} bytes / parameter", f"{p} ZeRO formula",
                   f"{p} plan estimate (GiB)", f"{p} measured / estimate"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    by_key = {(r["precision"], r["zero_stage"], r["dp"]): r for r in results}
    configs = list(dict.fromkeys((r["zero_stage"], r["dp"]) for r in results))
    for stage, dp in configs:
        cells = [str(stage), str(dp)]
        for p in precisions:
            r = by_key.get((p, stage, dp))
            if r is None:
                cells += ["-"] * 5
            elif "error" in r:
                cells += ["failed", "-", f"{r['formula_bytes_per_param']:.1f}", "-", "-"]
            else:
                cells += [f"{r['peak_growth_gib']:.2f}", f"{r['bytes_per_param']:.1f}", f"{r['formula_bytes_per_param']:.1f}",
                          f"{r['plan_estimate_gib']:.2f}", f"{r['measured_over_estimate']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def failed_row(preset: str, stage: int, dp: int, precision: str, error: str) -> dict:
    """A configuration whose job failed (e.g. killed for memory): its formula, no measurement."""
    return {"preset": preset, "zero_stage": stage, "dp": dp,
            "formula_bytes_per_param": formula_bytes_per_param(stage, dp, precision),
            "precision": precision, "error": error[-2000:]}


def main(argv=None) -> list[dict]:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--dp", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=["fp32", "bf16"],
                        help="--precision of each run (fp16 needs a GPU); every (ZeRO, DP) runs in each")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    import tempfile

    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for precision in args.precisions:
            for dp in args.dp:
                for stage in args.stages:
                    try:
                        results.append(measure(args.preset, stage, dp, Path(scratch), precision))
                    except RuntimeError as error:
                        print(error, file=sys.stderr)
                        results.append(failed_row(args.preset, stage, dp, precision, str(error)))
    print("\n".join(table(results, args.precisions)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
