"""Local sources read by record number (bert_ds/data/records/index.py): the same records as the
`datasets` readers, any range without reading what precedes it, and shards that read only their
own chunks, resumable and re-divisible as before."""

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bert_ds.config import DataConfig
from bert_ds.data.records import index as record_index
from bert_ds.data.sources import DataError, DataSource, document_stream, epoch_files, source_epoch, parse_sources
from bert_ds.data.stream import SourceReader
from bert_ds.data.text.cleaning import TextStats


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))


def _texts(count, rng):
    return [f"Record {i} is here. " + "It has words. " * rng.randint(0, 4) for i in range(count)]


@pytest.fixture
def corpus(tmp_path):
    """The same 3,000 records as Parquet (row groups of 70), JSON Lines (blank lines, CRLF and a
    lone CR between records) and blank-line-separated text (assorted newlines)."""
    rng = random.Random(0)
    texts = _texts(3000, rng)
    pq.write_table(pa.table({"text": texts, "id": list(range(3000))}), tmp_path / "r.parquet", row_group_size=70)
    with open(tmp_path / "r.jsonl", "w", newline="") as out:
        for text in texts:
            out.write(json.dumps({"text": text}) + rng.choice(["\n", "\n\n", "\r\n", "\n  \n", "\r"]))
    pieces = [text.strip() + rng.choice(["\n\n", "\n\n\n", "\r\n\r\n", "\r\r", "\n \n\n"]) for text in texts]
    (tmp_path / "r.txt").write_bytes("".join(pieces).encode() + b"\xff last")
    return tmp_path, texts


def _reference(path, blank_lines):
    """What `datasets` reads from the file (the readers bert_ds used before the index)."""
    from datasets import load_dataset

    builder = {"parquet": "parquet", "jsonl": "json", "txt": "text"}[path.rsplit(".", 1)[1]]
    options = dict(sample_by="paragraph" if blank_lines else "document", encoding="utf-8", encoding_errors="replace") \
        if builder == "text" else {}
    return [r["text"] for r in load_dataset(builder, data_files=[path], split="train", streaming=True, **options)]


@pytest.mark.parametrize("name, spec", [("r.parquet", ""), ("r.jsonl", ""), ("r.txt", "#lines"), ("books", "")])
def test_records_are_the_ones_datasets_reads(corpus, name, spec):
    folder, _ = corpus
    path = "bert_ds/data/sample/books/botchan.txt" if name == "books" else str(folder / name)
    ours = [record["text"] for record in document_stream(parse_sources([path + spec])[0], seed=0, epoch=0)]
    assert ours == _reference(path, blank_lines=bool(spec))
    assert len(ours) == (1 if name == "books" else 3001 if name == "r.txt" else 3000)


@pytest.mark.parametrize("name, spec", [("r.parquet", ""), ("r.jsonl", ""), ("r.txt", "#lines")])
def test_any_range_reads_without_the_records_before_it(corpus, monkeypatch, name, spec):
    monkeypatch.setattr(record_index, "MAX_POINTS", 16)  # a coarse index: the stride doubles to 256
    folder, _ = corpus
    source = parse_sources([str(folder / name) + spec])[0]
    every = [record["text"] for record in source_epoch(source, 0, 0).iter_records()]
    rng = random.Random(1)
    for _ in range(20):
        epoch = source_epoch(source, 0, 0)  # fresh counters
        start = rng.randrange(len(every))
        stop = min(len(every), start + rng.randint(1, 300))
        assert [r["text"] for r in epoch.read(start, stop)] == every[start:stop]
        assert [r["text"] for r in epoch.read(stop, stop + 5)] == every[stop:stop + 5]  # continues in place
        overshoot = 70 if name == "r.parquet" else 0  # whole row groups are decoded
        assert epoch.records_read <= stop + 5 - start + 2 * overshoot


def test_a_file_changed_after_indexing_is_indexed_again(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"text": f"old {i}"}) + "\n" for i in range(5)))
    source = DataSource("a", str(path))
    assert source_epoch(source, 0, 0).total == 5
    path.write_text("".join(json.dumps({"text": f"new {i}"}) + "\n" for i in range(7)))
    assert [r["text"] for r in source_epoch(source, 0, 0).iter_records()] == [f"new {i}" for i in range(7)]


def test_bad_json_line_is_named_with_its_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n\n{"text": broken}\n')
    with pytest.raises(DataError, match=r"'bad': .*bad.jsonl line 3 is not valid JSON"):
        list(source_epoch(DataSource("bad", str(path)), 0, 0).iter_records())
    path.write_text('{"text": "fine"}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"bad.jsonl line 2 is an array, not a JSON object with a 'text' field"):
        list(source_epoch(DataSource("bad", str(path)), 0, 0).iter_records())


def test_chunks_follow_row_groups_and_file_sizes():
    assert record_index.chunk_size(60, 1) == 1  # the sample's 60 articles: one chunk each
    assert record_index.chunk_size(6400, 1) == 100
    assert record_index.chunk_size(10_000_000, 1) == 1024
    assert record_index.chunk_size(64 * 256 * 3, 256) == 3 * 256  # whole runs of a sentences:256 source


class _Words:
    def encode_batch(self, sentences):
        return [[1] * len(sentence.split()) for sentence in sentences]


def _shard_epoch(source, shard, shards, state=None):
    """(records read, units kept) by one shard over its first epoch."""
    config = DataConfig(seed=0)
    reader = SourceReader(source, _Words(), config, shard, shards, TextStats())
    if state is not None:
        reader.load_state_dict(state)
    units = []
    while True:
        reader.next_document()
        if reader.epoch > 0:
            return reader, units
        units.append(reader.records_this_epoch - 1)


@pytest.mark.parametrize("name", ["r.parquet", "r.jsonl"])
def test_each_shard_reads_its_own_chunks_only(tmp_path, name):
    rng = random.Random(2)
    texts = _texts(6400, rng)
    if name == "r.parquet":
        pq.write_table(pa.table({"text": texts}), tmp_path / name, row_group_size=100)
    else:
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    source = DataSource("r", str(tmp_path / name))
    kept = []
    for shard in range(8):
        reader, units = _shard_epoch(source, shard, 8)
        # 6,400 records: chunks of 100, 8 of the 64 per shard; the wrap-around reads one more.
        assert len(units) == 800 and all((unit // 100) % 8 == shard for unit in units)
        kept += units
    assert sorted(kept) == list(range(6400))


def test_shard_read_volume_is_one_kth(tmp_path):
    texts = _texts(6400, random.Random(3))
    pq.write_table(pa.table({"text": texts}), tmp_path / "r.parquet", row_group_size=100)
    source = DataSource("r", str(tmp_path / "r.parquet"))
    for shards in (1, 8, 64):
        reader = SourceReader(source, _Words(), DataConfig(seed=0), 0, shards, TextStats())
        read = 0
        while reader.next_document() and reader.epoch == 0:
            read = reader._opened[str(tmp_path / "r.parquet")].records_read
        assert read == 6400 // shards, shards  # its own row groups, whole, and nothing else


def test_a_state_written_before_chunks_continues_by_record(tmp_path):
    """A checkpoint's data state from before chunks (no `ownership`, a `datasets` position)
    resumes its epoch with record ownership (unit u to shard u mod K), then switches to chunks."""
    texts = _texts(640, random.Random(4))
    (tmp_path / "r.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    source = DataSource("r", str(tmp_path / "r.jsonl"))
    legacy = dict(epoch=0, documents_this_epoch=10, records_this_epoch=20, started_at=0, shard_index=1,
                  num_shards=2, consumed=[], dataset={"examples_iterable": {"shard_idx": 0}})
    reader, units = _shard_epoch(source, 1, 2, legacy)
    assert units == list(range(21, 640, 2))  # records ownership, from where it stood
    assert reader.ownership == "chunks" and reader.epoch == 1
    assert reader.state_dict()["dataset"] is None
