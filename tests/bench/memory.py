"""Peak memory per rank of the base model under ZeRO 0/1/2/3 at DP=1 and DP=2 (fp32, CPU or GPU).

Each configuration is a real job (torch.distributed.run, one process per rank) that builds the
DeepSpeed engine and takes two optimizer steps on a tiny batch (1 x 16 tokens, so activations
are negligible and what is measured is the model states). Per rank it reports the memory growth
from just before the model is built to the peak (CPU: peak RSS; GPU: max allocated), in bytes per
parameter, next to the ZeRO paper's model-state formula for this precision and to the launch
plan's whole estimate (bert_ds/training/footprint.py: model states, DeepSpeed's reduce bucket,
activations), so the README can say how close `--dry-run`'s memory line is:

    fp32 here: parameters 4, gradients 4, optimizer K bytes per parameter, where K = 8 (Adam's two
    moments) plus 4 for the fp32 master copy DeepSpeed keeps with ZeRO >= 1:
      ZeRO-0: 4 + 4 + 8            ZeRO-1: 4 + 4 + 12 / DP
      ZeRO-2: 4 + (4 + 12) / DP    ZeRO-3: (4 + 4 + 12) / DP

Usage: python tests/bench/memory.py [--preset base] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def formula_bytes_per_param(stage: int, dp: int) -> float:
    sys.path.insert(0, str(REPO))
    from bert_ds.training.footprint import model_state_bytes

    return sum(model_state_bytes(10**6, "fp32", stage, dp, offload=False)) / 10**6


def plan_estimate_bytes(model_config: dict, stage: int, dp: int, gpu: bool) -> int:
    """What `--dry-run` would print as memory per device for this job (zero1.json's 5e7 bucket)."""
    sys.path.insert(0, str(REPO))
    from bert_ds.config import ModelConfig
    from bert_ds.training.footprint import memory_per_device

    return memory_per_device(ModelConfig(**model_config), seq=16, micro=1, accumulation=1, tp=1, pp=1, dp=dp,
                             zero_stage=stage, precision="fp32", gpu=gpu, reduce_bucket=50_000_000).total


def _current_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(preset: str, stage: int, out: str) -> None:
    """One rank: build the engine, two steps, report memory growth."""
    import torch

    sys.path.insert(0, str(REPO))
    from bert_ds import pretrain
    from bert_ds.distributed import device
    from bert_ds.training.args import parse_args
    from bert_ds.training.steps import plain_step
    from bert_ds.training.tokenizer_setup import resolve_tokenizer

    run = parse_args(["--preset", preset, "--seq-length", "16", "--micro-batch-size", "1", "--global-batch-size",
                      str(int(os.environ.get("WORLD_SIZE", "1"))), "--zero-stage", str(stage)])
    tokenizer = resolve_tokenizer(run)
    model_config, layout = pretrain.setup_parallel(run, tokenizer)
    loader = iter(pretrain.setup_data(run, tokenizer, layout))
    batches = [next(loader) for _ in range(2)]
    gpu = device().type != "cpu"
    before = torch.cuda.memory_allocated() if gpu else _current_rss()
    engine, model, _ = pretrain.setup_engine(run, model_config, layout)
    for batch in batches:
        plain_step(engine, iter([batch]), 1, layout.device)
    peak = torch.cuda.max_memory_allocated() if gpu else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    import dataclasses

    record = dict(rank=layout.rank, growth_bytes=peak - before, params=params, gpu=gpu,
                  model_config=dataclasses.asdict(model_config))
    with open(f"{out}.{layout.rank}", "w") as handle:
        json.dump(record, handle)


def measure(preset: str, stage: int, dp: int, scratch: Path) -> dict:
    out = scratch / f"z{stage}-dp{dp}"
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={dp}", f"--master_port={29700 + 10 * stage + dp}",
               __file__, "--worker", preset, str(stage), str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(dp)]
    growth = max(r["growth_bytes"] for r in ranks)
    params = ranks[0]["params"]
    estimate = plan_estimate_bytes(ranks[0]["model_config"], stage, dp, ranks[0]["gpu"])
    return dict(preset=preset, zero_stage=stage, dp=dp, peak_growth_gib=growth / 2**30, params=params,
                bytes_per_param=growth / params, formula_bytes_per_param=formula_bytes_per_param(stage, dp),
                plan_estimate_gib=estimate / 2**30, measured_over_estimate=growth / estimate)


def main(argv=None) -> list[dict]:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--dp", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    import tempfile

    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for dp in args.dp:
            for stage in args.stages:
                results.append(measure(args.preset, stage, dp, Path(scratch)))
    print("| ZeRO | DP | peak growth per rank (GiB) | bytes / parameter | ZeRO formula (fp32) | plan estimate (GiB) | measured / estimate |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['zero_stage']} | {r['dp']} | {r['peak_growth_gib']:.2f} | {r['bytes_per_param']:.1f} | "
              f"{r['formula_bytes_per_param']:.1f} | {r['plan_estimate_gib']:.2f} | {r['measured_over_estimate']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
