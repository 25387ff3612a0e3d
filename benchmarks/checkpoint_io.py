"""Checkpoint save and load time of the base model against plain file I/O of the same bytes.

In one process (DP=1, ZeRO-1, fp32): the engine takes one step, then bert_ds saves a complete
checkpoint (DeepSpeed's files, the rank file, the completion marker) and loads it back, several
times; the baseline writes (and reads back) the same number of bytes as plain 64 MiB chunks into
the same folder. Reported: seconds and GB/s of each, and the ratios (1.0 = as fast as raw I/O).

Usage: python benchmarks/checkpoint_io.py [--preset base] [--repeats 3] [--dir PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHUNK = 64 * 2**20


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def plain_write_and_read(folder: Path, total: int) -> tuple[float, float]:
    chunk = os.urandom(CHUNK)
    path = folder / "plain.bin"
    began = time.perf_counter()
    with open(path, "wb") as out:
        for _ in range(total // CHUNK):
            out.write(chunk)
        out.write(chunk[: total % CHUNK])
    written = time.perf_counter() - began
    began = time.perf_counter()
    with open(path, "rb") as source:
        while source.read(CHUNK):
            pass
    read = time.perf_counter() - began
    path.unlink()
    return written, read


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    from bert_ds.training import job

    from bert_ds.training.plan.resolve import run_model_config
    from bert_ds.checkpoint import pretraining as checkpointing
    from bert_ds.checkpoint import zero as checkpoints
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.loop.trainer import Trainer, TrainState
    from bert_ds.training.loop.steps import plain_step
    from bert_ds.training.plan.tokenizer import resolve_tokenizer

    scratch = Path(tempfile.mkdtemp(dir=args.dir))
    run = parse_args(["--preset", args.preset, "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "2",
                      "--save", str(scratch / "ckpt")])
    tokenizer = resolve_tokenizer(run)
    model_config = run_model_config(run, tokenizer.vocab_size)
    layout = job.setup_parallel(run, model_config)
    engine, model, deepspeed_setup = job.setup_engine(run, model_config, layout)
    loader = job.setup_data(run, tokenizer, layout)
    plain_step(engine, iter(loader), 1, layout)
    progress = TrainState(step=1, consumed_samples=2, consumed_tokens=64)
    saves, loads, plain_writes, plain_reads = [], [], [], []
    for _ in range(args.repeats):
        began = time.perf_counter()
        tag_dir = checkpointing.save(Trainer(run, engine, model, loader, layout, model_config, deepspeed_setup.precision, progress))
        saves.append(time.perf_counter() - began)
        began = time.perf_counter()
        checkpoints.load(engine, run.checkpoint.save, tag_dir.name, layout.world_size)
        loads.append(time.perf_counter() - began)
        size = folder_bytes(tag_dir)
        written, read = plain_write_and_read(scratch, size)
        plain_writes.append(written)
        plain_reads.append(read)
    figures = dict(
        preset=args.preset, checkpoint_bytes=size,
        save_s=statistics.median(saves), load_s=statistics.median(loads),
        plain_write_s=statistics.median(plain_writes), plain_read_s=statistics.median(plain_reads),
    )
    figures["save_vs_plain"] = figures["save_s"] / figures["plain_write_s"]
    figures["load_vs_plain"] = figures["load_s"] / figures["plain_read_s"]
    gb = size / 1e9
    print(f"checkpoint of {args.preset}: {gb:.2f} GB in {scratch}")
    print("| operation | bert_ds | plain file I/O, same bytes | bert_ds / plain |")
    print("|---|---|---|---|")
    print(f"| save | {figures['save_s']:.2f} s ({gb / figures['save_s']:.2f} GB/s) | {figures['plain_write_s']:.2f} s | {figures['save_vs_plain']:.2f} |")
    print(f"| load | {figures['load_s']:.2f} s ({gb / figures['load_s']:.2f} GB/s) | {figures['plain_read_s']:.2f} s | {figures['load_vs_plain']:.2f} |")
    shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()
