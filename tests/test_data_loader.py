"""Streaming loader: exact resume, disjoint shards, mixing by tokens, dirty bytes, clear errors."""

import itertools
import json

import pytest
import torch

from bert_ds.config import DataConfig
from bert_ds.data.loader import PretrainingLoader
from bert_ds.data.sources import DataError, DataSource, parse_sources, sample_sources
from bert_ds.data.stream import ExampleStream, SourceReader
from bert_ds.data.text.cleaning import TextStats


def _config(**overrides):
    values = dict(seq_length=64, micro_batch_size=4, block_documents=4, seed=5)
    values.update(overrides)
    return DataConfig(**values)


def _take(loader, count):
    return list(itertools.islice(iter(loader), count))


def _assert_same_batches(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("objective", ["mlm_nsp", "ltr"])
def test_resume_yields_exactly_the_next_batches(sample_tokenizer, num_workers, objective):
    config = _config(num_workers=num_workers, objective=objective)
    loader = PretrainingLoader(sample_sources(), sample_tokenizer, config)
    _take(loader, 7)
    state = loader.state_dict()
    expected = _take(loader, 9)  # continues from where the first pass stopped

    resumed = PretrainingLoader(sample_sources(), sample_tokenizer, config)
    resumed.load_state_dict(state)
    _assert_same_batches(_take(resumed, 9), expected)
    assert resumed.batches_consumed == 16


def test_uninterrupted_equals_interrupted(sample_tokenizer):
    config = _config()
    straight = _take(PretrainingLoader(sample_sources(), sample_tokenizer, config), 12)
    loader = PretrainingLoader(sample_sources(), sample_tokenizer, config)
    pieces = _take(loader, 5)
    again = PretrainingLoader(sample_sources(), sample_tokenizer, config)
    again.load_state_dict(loader.state_dict())
    _assert_same_batches(pieces + _take(again, 7), straight)
    uids = torch.cat([b["example_uid"] for b in straight])
    assert len(set(uids.tolist())) == len(uids)  # no example repeated


def _documents_of_shard(source, tokenizer, shard, shards):
    reader = SourceReader(source, tokenizer, _config(), shard, shards, TextStats())
    documents = []
    while reader.epoch == 0:
        document = reader.next_document()
        if reader.epoch == 0:
            documents.append(tuple(map(tuple, document)))
    return documents


@pytest.mark.parametrize("source", sample_sources(), ids=lambda s: s.name)
def test_two_ranks_read_disjoint_documents_whose_union_is_the_source(sample_tokenizer, source):
    whole = _documents_of_shard(source, sample_tokenizer, 0, 1)
    rank0 = _documents_of_shard(source, sample_tokenizer, 0, 2)
    rank1 = _documents_of_shard(source, sample_tokenizer, 1, 2)
    assert rank0 and rank1  # every rank busy
    assert not set(rank0) & set(rank1)
    assert sorted(rank0 + rank1) == sorted(whole)


def test_ranks_get_different_batches(sample_tokenizer):
    batches = [
        _take(PretrainingLoader(sample_sources(), sample_tokenizer, _config(), dp_rank=r, dp_size=2), 3)
        for r in range(2)
    ]
    uids = [set(torch.cat([b["example_uid"] for b in rank]).tolist()) for rank in batches]
    assert not uids[0] & uids[1]
    assert not torch.equal(batches[0][0]["input_ids"], batches[1][0]["input_ids"])


def test_sources_are_mixed_by_token_share(sample_tokenizer):
    stream = ExampleStream(sample_sources(), sample_tokenizer, _config(block_documents=40))
    largest = 0
    for _ in range(6):
        largest = max(largest, *(sum(map(len, document)) for document in stream._read_block()))
        drawn = stream.tokens_drawn
        # books : wiki = 800 : 2500 (the paper's words); documents come whole, so the running
        # token share is off by at most one document.
        books_error = abs(drawn[0] - drawn.sum() * 800 / 3300)
        assert books_error <= largest, (drawn, largest)
    assert drawn[0] > largest  # more than one book was drawn


@pytest.fixture()
def dirty_corpus(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("Caf\xe9 au lait. Na\xefve ideas.\n\nMore text here. And more.".encode("latin-1"))
    (tmp_path / "bom_crlf.txt").write_bytes("\ufeffFirst line here.\r\nSecond line.\r\n\r\nNew paragraph. Yes.".encode("utf-8"))
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "huge_line.txt").write_bytes(b"word " * 2_000_000 + b"\n")  # a 10 MB line
    (tmp_path / "fine.txt").write_text("A normal book. It has sentences. " * 200)
    return tmp_path


def _read_epoch(source, tokenizer):
    stats = TextStats()
    reader = SourceReader(source, tokenizer, _config(), 0, 1, stats)
    documents = []
    while True:
        before = TextStats().add(stats)
        document = reader.next_document()
        if reader.epoch > 0:  # that call wrapped around and read the first document again
            return documents, before
        documents.append(document)


def test_dirty_bytes_are_repaired_and_counted(sample_tokenizer, dirty_corpus):
    documents, stats = _read_epoch(DataSource("dirty", str(dirty_corpus / "*.txt")), sample_tokenizer)
    assert len(documents) == 4  # the empty file is skipped, the rest all read
    assert stats.documents == 5 and stats.empty_documents == 1
    assert stats.invalid_characters == 2  # é and ï are not UTF-8 in the latin-1 file
    assert stats.byte_order_marks == 1
    assert stats.split_long_sentences == 1  # the 10 MB line, cut into bounded pieces
    pieces = [s for d in documents for s in d]
    assert max(map(len, pieces)) < 2_000  # tokens per piece stay bounded
    assert not any(sample_tokenizer.unk_id in s for s in documents[0])  # nothing undecodable reached it


def test_carriage_returns_and_empty_records_in_json_lines(sample_tokenizer, tmp_path):
    path = tmp_path / "docs.jsonl"
    records = [{"text": "Windows line.\r\nAnother line.\r\n"}, {"text": ""}, {"text": "Plain text. More."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    documents, stats = _read_epoch(DataSource("j", str(path)), sample_tokenizer)
    assert len(documents) == 2
    assert stats.carriage_returns == 2 and stats.empty_documents == 1


def test_missing_file_is_named(sample_tokenizer, tmp_path):
    with pytest.raises(DataError, match="file not found: .*nope.jsonl"):
        list(itertools.islice(iter(ExampleStream(parse_sources([str(tmp_path / "nope.jsonl")]), sample_tokenizer, _config())), 1))


def test_record_without_text_is_named(sample_tokenizer, tmp_path):
    path = tmp_path / "articles.jsonl"
    path.write_text(json.dumps({"text": "Fine. Text."}) + "\n" + json.dumps({"body": "no text field"}) + "\n")
    stream = ExampleStream(parse_sources([f"wiki={path}"]), sample_tokenizer, _config())
    with pytest.raises(DataError, match=r"'wiki': .*articles.jsonl line 2 has no 'text' field \(fields: \['body'\]\)"):
        list(itertools.islice(iter(stream), 10))


def test_corrupt_parquet_is_named(sample_tokenizer, tmp_path):
    path = tmp_path / "shard-00001.parquet"
    path.write_bytes(b"PAR1 this is not a parquet file")
    with pytest.raises(DataError, match="unreadable Parquet file .*shard-00001.parquet"):
        list(itertools.islice(iter(ExampleStream(parse_sources([str(path)]), sample_tokenizer, _config())), 1))


def test_parquet_and_jsonl_sources_stream(sample_tokenizer, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"Document number {i}. It talks about topic {i}. Then it ends." for i in range(20)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "part.parquet")
    (tmp_path / "part.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    for name in ("part.parquet", "part.jsonl"):
        stream = ExampleStream(parse_sources([str(tmp_path / name)]), sample_tokenizer, _config())
        assert len(list(itertools.islice(iter(stream), 20))) == 20


@pytest.mark.parametrize(
    "spec, message",
    [
        ("books=x.txt@heavy", "weight 'heavy' is not a number"),
        ("books=x.txt@-1", "weight must be positive"),
        ("a=x.txt,a=y.txt", None),
    ],
)
def test_bad_source_specs(spec, message):
    if message is None:
        with pytest.raises(DataError, match="unique"):
            parse_sources(["a=x.txt", "a=y.txt"])
    else:
        with pytest.raises(DataError, match=message):
            parse_sources([spec])


def test_hub_sources_parse():
    wiki = parse_sources(["hf:wikimedia/wikipedia:20231101.en@2500"])[0]
    assert wiki.is_hub and wiki.weight == 2500 and wiki.name == "wikipedia"


def test_state_from_another_layout_is_refused(sample_tokenizer):
    loader = PretrainingLoader(sample_sources(), sample_tokenizer, _config(), dp_rank=0, dp_size=2)
    _take(loader, 1)
    other = PretrainingLoader(sample_sources(), sample_tokenizer, _config(), dp_rank=0, dp_size=1)
    with pytest.raises(DataError, match="dp_rank/dp_size/num_workers = 0/2/0"):
        other.load_state_dict(loader.state_dict())


def test_phase_two_sequences_of_512(sample_tokenizer):
    batches = _take(PretrainingLoader(sample_sources(), sample_tokenizer, _config(seq_length=512)), 5)
    assert all(batch["input_ids"].shape == (4, 512) for batch in batches)
    lengths = torch.cat([batch["attention_mask"].sum(1) for batch in batches]).float()
    assert lengths.max() == 512 and lengths.mean() > 256  # pairs fill the longer sequences


def test_unreachable_hub_dataset_is_a_clear_error():
    import subprocess
    import sys

    code = (
        "from bert_ds.data.sources import parse_sources, load_source\n"
        "load_source(parse_sources(['hf:wikimedia/wikipedia:20231101.en'])[0])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode != 0
    assert "DataError: Data source 'wikipedia': cannot open hub dataset 'wikimedia/wikipedia'" in run.stderr
