"""WikiExtractor output read as it is: one record per `<doc>`, by number (data/records/index.py's
FileRecords), with its `id`, `url` and `title`.

WikiExtractor (the tool Google's, NVIDIA's and Megatron's BERT data recipes start from) writes
files named `wiki_00`, `wiki_01`, ... without an extension, in folders `AA/`, `AB/`, ...:

    <doc id="12" url="https://en.wikipedia.org/wiki?curid=12" title="Anarchism">
    Anarchism
                                      <- blank line
    Anarchism is a political philosophy ...      <- one paragraph per line
    Etymology and terminology.                   <- a section heading: a line ending in a period
    The term "anarchism" is ...
    </doc>

A file is recognised by its first non-blank line starting with `<doc ` (whatever its name), or
chosen with the layout `#wikiextractor`. A record's `text` is the document's lines after the title
line, which is dropped: it repeats the `title` field, and without it the text has the shape of the
hub's Wikipedia (`wikimedia/wikipedia`, whose text starts with the first paragraph), so a model sees
the same documents from either source. Every line stays its own paragraph (the `article` layout),
so a heading is its own sentence, never glued to the sentence after it.

The index scan (cached, data/records/index.py) counts the documents and keeps seek points, and
notes what is malformed, each with its file and line, for the start-up check to print once:
- a `<doc>` never closed: the document ends where the next `<doc ` starts, or at the end of the
  file (its text is kept);
- a `</doc>` outside any document, and text outside any document: skipped;
- binary bytes (a NUL byte, as in compressed output: `--compress` writes `.bz2`): the file is
  refused, naming the line.
"""

from __future__ import annotations

import html
import re
from typing import Iterator, Optional

from bert_ds.data.records.index import ScannedRecords, SeekPoints, index_files
from bert_ds.errors import DataError

DOC_START = b"<doc "
DOC_END = b"</doc>"
SNIFF_BYTES = 4096
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')


def is_wikiextractor(path: str) -> bool:
    """The file's first non-blank line starts with `<doc ` (reads at most its first 4 KiB)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return False
    return head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(DOC_START)


class _Problems:
    """What the scan found malformed: the first few of each kind with their line, and counts."""

    KEEP = 3

    def __init__(self):
        self.found: dict[str, list] = {}

    def add(self, kind: str, line: int) -> None:
        lines = self.found.setdefault(kind, [0, []])
        lines[0] += 1
        if len(lines[1]) < self.KEEP:
            lines[1].append(line)

    def as_list(self) -> list:
        return [[kind, count, lines] for kind, (count, lines) in self.found.items()]


_PROBLEM_TEXT = {
    "unclosed": "<doc> not closed before the next <doc> (ended there)",
    "unclosed_at_end": "<doc> not closed at the end of the file (kept to the end)",
    "stray_end": "</doc> outside any document (skipped)",
    "outside_text": "text outside any <doc> (skipped)",
}


def describe_problems(path: str, problems: list) -> list[str]:
    """One line per kind of problem the scan of `path` found: `PATH line N: what (K in all)`."""
    lines = []
    for kind, count, first_lines in problems:
        where = ", ".join(str(n) for n in first_lines)
        more = f" ({count:,} in all)" if count > len(first_lines) else ""
        lines.append(f"{path} line {where}: {_PROBLEM_TEXT[kind]}{more}")
    return lines


def _documents(handle, path: str, points: Optional[SeekPoints] = None,
               problems: Optional[_Problems] = None, first: int = 0, line_number: int = 0) -> Iterator[tuple[bytes, list[bytes]]]:
    """(header line, body lines) of each document from the handle's position, which is at the
    start of a line; the scan passes `points` and `problems`, a read passes neither."""
    problems = problems or _Problems()
    header, body, emitted, header_line = None, [], first, 0
    while True:
        position = handle.tell() if points is not None else 0
        line = handle.readline()
        if not line:
            break
        line_number += 1
        if b"\x00" in line:
            raise DataError(f"{path} line {line_number} holds binary bytes (NUL): not WikiExtractor text "
                            "(compressed output, e.g. wiki_00.bz2, must be decompressed first).")
        if line.startswith(DOC_START):
            if header is not None:
                problems.add("unclosed", header_line)
                yield header, body
                emitted += 1
            if points is not None and points.due(emitted):
                points.add(emitted, position, line_number - 1)
            header, body, header_line = line, [], line_number
        elif line.startswith(DOC_END) and not line[len(DOC_END):].strip():
            if header is None:
                problems.add("stray_end", line_number)
                continue
            yield header, body
            emitted += 1
            header, body = None, []
        elif header is not None:
            body.append(line)
        elif line.strip():
            problems.add("outside_text", line_number)
    if header is not None:
        problems.add("unclosed_at_end", header_line)
        yield header, body


def _scan(path: str) -> dict:
    points, problems = SeekPoints(), _Problems()
    with open(path, "rb") as handle:
        count = sum(1 for _ in _documents(handle, path, points, problems))
    return dict(count=count, points=points.points, stride=points.stride, problems=problems.as_list())


def index_wikiextractor_files(source_name: str, paths: list[str]) -> list[dict]:
    """The indexes of WikiExtractor files (built now where missing): count, seek points, problems."""
    return index_files(source_name, paths, "wikiextractor", _scan)


def _record(header: bytes, body: list[bytes]) -> dict:
    """A document's record: the `<doc>` attributes and its text without the title line."""
    attributes = {name: html.unescape(value) for name, value in _ATTRIBUTE.findall(header.decode("utf-8", "replace"))}
    lines = [line.decode("utf-8", "replace").rstrip("\r\n") for line in body]
    title = attributes.get("title", "")
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start < len(lines) and title and html.unescape(lines[start].strip()) == title.strip():
        start += 1  # the title line (escaped as in the header): it repeats the `title` field
    text = "\n".join(lines[start:]).strip("\n")
    return dict(id=attributes.get("id"), url=attributes.get("url"), title=title, text=text)


class WikiExtractorRecords(ScannedRecords):
    """One WikiExtractor file's documents by number, as records {id, url, title, text}."""

    index = staticmethod(index_wikiextractor_files)

    def _open(self):
        return open(self.path, "rb")

    def _items(self, handle, point: list[int]) -> Iterator[tuple[bytes, list[bytes]]]:
        return _documents(handle, self.path, first=point[0], line_number=point[2])

    def _record(self, item: tuple[bytes, list[bytes]]) -> tuple[dict, int]:
        header, body = item
        return _record(header, body), len(header) + sum(map(len, body))
