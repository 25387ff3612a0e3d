"""Corpora read as people have them: WikiExtractor output (data/records/wikiextractor.py) and
Project Gutenberg books (data/text/gutenberg.py), through --data, prepare, the start-up data
check and the launch plan; their malformed cases as one line naming file and line. Fixtures in
tests/fixtures/corpus/ (wikiextractor/AA/wiki_00: no extension; gutenberg/*.txt: CRLF)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bert_ds.config import DataConfig
from bert_ds.data.prepare.command import main as prepare_main
from bert_ds.data.sources import (DataError, check_sources, document_stream, iter_document_texts, local_files,
                                  parse_sources, record_layout, source_epoch)
from bert_ds.data.stream import SourceReader
from bert_ds.data.text.cleaning import TextStats, split_sentences
from bert_ds.data.text.gutenberg import strip_gutenberg

FIXTURES = Path(__file__).parent / "fixtures" / "corpus"
WIKI = FIXTURES / "wikiextractor"
BOOKS = FIXTURES / "gutenberg"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_DS_CACHE", str(tmp_path / "cache"))


def _records(spec: str) -> list[dict]:
    source = parse_sources([spec])[0]
    check_sources([source])
    return list(document_stream(source, seed=0, epoch=0))


def test_a_wikiextractor_folder_gives_one_record_per_doc_with_its_id_and_title():
    records = sorted(_records(f"wiki={WIKI}"), key=lambda r: int(r["id"]))
    assert [r["id"] for r in records] == ["12", "39", "290"]
    assert [r["title"] for r in records] == ["Lighthouse", "Beekeeping & honey", "Glacier"]  # &amp; unescaped
    assert records[0]["url"] == "https://en.wikipedia.org/wiki?curid=12"
    # The title line is dropped (it repeats the title field); the text starts with the first paragraph.
    assert records[0]["text"].startswith("A lighthouse is a tower")
    assert records[1]["text"].startswith("Beekeeping is the maintenance")
    assert "</doc>" not in records[0]["text"] and "<doc" not in records[2]["text"]
    assert str(record_layout(parse_sources([f"wiki={WIKI}"])[0])) == "wikiextractor"


def test_headings_are_sentences_of_their_own():
    text = _records(f"wiki={WIKI / 'AA' / 'wiki_00'}")[0]["text"]
    layout = record_layout(parse_sources([f"wiki={WIKI / 'AA' / 'wiki_00'}"])[0])
    sentences = split_sentences(text, TextStats(), paragraphs=layout.paragraphs)
    assert "History." in sentences and "Construction." in sentences
    assert not any(s.startswith("History. ") or s.endswith(" History.") for s in sentences)


def test_any_name_or_glob_is_recognised_by_its_doc_lines_and_the_layout_can_be_chosen(tmp_path):
    renamed = tmp_path / "in"
    renamed.mkdir()
    shutil.copy(WIKI / "AA" / "wiki_00", renamed / "part.txt")  # a .txt that starts with <doc
    shutil.copy(WIKI / "AA" / "wiki_01", renamed / "enwiki-2015.part")  # an unknown extension
    (renamed / "README").write_text("Notes about this dump.\n")  # no <doc: not part of the folder
    assert len(_records(f"w={renamed}")) == 3
    assert len(local_files(parse_sources([f"w={renamed}"])[0])) == 2
    assert len(_records(f"w={WIKI}/*/wiki_*")) == 3
    assert len(_records(f"w={renamed / 'part.txt'}#wikiextractor")) == 2
    with pytest.raises(DataError, match=r"unsupported file type \['no extension'\].*README"):
        local_files(parse_sources([f"w={renamed / 'README'}"])[0])


def test_reading_from_any_record_equals_the_whole_read(tmp_path):
    doc = '<doc id="{i}" url="u{i}" title="T{i}">\nT{i}\n\nParagraph {i} of the article. It has two sentences.\n</doc>\n'
    path = tmp_path / "wiki_00"
    path.write_text("".join(doc.format(i=i) for i in range(300)))
    source = parse_sources([f"w={path}"])[0]
    check_sources([source])
    whole = list(document_stream(source, 0, 0))
    assert [r["id"] for r in whole] == [str(i) for i in range(300)]
    epoch = source_epoch(source, 0, 0)
    for start in (0, 1, 137, 299):
        assert epoch.read(start, start + 2) == whole[start:start + 2]


def test_malformed_wikiextractor_files_are_warned_about_by_file_and_line(capsys):
    path = FIXTURES / "wikiextractor-malformed" / "wiki_00"
    records = _records(f"w={path}")
    err = capsys.readouterr().err
    # Nothing is lost: the unclosed documents end at the next <doc> and at the end of the file.
    assert [r["title"] for r in records] == ["Harbour", "Canal", "Bridge"]
    assert records[0]["text"] == "A harbour is a sheltered body of water where ships can be docked. Its breakwaters protect the ships from waves."
    assert records[2]["text"].endswith("the distance between two supports.")
    assert f"warning: data source 'w': {path} line 1: <doc> not closed before the next <doc>" in err
    assert f"{path} line 10: </doc> outside any document (skipped)" in err
    assert f"{path} line 11: text outside any <doc> (skipped)" in err
    assert f"{path} line 12: <doc> not closed at the end of the file" in err
    assert len(err.strip().splitlines()) == 4


def test_binary_bytes_and_a_file_without_documents_are_one_error_naming_the_file(tmp_path):
    binary = tmp_path / "bin" / "wiki_00"
    binary.parent.mkdir()
    binary.write_bytes(b'<doc id="1" url="u" title="T">\nT\n\nText.\nBZh91AY\x00\x13\x88\n</doc>\n')
    with pytest.raises(DataError, match=rf"{binary} line 5 holds binary bytes \(NUL\)"):
        _records(f"w={binary.parent}")
    empty = tmp_path / "empty.txt"
    empty.write_text("Plain text, no documents.\n")
    with pytest.raises(DataError, match="hold no <doc> document"):
        check_sources(parse_sources([f"w={empty}#wikiextractor"]))


def test_gutenberg_books_lose_their_licence_header_and_footer():
    texts = {text.split("\n", 1)[0]: text for text in iter_document_texts([f"books={BOOKS}"])}
    assert sorted(texts) == ["A SHORT WALK", "CHAPTER I", "THE MILLER'S YEAR"]
    modern, old = texts["CHAPTER I"], texts["THE MILLER'S YEAR"]
    for text in (modern, old):
        assert "Gutenberg" not in text and "GUTENBERG" not in text and "SMALL PRINT" not in text.upper()
        assert "\r" not in text
    assert "Produced by" not in modern
    assert modern.rstrip().endswith("to fill the lamps that had burned low.")
    assert old.rstrip().endswith("while the farmers waited for their grain.")
    # A file without markers is read whole, never cut.
    raw = (BOOKS / "walk-no-markers.txt").read_bytes().decode().replace("\r\n", "\n")
    assert texts["A SHORT WALK"] == raw


@pytest.mark.parametrize("start, end", [
    ("*** START OF THIS PROJECT GUTENBERG EBOOK X ***", "*** END OF THIS PROJECT GUTENBERG EBOOK X ***"),
    ("***START OF THE PROJECT GUTENBERG EBOOK X***", "***END OF THE PROJECT GUTENBERG EBOOK X***"),
    ("*** START OF THE PROJECT GUTENBERG EBOOK, X ***", "End of the Project Gutenberg EBook of X, by Y"),
    ("*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*", "End of Project Gutenberg's X, by Y"),
    ('["Small Print" V.12.08.93]', "End of this Etext of The Complete Works of William Shakespeare"),
])
def test_every_marker_spelling_is_cut(start, end):
    book = "Chapter 1\n\nThe story, which mentions Project Gutenberg once, begins.\n"
    for newline in ("\n", "\r\n"):
        text = f"Licence header.\n{start}\n\n{book}\n{end}\nLicence footer.\n".replace("\n", newline)
        stripped, had = strip_gutenberg(text)
        assert had and stripped.strip() == book.strip().replace("\n", newline)


def test_text_without_markers_is_never_cut():
    text = "It was the end of the Project, said Gutenberg.\nThe end of this etext is near.\n"
    assert strip_gutenberg(text) == (text, False)


def test_prepare_reads_both_formats_keeps_id_and_title_and_drops_the_licence(tmp_path, capsys):
    wiki, books = tmp_path / "wiki", tmp_path / "books"
    assert prepare_main([f"wiki={WIKI}", "--output", str(wiki), "--num-proc", "2"]) == 0
    assert prepare_main([f"books={BOOKS}", "--output", str(books)]) == 0
    manifest = json.loads((wiki / "manifest.json").read_text())
    assert manifest["layout"] == "article" and manifest["records"] == 3
    rows = [row for shard in sorted(wiki.glob("shard-*.parquet")) for row in pq.read_table(shard).to_pylist()]
    assert sorted((row["id"], row["title"]) for row in rows) == [("12", "Lighthouse"), ("290", "Glacier"),
                                                                ("39", "Beekeeping & honey")]
    book_manifest = json.loads((books / "manifest.json").read_text())
    assert book_manifest["gutenberg_licence"] == "removed" and book_manifest["layout"] == "book"
    book_rows = [row["text"] for shard in sorted(books.glob("shard-*.parquet")) for row in pq.read_table(shard).to_pylist()]
    assert len(book_rows) == 3 and not any("Gutenberg" in text or "SMALL PRINT" in text for text in book_rows)
    # Trained from the prepared folders, the documents are the ones read from the files directly.
    for spec, folder in ((f"wiki={WIKI}", wiki), (f"books={BOOKS}", books)):
        direct = sorted(_document_texts(spec))
        assert sorted(_document_texts(f"{spec.split('=')[0]}={folder}")) == direct


def _document_texts(spec: str) -> list[str]:
    return list(iter_document_texts([spec]))


def test_the_data_check_and_plan_name_the_formats(sample_tokenizer):
    from bert_ds.data.tokenizer.vocab_check import sample_source

    books = sample_source(parse_sources([f"books={BOOKS}"])[0], sample_tokenizer, seed=0)
    assert books.gutenberg_licences == 2 and books.documents == 3
    assert "Project Gutenberg licence header/footer cut from 2" in books.describe()
    wiki = sample_source(parse_sources([f"wiki={WIKI}"])[0], sample_tokenizer, seed=0)
    assert wiki.layout == "wikiextractor" and wiki.documents == 3 and wiki.sentences >= 15
    reader = SourceReader(parse_sources([f"wiki={WIKI}"])[0], sample_tokenizer, DataConfig(), 0, 1, TextStats())
    assert len(list(reader.first_epoch_documents())) == 3


def test_the_launch_plan_reads_both_formats_directly(sample_tokenizer):
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.data import plan_sources

    run = parse_args(["--data", f"books={BOOKS}@800", f"wiki={WIKI}@2500"])
    books, wiki = plan_sources(run, sample_tokenizer, shards=1, run_tokens=1_000_000)
    assert books.detail.startswith("3 file(s)") and books.detail.endswith("layout book")
    assert wiki.detail.startswith("2 file(s)") and wiki.detail.endswith("layout wikiextractor")


def test_a_credit_never_takes_the_book_with_it():
    """Regression: the sample's botchan.txt separates paragraphs by lines of spaces, and the
    credit paragraph after the start marker ("Produced by ...") ran on to the end of the book,
    which was then dropped whole. A wrapped start marker's second line is cut with it."""
    book = "\n".join(f"Line {i} of the story, with words." for i in range(200))
    text = ("Header.\n*** START OF THIS PROJECT GUTENBERG EBOOK A VERY LONG\nTITLE ***\n\n"
            "Produced by a volunteer.\n   \n" + book.replace("\n", "\n   \n", 3) + "\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\n")
    stripped, had = strip_gutenberg(text)
    assert had and stripped.strip().startswith("Line 0 of the story") and stripped.strip().endswith("Line 199 of the story, with words.")
    botchan = Path(__file__).parents[1] / "bert_ds" / "data" / "sample" / "books" / "botchan.txt"
    text = botchan.read_text(encoding="utf-8").replace("\r\n", "\n")
    assert len(strip_gutenberg(text)[0]) > 0.9 * len(text)
