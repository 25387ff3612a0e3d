"""Hub sources read by row group from their Parquet files (bert_ds/data/hub/),
against a local folder laid out as the hub (tests/support/hub_fixtures.py) and read through the same
fsspec calls, counting the bytes each loader shard fetches."""

from __future__ import annotations

from collections import Counter

import pytest

from bert_ds.config import DataConfig
from bert_ds.data.hub import fs as hub_fs, parquet as hub_parquet
from bert_ds.data.sources import DataError, check_sources, parse_sources, streams_whole
from bert_ds.data.stream import SourceReader
from bert_ds.data.text.cleaning import TextStats
from tests.support.hub_fixtures import (
    BOOKS_ID, BOOKS_REVISION, WIKI_CONFIG, WIKI_ID, CountingFileSystem, WordTokenizer, bookcorpus_mirror, wikipedia_mirror,
    write_hub_file,
)

WIKI = f"wiki=hf:{WIKI_ID}:{WIKI_CONFIG}"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty hub mirror read through the byte-counting file system, and a fresh cache."""
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("BERT_DS_HUB_MIRROR", f"countingfile://{root}")
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub_parquet, "_RESOLVED", {})
    CountingFileSystem.read_bytes.clear()
    return root


def _first_epoch(source, shard: int, shards: int) -> tuple[list[str], int]:
    """The documents shard `shard` of `shards` reads in its first epoch (their first words, which
    name the article) and the bytes its readers fetched."""
    reader = SourceReader(source, WordTokenizer(), DataConfig(), shard, shards, TextStats())
    keys = []
    while (found := reader._next_local_unit()) is not None:  # None: the end of the shard's epoch
        keys.extend(record["text"] for record in found[1])
    fetched = sum(f.bytes_read for f in reader._opened.values())
    for f in reader._opened.values():
        f.close()
    return keys, fetched


@pytest.mark.parametrize("shards", [8, 64])
def test_each_shard_fetches_about_one_kth_and_the_shards_together_read_the_corpus_once(hub, shards):
    texts = wikipedia_mirror(hub, articles=3840, files=4, row_group_size=5, sentences=6)  # 768 row groups
    [source] = parse_sources([WIKI])
    check_sources([source])  # lists the files at the commit, reads and caches the footers
    footers = sum(CountingFileSystem.read_bytes.values())
    found = hub_parquet.resolve(source.name, source.location)
    text_bytes = sum(size for _, size in found.row_groups)
    files = sum(f.size for f in found.files)
    assert found.commit == "main" and found.records == len(texts) and len(found.row_groups) == 768

    seen, fetched = Counter(), []
    for shard in range(shards):
        keys, shard_bytes = _first_epoch(source, shard, shards)
        seen.update(keys)
        fetched.append(shard_bytes)
    assert seen == Counter(texts)  # the union is the corpus, record for record, none twice
    # Each shard fetches its own row groups' text column and nothing else (the footers came once,
    # with the file list, and are handed to pyarrow from the cache).
    assert max(fetched) <= 1.2 * text_bytes / shards
    assert sum(fetched) == text_bytes
    assert sum(fetched) + footers <= files  # the whole job fetched less than the files hold
    CountingFileSystem.read_bytes.clear()
    hub_parquet._RESOLVED.clear()  # a second process of the job: footers from the cache, nothing fetched
    check_sources(parse_sources([WIKI]))
    assert sum(CountingFileSystem.read_bytes.values()) == 0


def test_hub_layouts_configs_revisions_and_partial_conversions(hub):
    bookcorpus_mirror(hub, sentences=2000, row_group_size=100)
    [books] = parse_sources([f"books=hf:{BOOKS_ID}@{BOOKS_REVISION}@800"])
    assert (books.location, books.weight) == (f"hf:{BOOKS_ID}@{BOOKS_REVISION}", 800.0)
    found = hub_parquet.resolve(books.name, books.location)
    assert (found.commit, found.records, found.partial) == (BOOKS_REVISION, 2000, False)
    assert [f.path.split("/")[-3:] for f in found.files] == [["plain_text", "train", f"000{k}.parquet"] for k in (0, 1)]
    assert not streams_whole(books)
    reader = SourceReader(books, WordTokenizer(), DataConfig(), 0, 1, TextStats())
    assert str(reader.layout) == "sentences:256" and reader.commit == BOOKS_REVISION

    wikipedia_mirror(hub, articles=40, files=1)
    write_hub_file(hub, WIKI_ID, "main", "20231101.fr/train-00000-of-00001.parquet", dict(text=["x"]), 10)
    with pytest.raises(DataError, match=r"has configs 20231101\.en, 20231101\.fr; name one"):
        hub_parquet.resolve("wiki", f"hf:{WIKI_ID}")
    with pytest.raises(DataError, match=r"has no config '20231101\.de' \(its Parquet folders: 20231101\.en, 20231101\.fr\)"):
        hub_parquet.resolve("wiki", f"hf:{WIKI_ID}:20231101.de")

    partial = hub / "partial"
    bookcorpus_mirror(partial, sentences=400, partial=True)
    hub_parquet._RESOLVED.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BERT_DS_HUB_MIRROR", str(partial))
        assert hub_parquet.resolve("books", f"hf:{BOOKS_ID}@{BOOKS_REVISION}").partial


def test_unknown_ids_and_revisions_are_one_sentence_each(hub):
    wikipedia_mirror(hub, articles=20, files=1)
    with pytest.raises(DataError, match=r"Data source 'x': the hub has no dataset 'nobody/nothing'"):
        check_sources(parse_sources(["x=hf:nobody/nothing"]))
    with pytest.raises(DataError, match=r"hub dataset 'wikimedia/wikipedia' has no revision 'v9' \(revisions here: main\)"):
        check_sources(parse_sources([f"wiki=hf:{WIKI_ID}:{WIKI_CONFIG}@v9"]))
    write_hub_file(hub, "some/table", "main", "data/train-00000-of-00001.parquet", dict(body=["no text column"]), 10)
    with pytest.raises(DataError, match=r"has no 'text' column \(columns: \['body'\]\)"):
        check_sources(parse_sources(["t=hf:some/table"]))


def test_a_hub_dataset_without_parquet_files_is_streamed_and_the_plan_says_what_it_costs(hub):
    from bert_ds.training.plan.data import _hub_plan

    json_only = hub / "datasets" / "some" / "jsonl@main" / "data"
    json_only.mkdir(parents=True)
    (json_only / "train.jsonl").write_text('{"text": "a"}\n')
    [source] = parse_sources(["j=hf:some/jsonl"])
    assert streams_whole(source)
    assert SourceReader(source, WordTokenizer(), DataConfig(), 0, 2, TextStats()).ownership == "records"
    plan = _hub_plan(source, 1.0, shards=64)
    assert "streamed by `datasets`" in plan.detail
    assert "each of the 64 loader shards reads the whole stream (64 full passes per epoch)" in plan.warnings[0]
    assert "python -m bert_ds.data.prepare hf:some/jsonl --output DIR" in plan.warnings[0]


def test_the_plan_shows_each_shards_share_and_warns_where_row_groups_are_too_few(hub):
    from bert_ds.training.plan.data import _hub_plan

    wikipedia_mirror(hub, articles=640, files=2, row_group_size=10)  # 64 row groups
    [source] = parse_sources([WIKI])
    even = _hub_plan(source, 1.0, shards=8)
    assert "commit main: 2 files, 640 records in 64 row groups" in even.detail
    assert "each of 8 shards fetches <= 12." in even.detail and not even.warnings
    few = _hub_plan(source, 1.0, shards=128)
    assert "has 64 row groups for 128 loader shards" in few.warnings[0] and "bert_ds.data.prepare" in few.warnings[0]


def test_transient_errors_are_retried_with_back_off_and_others_are_not(hub, monkeypatch, capsys):
    monkeypatch.setattr(hub_fs, "FIRST_WAIT_SECONDS", 0.0)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("connection reset by peer")
        return "read"

    assert hub_fs.with_retries(flaky, "row group 7", first_wait=0.0) == "read" and len(calls) == 3
    assert capsys.readouterr().err.count("retry") == 2

    class Throttled(Exception):
        response = type("Response", (), {"status_code": 429})()

    assert hub_fs.transient(Throttled()) and not hub_fs.transient(FileNotFoundError("gone"))
    with pytest.raises(FileNotFoundError):
        hub_fs.with_retries(lambda: (_ for _ in ()).throw(FileNotFoundError("gone")), "x", first_wait=0.0)

    # A row group whose first two fetches fail is read on the third, its file reopened.
    texts = wikipedia_mirror(hub, articles=50, files=1, row_group_size=10)
    [source] = parse_sources([WIKI])
    found = hub_parquet.resolve(source.name, source.location)
    records = hub_parquet.RemoteParquetRecords("wiki", found.files[0], 1)
    original, failures = records._open, []

    def failing_open():
        if len(failures) < 2:
            failures.append(1)
            raise TimeoutError("read timed out")
        return original()

    records._open = failing_open
    assert [r["text"] for r in records.read(0, 50)] == texts


def test_a_checkpoint_keeps_the_commit_it_read(hub):
    """A run started when `main` was commit c1 resumes from c1's files after `main` moved on."""
    wikipedia_mirror(hub, articles=60, files=2, row_group_size=10)
    old = hub / "datasets" / f"{WIKI_ID}@main"
    old.rename(old.with_name("wikipedia@c1"))
    write_hub_file(hub, WIKI_ID, "main", f"{WIKI_CONFIG}/train-00000-of-00001.parquet",
                   dict(text=["Moved on. Another text entirely."] * 60), 10)
    [source] = parse_sources([WIKI])
    reader = SourceReader(source, WordTokenizer(), DataConfig(), 0, 2, TextStats())
    reader.commit = "c1"  # what the run pinned when it started
    reader.next_document()
    state = reader.state_dict()
    assert state["commit"] == "c1" and state["ownership"] == "chunks"
    resumed = SourceReader(source, WordTokenizer(), DataConfig(), 0, 2, TextStats())
    assert resumed.commit == "main"
    resumed.load_state_dict(state)
    assert resumed.commit == "c1" and resumed.next_document() == reader.next_document()


def test_pretraining_on_hub_sources_resumes_exactly(hub, tmp_path, monkeypatch):
    """Two ranks train on BookCorpus and Wikipedia as the hub serves them (each rank fetching its
    own row groups); resumed from the step-3 checkpoint, the losses continue bitwise."""
    from tests.support.helpers import read_metrics, run_pretrain

    monkeypatch.setenv("BERT_DS_HUB_MIRROR", str(hub))  # a plain folder: the jobs are other processes

    bookcorpus_mirror(hub, sentences=6000, row_group_size=256)
    wikipedia_mirror(hub, articles=800, files=2, row_group_size=10, sentences=10)
    common = ["--preset", "tiny", "--tokenizer", "bert-base-uncased", "--train-steps", "6", "--log-interval", "1",
              "--zero-stage", "2", "--data", f"books=hf:{BOOKS_ID}@{BOOKS_REVISION}@800", f"{WIKI}@2500"]
    save = tmp_path / "ckpt"

    def train(name, extra):
        metrics = tmp_path / f"{name}.jsonl"
        result = run_pretrain(common + ["--metrics-file", str(metrics), *extra], nproc=2)
        assert result.returncode == 0, result.stderr[-3000:]
        return [m for m in read_metrics(metrics) if "loss" in m]

    straight = train("straight", ["--save", str(save), "--save-interval", "3"])
    resumed = train("resumed", ["--load", str(save / "step00000003")])
    assert [m["step"] for m in resumed] == [4, 5, 6]
    assert [m["loss"] for m in resumed] == [m["loss"] for m in straight[3:]]


def test_a_checkpoint_that_streamed_a_hub_source_finishes_that_epoch_as_a_stream(hub):
    """A data state written when hub sources were `datasets` streams (their stream state kept)
    continues that stream to the end of its epoch, then reads the Parquet row groups."""
    wikipedia_mirror(hub, articles=60, files=2, row_group_size=10)
    [source] = parse_sources([WIKI])
    reader = SourceReader(source, WordTokenizer(), DataConfig(), 0, 2, TextStats())
    old = dict(reader.state_dict(), ownership=None, records_this_epoch=7, documents_this_epoch=3,
               dataset={"examples_iterable": {}})
    del old["commit"]
    reader.load_state_dict(old)
    assert reader.streamed and reader.ownership == "records" and reader._resume_from == {"examples_iterable": {}}
    assert reader.state_dict()["dataset"] == {"examples_iterable": {}}
    reader._next_epoch()
    assert not reader.streamed and reader.ownership == "chunks"
