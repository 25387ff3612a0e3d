"""`python -m bert_ds.data.prepare` (bert_ds/data/prepare/) and the prepared
folder as a source (data/prepared.py): hub-shaped and local inputs, killed and resumed to the
same bytes, counts equal to a direct count, bad input as one `error:` line, and a loader shard
reading 1/K of a prepared corpus."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bert_ds.config import DataConfig
from bert_ds.data.hub import parquet as hub_parquet
from bert_ds.data.prepare.command import main as prepare_main
from bert_ds.data.sources import DataError, check_sources, parse_sources, source_epoch
from bert_ds.data.stream import SourceReader
from bert_ds.data.text.cleaning import TextStats
from tests.support.hub_fixtures import BOOKS_ID, BOOKS_REVISION, WIKI_CONFIG, WIKI_ID, article, bookcorpus_mirror, wikipedia_mirror
from tests.support.hub_fixtures import WordTokenizer

PREPARE = [sys.executable, "-m", "bert_ds.data.prepare"]


@pytest.fixture
def hub(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("BERT_DS_HUB_MIRROR", str(root))
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub_parquet, "_RESOLVED", {})
    return root


def _jsonl(path: Path, records: int, sentences: int = 4) -> list[str]:
    texts = [article(i, sentences) for i in range(records)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(dict(id=i, title=f"T{i}", text=t)) + "\n" for i, t in enumerate(texts)))
    return texts


def _shards(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("shard-*.parquet"))}


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def test_a_hub_corpus_is_prepared_with_counts_that_match_a_direct_count(hub, tmp_path):
    texts = wikipedia_mirror(hub, articles=3000, files=3, row_group_size=50)
    out = tmp_path / "wikipedia"
    assert prepare_main([f"hf:{WIKI_ID}:{WIKI_CONFIG}", "--output", str(out), "--shard-size", "30KiB",
                         "--row-group-rows", "100"]) == 0
    manifest = _manifest(out)
    assert (manifest["hub_id"], manifest["config"], manifest["revision"], manifest["commit"]) == (WIKI_ID, WIKI_CONFIG, "main", "main")
    assert manifest["layout"] == "article" and manifest["columns"] == ["text", "id", "title"]
    assert manifest["command"].startswith("python -m bert_ds.data.prepare hf:wikimedia/wikipedia:20231101.en --output")
    assert manifest["expected_records"] == 6_407_814
    read = []
    for shard in manifest["shards"]:
        table = pq.read_table(out / shard["path"])
        metadata = pq.read_metadata(out / shard["path"])
        column = table.column("text").to_pylist()
        assert shard["records"] == len(column) and shard["row_groups"] == metadata.num_row_groups
        assert all(metadata.row_group(g).num_rows <= 100 for g in range(metadata.num_row_groups))
        assert shard["words"] == sum(len(t.split()) for t in column) and shard["characters"] == sum(map(len, column))
        assert shard["bytes"] == (out / shard["path"]).stat().st_size <= 30 * 1024 + 16 * 1024  # cut after the row group that passes 30 KiB
        assert table.column("title").to_pylist()[0].startswith("Title ")
        read += column
    assert read == texts  # the hub's order, every record once
    assert manifest["records"] == 3000 and manifest["words"] == sum(len(t.split()) for t in texts)
    assert len(manifest["shards"]) > 3 and not list(out.glob("*.partial")) and not (out / ".prepare").exists()
    # The folder as a source: its manifest's layout, weighed by its words, every record.
    [source] = parse_sources([f"wiki={out}@words"])
    assert source.weight == manifest["words"] and source.is_prepared
    check_sources([source])
    assert [r["text"] for r in source_epoch(source, 0, 0).iter_records()] != []
    assert sorted(r["text"] for r in source_epoch(source, 0, 0).iter_records()) == sorted(texts)


def test_bookcorpus_keeps_whole_runs_of_sentences_in_a_row_group(hub, tmp_path):
    bookcorpus_mirror(hub, sentences=4000, row_group_size=300)
    out = tmp_path / "bookcorpus"
    assert prepare_main([f"hf:{BOOKS_ID}@{BOOKS_REVISION}", "--output", str(out)]) == 0
    manifest = _manifest(out)
    assert manifest["layout"] == "sentences:256" and manifest["row_group_rows"] == 768
    assert manifest["config"] == "plain_text" and manifest["revision"] == BOOKS_REVISION
    metadata = pq.read_metadata(out / manifest["shards"][0]["path"])
    assert [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)][:2] == [768, 768]
    [source] = parse_sources([f"books={out}"])
    assert str(SourceReader(source, WordTokenizer(), DataConfig(), 0, 1, TextStats()).layout) == "sentences:256"


def test_num_proc_writes_the_same_bytes_and_a_finished_folder_is_left_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))
    for k in range(4):
        _jsonl(tmp_path / "in" / f"part-{k}.jsonl", 300)
    one, two = tmp_path / "one", tmp_path / "two"
    spec = str(tmp_path / "in" / "*.jsonl")
    assert prepare_main([spec, "--output", str(one), "--shard-size", "100KiB", "--row-group-rows", "100"]) == 0
    assert prepare_main([spec, "--output", str(two), "--shard-size", "100KiB", "--row-group-rows", "100", "--num-proc", "2"]) == 0
    assert _shards(one) == _shards(two) and len(_shards(one)) >= 4
    assert _manifest(one)["shards"] == _manifest(two)["shards"]
    assert _manifest(one)["columns"] == ["text", "id", "title"]
    before = _shards(one)
    assert prepare_main([spec, "--output", str(one)]) == 0
    assert "prepared already" in capsys.readouterr().err and _shards(one) == before


def test_killed_mid_shard_the_rerun_writes_the_bytes_of_an_uninterrupted_run(tmp_path):
    env = dict(os.environ, BERT_DS_CACHE=str(tmp_path / "cache"))
    source = tmp_path / "corpus.jsonl"
    _jsonl(source, 6000, sentences=8)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    args = ["--shard-size", "64KiB", "--row-group-rows", "50"]
    subprocess.run([*PREPARE, str(source), "--output", str(whole), *args], env=env, check=True, capture_output=True)
    # Killed once shards are being written: at least one complete, the next one partial or about to be.
    job = subprocess.Popen([*PREPARE, str(source), "--output", str(killed), *args], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list(killed.glob("shard-*.parquet"))) < 3 and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    job.send_signal(signal.SIGKILL)
    job.wait()
    assert job.returncode == -signal.SIGKILL, "the prepare finished before it could be killed: make the corpus larger"
    assert not (killed / "manifest.json").exists()
    # Half a folder is no source: the loader refuses it rather than read some shards.
    with pytest.raises(DataError, match="is still being prepared"):
        check_sources(parse_sources([f"x={killed}"]))
    other = subprocess.run([*PREPARE, str(source), "--output", str(killed), "--shard-size", "1MiB", "--row-group-rows", "50"],
                           env=env, capture_output=True, text=True)
    assert other.returncode == 2 and "was started with shard_bytes 65536, this run asks for 1048576" in other.stderr
    result = subprocess.run([*PREPARE, str(source), "--output", str(killed), *args], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert _shards(killed) == _shards(whole)
    strip = lambda m: {k: v for k, v in m.items() if k not in ("created", "command")}  # noqa: E731
    assert strip(_manifest(killed)) == strip(_manifest(whole))
    assert not list(killed.glob("*.partial"))


def test_bad_input_is_one_error_line_and_leaves_nothing_readable(hub, tmp_path):
    def run(*argv):
        result = subprocess.run([*PREPARE, *argv], capture_output=True, text=True, env=dict(os.environ))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        return lines[0]

    wikipedia_mirror(hub, articles=30, files=1)
    assert "the hub has no dataset 'nobody/nothing'" in run("hf:nobody/nothing", "--output", str(tmp_path / "a"))
    assert "has no revision 'v9' (revisions here: main)" in run(f"hf:{WIKI_ID}:{WIKI_CONFIG}@v9", "--output", str(tmp_path / "b"))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert "holds files that bert_ds.data.prepare did not write (notes.txt)" in run(
        f"hf:{WIKI_ID}:{WIKI_CONFIG}", "--output", str(foreign))
    assert (foreign / "notes.txt").read_text() == "mine" and len(list(foreign.iterdir())) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": null}\n')
    assert "bad.jsonl line 2 has a 'text' that is null" in run(str(bad), "--output", str(tmp_path / "c"))
    assert not (tmp_path / "c" / "manifest.json").exists()
    assert "prepare takes one source" in run("sample", "--output", str(tmp_path / "d"))
    done = tmp_path / "done"
    assert prepare_main([f"hf:{WIKI_ID}:{WIKI_CONFIG}", "--output", str(done)]) == 0
    assert f"holds a prepared 'hf:{WIKI_ID}:{WIKI_CONFIG}', not " in run(str(bad), "--output", str(done))


def test_a_truncated_or_changed_shard_is_named_at_start(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))
    _jsonl(tmp_path / "in.jsonl", 400)
    out = tmp_path / "prepared"
    assert prepare_main([str(tmp_path / "in.jsonl"), "--output", str(out), "--shard-size", "10KiB", "--row-group-rows", "50"]) == 0
    check_sources(parse_sources([f"w={out}"]))
    shard = out / _manifest(out)["shards"][1]["path"]
    data = shard.read_bytes()
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, one bit changed
    with pytest.raises(DataError, match=rf"shard {shard} does not match its sha256"):
        check_sources(parse_sources([f"w={out}"]))
    shard.write_bytes(data[:-100])
    with pytest.raises(DataError, match=rf"shard {shard} has {len(data) - 100:,} bytes, its manifest says {len(data):,}"):
        check_sources(parse_sources([f"w={out}"]))
    result = subprocess.run([sys.executable, "bert_ds/pretrain.py", "--dry-run", "--preset", "tiny", "--tokenizer",
                             "bert-base-uncased", "--data", f"w={out}"], capture_output=True, text=True,
                            cwd=Path(__file__).parents[1], env=dict(os.environ))
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("error: Data source 'w': shard ")


@pytest.mark.parametrize("shards", [8, 64])
def test_a_loader_shard_decodes_one_kth_of_a_prepared_corpus(tmp_path, monkeypatch, shards):
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))
    texts = _jsonl(tmp_path / "in.jsonl", 6400, sentences=2)
    out = tmp_path / "prepared"
    assert prepare_main([str(tmp_path / "in.jsonl"), "--output", str(out), "--row-group-rows", "10",
                         "--shard-size", "1MiB"]) == 0
    [source] = parse_sources([f"w={out}"])
    seen, decoded = Counter(), []
    for shard in range(shards):
        reader = SourceReader(source, WordTokenizer(), DataConfig(), shard, shards, TextStats())
        while (found := reader._next_local_unit()) is not None:
            seen.update(record["text"] for record in found[1])
        decoded.append(sum(f.records_read for f in reader._opened.values()))
    assert seen == Counter(texts)
    assert sum(decoded) == len(texts)  # no row group decoded by two shards
    assert max(decoded) <= 1.25 * len(texts) / shards


def test_the_plan_shows_words_epochs_and_the_mix_from_the_manifests(tmp_path, monkeypatch, sample_tokenizer):
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.data import plan_sources, words_ratio_note

    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))
    _jsonl(tmp_path / "books.jsonl", 100, sentences=20)
    _jsonl(tmp_path / "wiki.jsonl", 300, sentences=8)
    for name in ("books", "wiki"):
        assert prepare_main([str(tmp_path / f"{name}.jsonl"), "--output", str(tmp_path / name)]) == 0
    words = {name: _manifest(tmp_path / name)["words"] for name in ("books", "wiki")}
    run = parse_args(["--data", f"books={tmp_path / 'books'}@words", f"wiki={tmp_path / 'wiki'}@words"])
    plans = plan_sources(run, sample_tokenizer, shards=1, run_tokens=10_000_000)
    assert [p.share for p in plans] == pytest.approx([words["books"] / sum(words.values()), words["wiki"] / sum(words.values())])
    assert [p.words for p in plans] == [words["books"], words["wiki"]]
    for plan in plans:
        assert plan.tokens > plan.words and plan.epochs == pytest.approx(plan.share * 10_000_000 / plan.tokens)
        assert f"this run reads it ~{plan.epochs:,.2f} times" in plan.detail
    assert "BooksCorpus 800M : Wikipedia 2,500M" in words_ratio_note(plans)
    with pytest.raises(DataError, match="weight 'words' needs a folder made by python -m bert_ds.data.prepare"):
        parse_sources([f"b={tmp_path / 'books.jsonl'}@words"])
