"""How fast `python -m bert_ds.data.prepare` turns a corpus into prepared shards, on one core,
against `datasets`' own conversion of the same file in the same run; and what one loader shard
decodes of the prepared folder at K shards, against a stream that every shard reads whole.

The corpus is Wikipedia-like: the built-in sample's training articles cut into records of 3,000
characters (English Wikipedia's mean article length) and repeated, each with its index in front
so no two are equal, to `--size` of JSON Lines; and the same records as one Parquet file of
1,000-row row groups. Each input is prepared into a fresh folder in a
subprocess pinned to one core (OMP_NUM_THREADS=1, taskset); the JSON Lines figure includes the
check of every record, which the prepare makes as pyarrow parses it (data/prepare/tables.py). The baseline is
`datasets.load_dataset(FORMAT, data_files=FILE, split="train").to_parquet(OUT)` in the same kind
of subprocess: what a user would otherwise run, without checks, resume or a manifest.

Each pair is timed `--repeats` times, alternating the two, and the median reported (with the
range), as one run on a shared machine varies by a few percent.

Usage: python benchmarks/prepare.py [--size 1GiB] [--repeats 3] [--shards 8 64] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ARTICLE_CHARACTERS = 3000


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def write_corpus(folder: Path, size: int) -> tuple[Path, Path, int]:
    """JSON Lines of about `size` bytes and the same records as Parquet; returns both and the count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    whole = [json.loads(line)["text"] for line in
             (REPO / "bert_ds" / "data" / "sample" / "wiki" / "enwiki-train.jsonl").read_text().splitlines()]
    # Records of ~3 KB, English Wikipedia's mean (about 20 GB of text in 6.4 M articles).
    articles = [text[k:k + ARTICLE_CHARACTERS] for text in whole for k in range(0, len(text), ARTICLE_CHARACTERS)]
    jsonl, parquet = folder / "corpus.jsonl", folder / "corpus.parquet"
    texts, written = [], 0
    with open(jsonl, "w") as handle:
        while written < size:
            text = f"{len(texts)} {articles[len(texts) % len(articles)]}"
            line = json.dumps(dict(id=str(len(texts)), title=f"Article {len(texts)}", text=text)) + "\n"
            handle.write(line)
            written += len(line)
            texts.append(text)
    pq.write_table(pa.table(dict(id=[str(i) for i in range(len(texts))], title=[f"Article {i}" for i in range(len(texts))],
                                 text=texts)), parquet, row_group_size=1000)
    return jsonl, parquet, len(texts)


def one_core(command: list[str], env: dict) -> float:
    """Seconds `command` takes on one core (taskset where there is one)."""
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    start = time.perf_counter()
    subprocess.run(pin + command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def baseline_command(kind: str, path: Path, out: Path) -> list[str]:
    code = (f"from datasets import load_dataset; load_dataset({kind!r}, data_files={str(path)!r}, split='train', "
            f"cache_dir={str(out.parent / 'hf-cache')!r}).to_parquet({str(out)!r})")
    return [sys.executable, "-c", code]


def shard_decodes(folder: Path, shards: int) -> dict:
    """Records decoded by each of `shards` loader shards over one epoch of the prepared folder."""
    from bert_ds.config import DataConfig
    from bert_ds.data.sources import parse_sources
    from bert_ds.data.stream import SourceReader
    from bert_ds.data.text.cleaning import TextStats

    class Words:
        unk_id = 0

        def encode_batch(self, sentences):
            return [[1] * len(s.split()) for s in sentences]

    [source] = parse_sources([f"w={folder}"])
    decoded = []
    for shard in range(shards):
        reader = SourceReader(source, Words(), DataConfig(), shard, shards, TextStats())
        while reader._next_local_unit() is not None:
            pass
        decoded.append(sum(f.records_read for f in reader._opened.values()))
        for f in reader._opened.values():
            f.close()
    return dict(shards=shards, min=min(decoded), max=max(decoded), total=sum(decoded))


def main(argv=None) -> dict:
    from bert_ds.data.prepare.command import parse_size

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1GiB"))
    parser.add_argument("--shards", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--repeats", type=int, default=3, help="timings per tool and input; the median is reported")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="prepare-bench-"))
    env = dict(os.environ, OMP_NUM_THREADS="1", BERT_DS_CACHE=str(scratch / "cache"), PYTHONPATH=str(REPO),
               HF_DATASETS_CACHE=str(scratch / "hf-cache"))
    try:
        jsonl, parquet, records = write_corpus(scratch, args.size)
        rows = []
        for kind, path in (("json", jsonl), ("parquet", parquet)):
            size = path.stat().st_size
            out = scratch / f"prepared-{kind}"
            ours_runs, theirs_runs = [], []
            for repeat in range(args.repeats):
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(scratch / "hf-cache", ignore_errors=True)  # datasets would reuse its Arrow cache
                ours_runs.append(one_core([sys.executable, "-m", "bert_ds.data.prepare", str(path), "--output", str(out)], env))
                theirs_runs.append(one_core(baseline_command(kind, path, scratch / f"datasets-{kind}.parquet"), env))
            ours, theirs = statistics.median(ours_runs), statistics.median(theirs_runs)
            manifest = json.loads((out / "manifest.json").read_text())
            assert manifest["records"] == records
            rows.append(dict(input=kind, input_bytes=size, records=records, shards=len(manifest["shards"]),
                             seconds=ours, mb_per_s=size / ours / 1e6, datasets_seconds=theirs,
                             datasets_mb_per_s=size / theirs / 1e6, ratio=theirs / ours,
                             seconds_runs=ours_runs, datasets_seconds_runs=theirs_runs))
        decodes = [dict(shard_decodes(scratch / "prepared-parquet", k), records=records) for k in args.shards]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = dict(cpu=cpu_name(), date=time.strftime("%Y-%m-%d"), prepare=rows, decodes=decodes)
    print(f"CPU: {result['cpu']}, one core; {records:,} records; medians of {args.repeats} runs (range)")
    print("| input | size | bert_ds prepare | MB/s | datasets load_dataset().to_parquet() | MB/s | bert_ds / datasets speed |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        spread = lambda runs: f"{min(runs):.1f}-{max(runs):.1f}"  # noqa: E731
        print(f"| {r['input']} | {r['input_bytes'] / 2**30:.2f} GiB | {r['seconds']:.1f} s ({spread(r['seconds_runs'])}) | "
              f"{r['mb_per_s']:.1f} | {r['datasets_seconds']:.1f} s ({spread(r['datasets_seconds_runs'])}) | "
              f"{r['datasets_mb_per_s']:.1f} | {r['ratio']:.2f}x |")
    print("| K shards | records decoded per shard (min-max) | of the corpus | 1/K | a whole stream per shard |")
    print("|---|---|---|---|---|")
    for d in decodes:
        print(f"| {d['shards']} | {d['min']:,}-{d['max']:,} | {d['max'] / records:.4f} | {1 / d['shards']:.4f} | "
              f"{records:,} (1.0000) |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
