"""How a source's records become documents of sentences: the record layout.

NSP needs documents (IsNext pairs are consecutive sentences of one document) and long documents
(a 512-token sequence is packed from consecutive sentences). Real corpora store them differently,
so every source has a layout, chosen from its kind or set on its spec: `NAME=LOCATION@WEIGHT#LAYOUT`.

    book         one record (or .txt file) per document; blank lines end paragraphs and single
                 line breaks are hard wraps, joined (Project Gutenberg books, the built-in sample)
    article      one record per document; every line break ends a paragraph or a heading (the
                 hub's Wikipedia: `id, url, title, text`, headings and paragraphs one per line)
    sentences:N  one record per sentence; N consecutive records form one document (the hub's
                 BookCorpus, ~74M one-sentence records with no book id). Default N: 256
    lines        one sentence per line, a blank line between documents (the input format of
                 Google's create_pretraining_data.py); in a record, its lines are its sentences
    wikiextractor  WikiExtractor output: one document per `<doc>` of files such as `wiki_00`
                 (data/records/wikiextractor.py), then read as `article`; a file whose first line
                 starts with `<doc ` gets it by default, whatever its name

Why fixed runs of N records for BookCorpus: its records are the books' sentences in order, with no
mark where a book ends, so a run of consecutive records is real continuous text except where it
crosses into the next book. With ~11,000 books of ~6,700 sentences each, a run of 256 sentences
crosses a book boundary with probability about 255/6,700 ≈ 4%, and then only the one pair that
straddles the boundary is a false IsNext: about 0.1% of IsNext pairs. A run of 256 sentences is
~4,000 tokens, room for ~30 sequences of 128 or ~8 of 512. A boundary rule (a new book at a
copyright line or a title) would catch some boundaries but misfire inside books; runs are
predictable and their error is bounded. Shards split a grouped source by run, never inside one.

Defaults: a hub id containing "bookcorpus" reads as `sentences:256`, other hub datasets and
.jsonl/.json/.parquet files as `article`, .txt files as `book`, WikiExtractor files as `wikiextractor`.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_GROUP = 256
"""Records per document of the `sentences` layout (see the module docstring for why)."""

# layout -> how split_sentences cuts a document's text into paragraphs (data/text/cleaning.py)
_PARAGRAPHS = {"book": "blank_line", "article": "line", "sentences": "sentence_per_line", "lines": "sentence_per_line",
               "wikiextractor": "line"}


class LayoutError(ValueError):
    """A layout text that names no layout; sources.py turns it into a DataError naming the source."""


@dataclass(frozen=True)
class RecordLayout:
    name: str
    group: int = 1
    """Consecutive records that form one document (> 1 only for `sentences`)."""

    @property
    def paragraphs(self) -> str:
        """The paragraph mode of data/text/cleaning.py's split_sentences."""
        return _PARAGRAPHS[self.name]

    @property
    def strips_licence(self) -> bool:
        """Documents are books whose Project Gutenberg header and footer are cut (data/text/gutenberg.py)."""
        return self.name == "book"

    @property
    def stored(self) -> str:
        """The layout of this source's records once prepared into Parquet: a WikiExtractor
        document is an article record {id, url, title, text}."""
        return "article" if self.name == "wikiextractor" else str(self)

    @property
    def blank_line_documents(self) -> bool:
        """.txt files hold several documents separated by blank lines."""
        return self.name == "lines"

    def __str__(self) -> str:
        return f"sentences:{self.group}" if self.name == "sentences" else self.name


def parse_layout(text: str) -> RecordLayout:
    """`book`, `article`, `lines`, `sentences` or `sentences:N` -> RecordLayout."""
    name, _, count = text.partition(":")
    if name not in _PARAGRAPHS:
        raise LayoutError(f"unknown layout {text!r}; choose one of book, article, sentences[:N], lines, wikiextractor")
    if count and name != "sentences":
        raise LayoutError(f"layout {name!r} takes no record count (only sentences:N does), got {text!r}")
    if name != "sentences":
        return RecordLayout(name)
    try:
        group = int(count) if count else DEFAULT_GROUP
    except ValueError:
        raise LayoutError(f"layout {text!r}: the record count {count!r} is not a whole number") from None
    if group < 1:
        raise LayoutError(f"layout {text!r}: the record count must be at least 1")
    return RecordLayout(name, group)


def default_layout(location: str, file_format: str | None) -> RecordLayout:
    """The layout a source gets when its spec names none; `file_format` is "text", "json",
    "parquet" or "wikiextractor" for local files, None for a hub dataset."""
    if file_format is None:
        hub_id = location[3:].split(":")[0].lower()
        return RecordLayout("sentences", DEFAULT_GROUP) if "bookcorpus" in hub_id else RecordLayout("article")
    if file_format == "wikiextractor":
        return RecordLayout("wikiextractor")
    return RecordLayout("book") if file_format == "text" else RecordLayout("article")
