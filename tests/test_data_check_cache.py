"""The start-up data check is read once per state of a local corpus (bert_ds/data/tokenizer/
data_check_cache.py): a second start gets the same report without reading the source, and any
change of what the report depends on (a file, the tokenizer's content or casing, the reading code)
reads it again."""

import json
import os
import shutil
from pathlib import Path

import pytest

from bert_ds.data import sources
from bert_ds.data.tokenizer import data_check_cache
from bert_ds.data.tokenizer.load import load_tokenizer
from bert_ds.data.tokenizer.vocab_check import sample_source
from bert_ds.data.tokenizer.wordpiece import VOCAB_DIR


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """Two books of the built-in sample in a folder of their own, and a fresh cache."""
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))
    books = tmp_path / "books"
    books.mkdir()
    for book in sorted((sources.SAMPLE_DIR / "books").glob("*.txt"))[:2]:
        shutil.copy(book, books / book.name)
    return sources.DataSource("books", str(books / "*.txt"))


@pytest.fixture
def reads(monkeypatch):
    """Every time the check really reads a source."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0].name)
        return sample_source(*args, **kwargs)

    monkeypatch.setattr(data_check_cache, "sample_source", counted)
    return calls


def test_a_second_start_gets_the_same_report_without_reading(corpus, reads):
    tokenizer = load_tokenizer("bert-base-uncased")
    first = data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    again = data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    assert reads == ["books"] and again == first == sample_source(corpus, tokenizer, 1)
    assert first.documents == 2 and first.tokens > 1000
    data_check_cache.checked_sample(corpus, tokenizer, seed=2)  # another seed is another check
    assert len(reads) == 2


def test_a_changed_file_is_read_again(corpus, reads):
    tokenizer = load_tokenizer("bert-base-uncased")
    before = data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    book = sorted(sources.local_files(corpus))[0]
    with open(book, "w", encoding="utf-8") as out:  # the same name, other text
        out.write("Short. Only three sentences here. Nothing more.\n")
    after = data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    assert len(reads) == 2 and after.tokens < before.tokens
    os.utime(book, ns=(0, 0))  # the same text with another modification time: read again too
    data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    assert len(reads) == 3


def test_the_tokenizers_content_and_casing_key_it_not_its_path(corpus, reads, tmp_path):
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    shutil.copy(VOCAB_DIR / "bert-base-uncased.txt", folder / "vocab.txt")
    uncased = data_check_cache.checked_sample(corpus, load_tokenizer(str(folder / "vocab.txt"), lowercase=True), seed=1)
    cased = data_check_cache.checked_sample(corpus, load_tokenizer(str(folder / "vocab.txt"), lowercase=False), seed=1)
    assert len(reads) == 2 and cased.unk_tokens > uncased.unk_tokens  # capitals are [UNK] in an uncased vocabulary
    shutil.copy(VOCAB_DIR / "bert-base-cased.txt", folder / "vocab.txt")  # trained again into the same folder
    data_check_cache.checked_sample(corpus, load_tokenizer(str(folder / "vocab.txt"), lowercase=False), seed=1)
    assert len(reads) == 3


def test_a_change_of_the_reading_code_reads_again(corpus, reads, tmp_path, monkeypatch):
    import bert_ds.config
    import bert_ds.data

    assert data_check_cache.READING_CODE == (Path(bert_ds.data.__file__).parent, Path(bert_ds.config.__file__))
    code = tmp_path / "data_package"
    code.mkdir()
    (code / "cleaning.py").write_text("RULE = 1\n")
    monkeypatch.setattr(data_check_cache, "READING_CODE", (code, tmp_path / "config.py"))
    (tmp_path / "config.py").write_text("DEFAULT = 1\n")
    tokenizer = load_tokenizer("bert-base-uncased")
    data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    (code / "cleaning.py").write_text("RULE = 22\n")
    data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    (tmp_path / "config.py").write_text("DEFAULT = 22\n")
    data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    assert len(reads) == 3
    monkeypatch.setattr(data_check_cache, "READING_LIBRARIES", ("sentencepiece", "no-such-library"))
    data_check_cache.checked_sample(corpus, tokenizer, seed=1)  # another library version: read again
    assert len(reads) == 4


def test_txt_documents_reach_the_check_and_key_it(corpus, reads, tmp_path):
    tokenizer = load_tokenizer("bert-base-uncased")
    whole = data_check_cache.checked_sample(corpus, tokenizer, seed=1, txt_documents="file")
    paragraphs = data_check_cache.checked_sample(corpus, tokenizer, seed=1, txt_documents="blank_line")
    assert len(reads) == 2 and whole.documents == 2 and paragraphs.documents > 2  # a book's paragraphs are documents
    # The run's --txt-documents reaches the check (it once read each .txt whole whatever the option).
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.resolve import sample_sources

    run = parse_args(["--data", f"books={corpus.location}", "--txt-documents", "blank_line", "--tokenizer", "bert-base-uncased",
                     "--seed", "1"])
    assert sample_sources(run, tokenizer) == [paragraphs]


def test_a_damaged_entry_is_checked_again(corpus, reads):
    tokenizer = load_tokenizer("bert-base-uncased")
    first = data_check_cache.checked_sample(corpus, tokenizer, seed=1)
    entry = data_check_cache.cache_entry(corpus, tokenizer, 1, "punkt")
    for damage in ('{"name": "books", "documents": 2', '{"name": "books", "documents": "2"}', "[]"):
        entry.write_text(damage)
        assert data_check_cache.checked_sample(corpus, tokenizer, seed=1) == first
    assert len(reads) == 4 and json.loads(entry.read_text())["documents"] == 2


def test_hub_sources_are_read_every_time_and_an_unwritable_cache_only_costs_time(corpus, reads, tmp_path, monkeypatch):
    hub = sources.DataSource("wiki", "hf:some/dataset")
    monkeypatch.setattr(data_check_cache, "sample_source", lambda source, *a, **k: reads.append(source.name) or "read")
    assert data_check_cache.checked_sample(hub, load_tokenizer("bert-base-uncased"), seed=1) == "read"
    assert data_check_cache.checked_sample(hub, load_tokenizer("bert-base-uncased"), seed=1) == "read"
    assert reads == ["wiki", "wiki"]
    monkeypatch.undo()
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("BERT_DS_CACHE", str(blocked))
    sample = data_check_cache.checked_sample(corpus, load_tokenizer("bert-base-uncased"), seed=1)
    assert sample.documents == 2


def test_an_empty_bert_ds_cache_is_the_default_folder_not_the_current_one(monkeypatch, tmp_path):
    """BERT_DS_CACHE= (empty, e.g. a shell substitution that found nothing) would be Path(""), the
    current folder: a checkout filled with cache files. Empty counts as unset."""
    from bert_ds.runtime.cache import cache_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("BERT_DS_CACHE", "")
    assert cache_dir() == tmp_path / ".cache" / "bert_ds"
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
