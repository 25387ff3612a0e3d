"""What one loader shard reads: records parsed and bytes read per shard, at K = 1, 8, 64 shards.

A shard is one (DP rank, loader worker) pair; K = DP x workers. Simulated on the CPU: for each
source of the corpus (default: the built-in sample, one books and one Wikipedia source), shard 0
of K reads its first epoch through data/stream.py's SourceReader, as in training, and this counts

  - records parsed: records the reader decoded (data/records/index.py's counters; a Parquet row
    group counts whole; for a hub source, every record of the stream up to the shard's last),
  - records kept: documents that were the shard's own (what it tokenizes and trains on),
  - bytes read: what the reader read from disk (a row group's compressed `text` column, a JSON
    Lines file's lines, a .txt file whole),

each as a share of the whole corpus. A loader whose cost falls with the shard reads about 1/K.
The tokenizer is a stand-in (one id per word): tokenizing is what a shard does with its kept
records and is not what this counts.

`--synthetic N` adds a corpus large enough for K = 64: the sample's Wikipedia articles repeated to
N records, written as Parquet (row groups of `--row-group` rows, default 100) and as JSON Lines.

Usage: python benchmarks/loader_reads.py [--shards 1 8 64] [--data SPEC ...] [--synthetic N]
       [--row-group ROWS] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class WordCountTokenizer:
    """Just enough of a tokenizer for SourceReader: one id per whitespace-separated word."""

    def encode_batch(self, sentences):
        return [[1] * len(sentence.split()) for sentence in sentences]


def shard_reads(source, config, shard: int, shards: int) -> dict:
    """Records parsed and kept, and bytes read, by `shard` of `shards` over its first epoch."""
    from bert_ds.data.sources import local_files
    from bert_ds.data.stream import SourceReader
    from bert_ds.data.text.cleaning import TextStats

    reader = SourceReader(source, WordCountTokenizer(), config, shard, shards, TextStats())
    start = time.perf_counter()
    kept, parsed, read = 0, 0, 0
    while True:
        reader.next_document()
        if reader.epoch > 0:  # the first document of epoch 1 was read: not counted
            break
        kept += 1
        if reader.streamed:  # a hub dataset without Parquet files: every record up to the shard's last
            parsed = reader.records_this_epoch
        else:
            parsed = sum(f.records_read for f in reader._opened.values())
            read = sum(f.bytes_read for f in reader._opened.values())
    seconds = time.perf_counter() - start
    total = sum(os.path.getsize(path) for path in local_files(source)) if not source.is_hub else None
    return dict(parsed=parsed, kept=kept, bytes_read=read if total else None, corpus_bytes=total, seconds=seconds)


def synthetic_corpus(folder: Path, records: int, row_group: int) -> list[str]:
    """--data specs of `records` Wikipedia-sample articles as Parquet and as JSON Lines."""
    import itertools

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bert_ds.data.sources import iter_document_texts, sample_sources

    wiki = [s for s in sample_sources() if s.name == "wiki"]
    articles = list(iter_document_texts([f"wiki={wiki[0].location}"]))
    texts = list(itertools.islice(itertools.cycle(articles), records))
    (folder / "parquet").mkdir(parents=True)
    pq.write_table(pa.table({"text": texts}), folder / "parquet" / "part-0.parquet", row_group_size=row_group)
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
    parser.add_argument("--row-group", type=int, default=100, help="rows per Parquet row group of the synthetic corpus")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    import tempfile

    scratch = tempfile.TemporaryDirectory()
    sys.path.insert(0, str(REPO))
    from bert_ds.config import DataConfig
    from bert_ds.data.sources import parse_sources, sample_sources

    sources = parse_sources(args.data) if args.data else sample_sources()
    if args.synthetic:
        sources += parse_sources(synthetic_corpus(Path(scratch.name), args.synthetic, args.row_group))
    config = DataConfig()
    rows = []
    for source in sources:
        whole = shard_reads(source, config, 0, 1)
        for shards in args.shards:
            reads = whole if shards == 1 else shard_reads(source, config, 0, shards)
            rows.append(dict(source=source.name, shards=shards, **reads, corpus_records=whole["parsed"],
                             parsed_share=reads["parsed"] / whole["parsed"], kept_share=reads["kept"] / whole["parsed"]))
    print("| source | K shards | records parsed by shard 0 | share of the corpus | records kept | bytes read | share of the bytes | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        read = "hub" if r["bytes_read"] is None else f"{r['bytes_read']:,} | {r['bytes_read'] / r['corpus_bytes']:.3f}"
        print(f"| {r['source']} | {r['shards']} | {r['parsed']:,} of {r['corpus_records']:,} | {r['parsed_share']:.3f} | "
              f"{r['kept']:,} | {read} | {r['seconds']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    scratch.cleanup()
    return rows


if __name__ == "__main__":
    main()
