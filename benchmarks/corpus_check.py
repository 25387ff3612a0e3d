"""What the start-up check of a local JSON corpus costs (data/sources.py: check_sources), on the
first start (every record parsed, the record index built and cached) and on the next one (the
cached index read), against reading the file's lines once in Python, measured in the same run.

Two synthetic JSON Lines corpora of `--gib` GiB each: the built-in sample's Wikipedia articles
repeated (long records), and one-sentence records (the BookCorpus shape, the costliest per byte).

Usage: python benchmarks/corpus_check.py [--gib 1.0] [--folder /tmp/corpus-check] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_corpora(folder: Path, gib: float) -> dict[str, Path]:
    from bert_ds.data.sources import iter_document_texts, sample_sources

    wiki = [s for s in sample_sources() if s.name == "wiki"][0]
    articles = [json.dumps({"text": text}) + "\n" for text in iter_document_texts([f"wiki={wiki.location}"])]
    sentences = [json.dumps({"text": f"This is sentence {i} of a long book , he said , and went on ."}) + "\n"
                 for i in range(1000)]
    corpora = {}
    for name, lines in (("articles", articles), ("sentences", sentences)):
        path = folder / f"{name}.jsonl"
        written = 0
        with open(path, "w") as out:
            for line in itertools.cycle(lines):
                out.write(line)
                written += len(line)
                if written >= gib * 2**30:
                    break
        corpora[name] = path
    return corpora


def read_lines(path: Path) -> float:
    start = time.perf_counter()
    with open(path, "rb") as handle:
        for _ in handle:
            pass
    return time.perf_counter() - start


def timed_check(path: Path) -> float:
    from bert_ds.data.sources import DataSource, check_sources

    start = time.perf_counter()
    check_sources([DataSource("bench", str(path))])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/corpus-check"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    shutil.rmtree(args.folder, ignore_errors=True)
    args.folder.mkdir(parents=True)
    os.environ["BERT_DS_CACHE"] = str(args.folder / "cache")
    results = {}
    for name, path in write_corpora(args.folder, args.gib).items():
        baseline = read_lines(path)  # also leaves the file in the page cache for the checks
        first, second = timed_check(path), timed_check(path)
        size = path.stat().st_size / 2**30
        results[name] = dict(gib=size, read_lines_s=baseline, first_start_s=first, next_start_s=second)
        print(f"{name:9} {size:.2f} GiB: read lines {baseline:.2f} s | first start {first:.2f} s "
              f"({first / baseline:.1f}x, {first / size:.1f} s/GiB) | next start {second:.3f} s ({second / baseline:.3f}x)")
    if args.json:
        args.json.write_text(json.dumps(dict(results, cpu=_cpu()), indent=2) + "\n")


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


if __name__ == "__main__":
    main()
