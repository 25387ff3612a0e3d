"""What one loader shard reads: records parsed and bytes opened per shard, at K = 1, 8, 64 shards.

A shard is one (DP rank, loader worker) pair; K = DP x workers. Simulated on the CPU: for each
source of the corpus (default: the built-in sample, one books and one Wikipedia source), shard 0
of K reads its first epoch through data/stream.py's SourceReader, as in training, and this counts

  - records parsed: units (data/layouts.py) the reader took from the record stream,
  - records kept: units that were the shard's own (what it tokenizes and trains on),
  - bytes opened: the sizes of the files the stream read (every file, for a local source),

each as a share of the whole corpus. A loader whose cost falls with the shard reads about 1/K.
The tokenizer is a stand-in (one id per word): tokenizing is what a shard does with its kept
records and is not what this counts.

`--synthetic N` adds a corpus large enough for K = 64: the sample's Wikipedia articles repeated to
N records, written as Parquet (row groups of 1,000 rows, like the hub's) and as JSON Lines.

Usage: python tests/bench/loader_reads.py [--shards 1 8 64] [--data SPEC ...] [--synthetic N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class WordCountTokenizer:
    """Just enough of a tokenizer for SourceReader: one id per whitespace-separated word."""

    def encode_batch(self, sentences):
        return [[1] * len(sentence.split()) for sentence in sentences]


def shard_reads(source, config, shard: int, shards: int) -> dict:
    """Records parsed and kept by `shard` of `shards` over its first epoch of `source`."""
    from bert_ds.data.sources import local_files
    from bert_ds.data.stream import SourceReader
    from bert_ds.data.text import TextStats

    reader = SourceReader(source, WordCountTokenizer(), config, shard, shards, TextStats())
    parsed = 0
    next_unit = reader._next_unit

    def counting_next_unit():
        nonlocal parsed
        unit = next_unit()
        parsed += unit is not None and reader.epoch == 0
        return unit

    reader._next_unit = counting_next_unit
    start = time.perf_counter()
    kept = sum(1 for _ in reader.first_epoch_documents())
    seconds = time.perf_counter() - start
    opened = sum(os.path.getsize(path) for path in local_files(source)) if not source.is_hub else None
    return dict(parsed=parsed, kept=kept, bytes_opened=opened, seconds=seconds)


def synthetic_corpus(folder: Path, records: int) -> list[str]:
    """--data specs of `records` Wikipedia-sample articles as Parquet and as JSON Lines."""
    import itertools

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bert_ds.data.sources import iter_document_texts, sample_sources

    wiki = [s for s in sample_sources() if s.name == "wiki"]
    articles = list(iter_document_texts([f"wiki={wiki[0].location}"]))
    texts = list(itertools.islice(itertools.cycle(articles), records))
    (folder / "parquet").mkdir(parents=True)
    pq.write_table(pa.table({"text": texts}), folder / "parquet" / "part-0.parquet", row_group_size=1000)
    (folder / "jsonl").mkdir()
    with open(folder / "jsonl" / "part-0.jsonl", "w") as handle:
        handle.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    return [f"parquet={folder / 'parquet' / '*.parquet'}", f"jsonl={folder / 'jsonl' / '*.jsonl'}"]


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--data", nargs="+", help="--data specs (default: the built-in sample)")
    parser.add_argument("--synthetic", type=int, default=0, metavar="N",
                        help="also read N records of repeated sample articles (Parquet and JSON Lines)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    import tempfile

    scratch = tempfile.TemporaryDirectory()
    sys.path.insert(0, str(REPO))
    from bert_ds.config import DataConfig
    from bert_ds.data.sources import parse_sources, sample_sources

    sources = parse_sources(args.data) if args.data else sample_sources()
    if args.synthetic:
        sources += parse_sources(synthetic_corpus(Path(scratch.name), args.synthetic))
    config = DataConfig()
    rows = []
    for source in sources:
        whole = shard_reads(source, config, 0, 1)
        for shards in args.shards:
            reads = whole if shards == 1 else shard_reads(source, config, 0, shards)
            rows.append(dict(source=source.name, shards=shards, **reads, corpus_records=whole["parsed"],
                             parsed_share=reads["parsed"] / whole["parsed"], kept_share=reads["kept"] / whole["parsed"]))
    print("| source | K shards | records parsed by shard 0 | share of the corpus | records kept | bytes opened | seconds |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        opened = "hub" if r["bytes_opened"] is None else f"{r['bytes_opened']:,}"
        print(f"| {r['source']} | {r['shards']} | {r['parsed']:,} of {r['corpus_records']:,} | {r['parsed_share']:.3f} | "
              f"{r['kept']:,} | {opened} | {r['seconds']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    scratch.cleanup()
    return rows


if __name__ == "__main__":
    main()
