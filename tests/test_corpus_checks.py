"""Start-up checks of local corpora (data/sources.py: check_sources, data/records/json_lines.py): an
unusable record anywhere in a JSON source, or a Parquet `text` column that is not strings or holds
nulls, stops the run before training with the file and line (or row group); a checked file is not
checked again by the next start; processes starting together index different files at once."""

import json
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bert_ds.runtime.cache import exclusive
from bert_ds.config import DataConfig
from bert_ds.data import sources
from bert_ds.data.records import json_lines as json_records
from bert_ds.data.records import parquet as parquet_records
from bert_ds.data.loader import PretrainingLoader
from bert_ds.data.records.index import index_file
from bert_ds.data.sources import DataError, DataSource, check_sources, source_epoch

GOOD = json.dumps({"text": "A fine record. It has two sentences."})


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("line, problem", [
    ('{"text": broken}', r"is not valid JSON \(Expecting value, column 10\)"),
    ("null", r"is null, not a JSON object with a 'text' field"),
    ("[1, 2]", r"is an array, not a JSON object"),
    ('"just text"', r"is a string, not a JSON object"),
    ('{"title": "T", "body": "B"}', r"has no 'text' field \(fields: \['body', 'title'\]\)"),
    ('{"text": 3}', r"has a 'text' that is a number, not a string"),
    ('{"text": null}', r"has a 'text' that is null, not a string"),
    (GOOD + "\rnull", r"is null"),  # a lone CR ends a record (as pyarrow reads it); the line is the \n line
    ("[" * 100_000 + "]" * 100_000, r"is JSON nested too deeply to read"),
    (b"\xff\xfe".decode("latin-1"), r"is not valid JSON"),
], ids=["invalid", "null", "array", "string", "no-text", "number-text", "null-text", "after-lone-cr", "deep", "not-utf8"])
def test_an_unusable_json_record_stops_the_start_with_file_and_line(tmp_path, monkeypatch, line, problem):
    monkeypatch.setattr(json_records, "_SCAN_BLOCK", 4096)  # the bad line is many blocks in
    path = tmp_path / "wiki.jsonl"
    path.write_bytes("\n".join([GOOD] * 3000 + [line] + [GOOD] * 10).encode("latin-1" if "\xff" in line else "utf-8") + b"\n")
    expected = rf"Data source 'wiki': {path} line 3001 {problem}"
    with pytest.raises(DataError, match=expected):
        check_sources([DataSource("wiki", str(path))])
    with pytest.raises(DataError, match=expected):  # the loader checks at construction, before any worker
        PretrainingLoader([DataSource("wiki", str(path))], tokenizer=None, config=DataConfig(seq_length=64))


def test_json_array_files_are_checked_by_record(tmp_path):
    path = tmp_path / "wiki.json"
    path.write_text(json.dumps([{"text": "One."}, {"text": "Two."}, None]))
    with pytest.raises(DataError, match=rf"{path} record 2 of its array is null"):
        check_sources([DataSource("wiki", str(path))])


def test_a_source_without_records_is_refused(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n  \n")
    (tmp_path / "b.jsonl").write_text("")
    with pytest.raises(DataError, match="'wiki': its files hold no JSON record"):
        check_sources([DataSource("wiki", str(tmp_path))])


def test_a_checked_file_is_not_read_again_by_the_next_start(tmp_path, monkeypatch):
    path = tmp_path / "wiki.jsonl"
    path.write_text("\n".join([GOOD] * 500) + "\n")
    source = DataSource("wiki", str(path))
    check_sources([source])

    def scan(path):
        raise AssertionError(f"{path} was scanned again")

    monkeypatch.setattr(json_records, "_scan_json_lines", scan)
    check_sources([source])  # the same process: the source passed already
    monkeypatch.setattr(sources, "_CHECKED_SOURCES", set())  # as in a new process
    check_sources([source])  # the cached index: no scan
    assert source_epoch(source, 0, 0).total == 500
    path.write_text("\n".join([GOOD] * 501) + "\n")  # a changed file is checked again
    with pytest.raises(AssertionError, match="scanned again"):
        check_sources([source])


def test_processes_starting_together_index_different_files(tmp_path):
    """While another process indexes file a, this one indexes b, then waits for a."""
    for name, count in (("a", 30), ("b", 20)):
        (tmp_path / f"{name}.jsonl").write_text("\n".join([GOOD] * count) + "\n")
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    counts = []
    with exclusive(index_file(a, "jsonl").with_suffix(".lock")):  # "another process" holds a
        worker = threading.Thread(target=lambda: counts.append(json_records.check_json_files("wiki", [a, b])))
        worker.start()
        deadline = time.monotonic() + 30
        while not index_file(b, "jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert index_file(b, "jsonl").exists() and not index_file(a, "jsonl").exists()
        assert worker.is_alive()  # waiting for a
    worker.join(30)
    assert counts == [50]


def _parquet(path, column, **kwargs):
    pq.write_table(pa.table({"text": column}), path, row_group_size=2, **kwargs)


def test_parquet_text_must_be_strings_without_nulls(tmp_path):
    _parquet(tmp_path / "ints.parquet", pa.array([1, 2, 3]))
    with pytest.raises(DataError, match=r"ints.parquet has a 'text' column of int64, not of strings"):
        check_sources([DataSource("wiki", str(tmp_path / "ints.parquet"))])
    _parquet(tmp_path / "nulls.parquet", pa.array(["a", "b", "c", None]))
    with pytest.raises(DataError, match=r"nulls.parquet row group 1 holds 1 null 'text' value"):
        check_sources([DataSource("wiki", str(tmp_path / "nulls.parquet"))])
    for kind in (pa.large_string(), pa.dictionary(pa.int32(), pa.string())):
        _parquet(tmp_path / "fine.parquet", pa.array(["a", "b", "c"]).cast(kind))
        check_sources([DataSource("wiki", str(tmp_path / "fine.parquet"))])
        assert [r["text"] for r in source_epoch(DataSource("wiki", str(tmp_path / "fine.parquet")), 0, 0).iter_records()] == ["a", "b", "c"]


def test_a_parquet_footer_is_read_once_per_process(tmp_path, monkeypatch):
    _parquet(tmp_path / "fine.parquet", pa.array(["a", "b", "c"]))
    source = DataSource("wiki", str(tmp_path / "fine.parquet"))
    monkeypatch.setattr(parquet_records, "_CHECKED_FOOTERS", set())
    check_sources([source])
    monkeypatch.setattr(parquet_records, "check_parquet_footer", lambda source, path: pytest.fail(f"{path} read again"))
    check_sources([source])
    source_epoch(source, 0, 1)


def test_blank_line_text_is_indexed_at_start_up_too(tmp_path):
    path = tmp_path / "google.txt"
    path.write_text("One sentence.\nTwo sentences.\n\nAnother document.\n")
    check_sources([DataSource("g", str(path))])  # one document per file: nothing to index
    assert not index_file(str(path), "paragraphs").exists()
    check_sources([DataSource("g", str(path))], txt_documents="blank_line")
    assert index_file(str(path), "paragraphs").exists()
    path.write_text("One.\n\nTwo.\n\nThree.\n")
    check_sources([DataSource("g", str(path), layout="lines")])  # the layout says so as well
    assert index_file(str(path), "paragraphs").exists()
    assert source_epoch(DataSource("g", str(path), layout="lines"), 0, 0).total == 3


def test_a_cache_on_a_file_system_without_locks_still_works(tmp_path, monkeypatch, capsys):
    """Lustre mounted without `flock` (and some NFS set-ups) refuse locks: the cache is built
    without one, with one warning per folder."""
    import errno
    import fcntl

    def no_locks(handle, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text("\n".join([GOOD] * 7) + "\n")
    source = DataSource("wiki", str(tmp_path / "*.jsonl"))
    check_sources([source])
    assert source_epoch(source, 0, 0).total == 14
    assert capsys.readouterr().err.count("cannot be locked (Function not implemented)") == 1


def test_a_folder_built_twice_without_a_lock_keeps_the_first(tmp_path):
    from bert_ds.runtime.cache import publish, staging_path

    target = tmp_path / "tokenizer"
    for text in ("first", "second"):  # two processes, each building its own copy
        staging = staging_path(target).with_name(staging_path(target).name + text)
        staging.mkdir()
        (staging / "model").write_text(text)
        publish(staging, target)
    assert (target / "model").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer"]


def test_two_bad_lines_cannot_make_up_for_each_other(tmp_path):
    """A line holding half a record and a line holding two give the block as many JSON values as
    records; the check still names the first bad line (each record must be one whole value)."""
    path = tmp_path / "wiki.jsonl"
    path.write_text(GOOD + '\n{"text": "a", "x": [1\n2]}\n{"text": "b"}, {"text": "c"}\n' + GOOD + "\n")
    with pytest.raises(DataError, match=r"wiki.jsonl line 2 is not valid JSON \(.*at the end of the line\)"):
        check_sources([DataSource("wiki", str(path))])


def test_crlf_and_a_bom_starting_a_later_line_are_fine(tmp_path):
    """Windows line ends take the fast path; concatenated files (a BOM at a later line's start)
    are read as the per-line reader reads them."""
    path = tmp_path / "wiki.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (GOOD + "\r\n").encode() * 3 + b"\xef\xbb\xbf" + (GOOD + "\r\n").encode() * 2)
    check_sources([DataSource("wiki", str(path))])
    assert source_epoch(DataSource("wiki", str(path)), 0, 0).total == 5


def test_a_parquet_file_with_two_text_columns_is_named(tmp_path):
    table = pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["text", "text"])
    pq.write_table(table, tmp_path / "two.parquet")
    with pytest.raises(DataError, match=r"two.parquet has 2 columns named 'text'"):
        check_sources([DataSource("wiki", str(tmp_path / "two.parquet"))])


def test_the_dry_run_checks_the_corpus_and_leaves_its_indexes_for_the_run(tmp_path):
    """As a user runs it: `pretrain.py --dry-run` names a bad record by file and line (exit 2, one
    line); once fixed, the plan passes and the run's processes find every index built."""
    from tests.support.helpers import run_entrypoint

    corpus = tmp_path / "wiki"
    corpus.mkdir()
    for k in range(3):
        (corpus / f"part-{k}.jsonl").write_text("\n".join([json.dumps({"title": "T", "text": f"Doc {k}. It is here."})] * 40) + "\n")
    bad = corpus / "part-1.jsonl"
    lines = bad.read_text().splitlines()
    bad.write_text("\n".join(lines[:30] + ['{"title": "T", "text": null}'] + lines[30:]) + "\n")
    args = ["--preset", "tiny", "--tokenizer", "bert-base-uncased", "--data", f"wiki={corpus}", "--dry-run", "cpu"]
    cache = tmp_path / "cache"
    refused = run_entrypoint("bert_ds/pretrain.py", args, cache_dir=str(cache))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert f"error: Data source 'wiki': {bad} line 31 has a 'text' that is null, not a string" in refused.stderr
    bad.write_text("\n".join(lines) + "\n")
    planned = run_entrypoint("bert_ds/pretrain.py", args, cache_dir=str(cache))
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert all(index_file(str(path), "jsonl").exists() for path in corpus.iterdir())
