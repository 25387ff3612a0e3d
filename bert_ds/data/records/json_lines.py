"""A local JSON source's records by number (data/records/index.py's FileRecords for .jsonl/.json),
and the check that every record of it is usable, made once per file.

The index scan parses every record, a block of lines per `json.loads` call, and refuses the file
at its first record that is not a JSON object with a string `text`, naming the file and line. So a
bad line anywhere in a corpus stops the run at start-up (sources.check_sources builds the
indexes), not hours later in a loader worker, and a restart checks nothing again: it reads the
cached index (its cost per GiB: docs/data.md, from benchmarks/corpus_check.py).

Records are what the `datasets` JSON reader yields for the same file: JSON Lines skip blank lines
and, as pyarrow does, also end a line at a lone CR; a .json file holding one array is its elements
(read whole: it cannot be seeked into).
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import gc
import itertools
import json
import os
import re
import secrets
from typing import Optional

import numpy as np

from bert_ds.data.records.index import FileRecords, SeekPoints, chunk_size, index_files
from bert_ds.errors import DataError

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(record: dict) -> dict:
    """JSON may escape a lone surrogate (\\ud800), which no UTF-8 text can hold: it becomes U+FFFD,
    as an undecodable byte of a .txt file does, and cleaning counts it."""
    if isinstance(record.get("text"), str):
        record["text"] = _LONE_SURROGATE.sub("\ufffd", record["text"])
    return record


def _line_records(line: bytes) -> list[bytes]:
    """The non-blank records of one `\\n`-ended line; a lone CR also ends a record (pyarrow)."""
    pieces = line.split(b"\r") if b"\r" in line else [line]
    return [piece for piece in pieces if piece.strip()]


def _parse(raw: bytes) -> dict:
    """One line's record, or a ValueError saying what is wrong with it (without where)."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        where = f"column {error.colno}" if error.lineno == 1 else "at the end of the line"
        raise ValueError(f"is not valid JSON ({error.msg}, {where})") from None
    except ValueError as error:  # bytes that are not UTF-8
        raise ValueError(f"is not valid JSON ({error})") from None
    except RecursionError:
        raise ValueError("is JSON nested too deeply to read") from None
    return _usable(value)


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def _usable(value) -> dict:
    """`value` when it is a record with a string `text`, else a ValueError saying why not."""
    if not isinstance(value, dict):
        kind = "null" if value is None else _JSON_KINDS.get(type(value), type(value).__name__)
        raise ValueError(f"is {kind}, not a JSON object with a 'text' field")
    text = value.get("text")
    if not isinstance(text, str):
        kind = "null" if text is None else _JSON_KINDS.get(type(text), "an object")
        problem = f"has a 'text' that is {kind}, not a string" if "text" in value else "has no 'text' field"
        raise ValueError(f"{problem} (fields: {sorted(value)[:10]})")
    return value


def _scan_json_lines(path: str) -> dict:
    """Record count and seek points of a JSON file, every record checked (a DataError naming the
    file and line of the first unusable one)."""
    with open(path, "rb") as handle:
        head = handle.read(64).lstrip()
        if head.removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"["):
            records = _json_array(path)
            for position, value in enumerate(records):
                try:
                    _usable(value)
                except ValueError as problem:
                    raise DataError(f"{path} record {position} of its array {problem}.") from None
            return dict(array=True, count=len(records), points=[], stride=1)
        handle.seek(0)
        points, record, line_number, position = SeekPoints(), 0, 0, 0
        nonce = secrets.token_hex(16)
        while True:
            lines = handle.readlines(_SCAN_BLOCK)  # whole lines
            if not lines:
                break
            records, counts = _block_records(lines, first=not line_number)
            with _no_garbage_collection():  # millions of new dicts, none of them cyclic
                _check_block(path, line_number, lines, records, nonce)
            lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
            _add_points(points, counts, lengths, record, position, line_number)
            record += len(records)
            position += int(lengths.sum())
            line_number += len(lines)
    return dict(array=False, count=record, points=points.points, stride=points.stride)


@contextlib.contextmanager
def _no_garbage_collection():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _block_records(lines: list[bytes], first: bool) -> tuple[list[bytes], np.ndarray]:
    """A block's records (`_line_records` of each line; a file's BOM is not part of its first
    record) and each line's count of them. Per-line work stays in C calls where it can."""
    block = b"".join(lines)
    if block.count(b"\r") != block.count(b"\r\n"):  # a lone CR ends a record inside a line
        pieces = [_line_records(line) for line in lines]
        counts = np.fromiter(map(len, pieces), dtype=np.int64, count=len(lines))
        records = [raw for found in pieces for raw in found]
    else:  # a line holds at most one record (a CR before its LF is whitespace): the fast path
        stripped = list(map(bytes.strip, lines))
        counts = np.fromiter(map(bool, stripped), dtype=np.int64, count=len(lines))
        records = list(itertools.compress(lines, stripped))
    if first:
        head = _line_records(lines[0].removeprefix(codecs.BOM_UTF8))
        records[: counts[0]] = head
        counts[0] = len(head)
    return records, counts


def _add_points(points: SeekPoints, counts: np.ndarray, lengths: np.ndarray, record: int, position: int,
                line_number: int) -> None:
    """The seek points due in a block of lines (`counts` records and `lengths` bytes each)
    starting at `record`, byte `position`, after line `line_number`: a point is a line's start
    where its first record is due (SeekPoints.due). When every line holds at most one record, the
    due lines are found in bulk."""
    starts = np.cumsum(counts) - counts + record  # record number at each line's start
    offsets = np.cumsum(lengths) - lengths + position  # each line's byte offset
    with_records = np.flatnonzero(counts)
    first_records = starts[with_records]
    consecutive = bool(len(first_records)) and int(first_records[-1] - first_records[0]) == len(first_records) - 1
    unseen = 0  # lines (of with_records) before this one were considered, as the per-line scan does once
    while True:
        wanted = points.points[-1][0] + points.stride if points.points else record
        k = max(int(np.searchsorted(first_records, wanted)), unseen)
        if k == len(with_records):
            return
        if not consecutive:
            line = int(with_records[k])
            points.add(int(starts[line]), int(offsets[line]), line_number + line + 1)
            unseen = k + 1
            continue
        # Records are consecutive over these lines, so the due ones are every stride-th from k, up
        # to the one whose addition halves the points (and doubles the stride).
        stride = points.stride
        due = with_records[k::stride][: points.room()]
        points.extend(np.stack([starts[due], offsets[due], due + line_number + 1], axis=1).tolist())
        unseen = k + stride * (len(due) - 1) + 1


_SCAN_BLOCK = 1 << 24
"""Bytes of whole lines the scan checks at once."""


def _check_block(path: str, lines_before: int, lines: list[bytes], records: list[bytes], nonce: str) -> None:
    """A DataError for the first unusable record of a block of lines. The block's records are
    parsed as one JSON array in one call (~4x faster than a call per record for one-sentence
    records), a string `nonce` between each two: the parse counts only when every nonce stands
    alone between two objects, so each record was one whole JSON value (a line that is only part
    of one and a line holding two cannot make up for each other). Only a block that fails is
    parsed line by line, to name the line."""
    if not records:
        return
    separator = b',"' + nonce.encode() + b'",'
    try:
        values = json.loads(b"[" + separator.join(records) + b"]")
        if (len(values) == 2 * len(records) - 1 and values[1::2].count(nonce) == len(records) - 1
                and all(type(v) is dict and type(v.get("text")) is str for v in values[0::2])):
            return
    except (ValueError, RecursionError):
        pass
    for number, line in enumerate(lines, lines_before + 1):
        for raw in _line_records(line.removeprefix(codecs.BOM_UTF8) if number == 1 else line):
            try:
                _parse(raw)
            except ValueError as problem:
                raise DataError(f"{path} line {number} {problem}.") from None
    # Every line parsed on its own: the block failed as a whole only for a reason that does not
    # matter record by record (a BOM starting a later line, as concatenated files have).


def _json_array(path: str) -> list:
    with open(path, "rb") as handle:
        content = handle.read().removeprefix(codecs.BOM_UTF8)
    try:
        records = json.loads(content)
    except ValueError as error:
        raise DataError(f"{path} is not valid JSON: {error}") from None
    except RecursionError:
        raise DataError(f"{path} is JSON nested too deeply to read") from None
    if not isinstance(records, list):
        raise DataError(f"{path} holds one JSON value, not records (one object per line, or an array of them)")
    return records


def check_json_files(source_name: str, paths: list[str]) -> int:
    """Index (and so check) every file of a JSON source, or read the indexes cached by an earlier
    start (record_index.index_files); the source's record count."""
    return sum(index["count"] for index in index_files(source_name, paths, "jsonl", _scan_json_lines))


class JsonLinesRecords(FileRecords):
    def __init__(self, source_name: str, path: str, group: int):
        super().__init__(source_name, path, group)
        index = index_files(source_name, [path], "jsonl", _scan_json_lines)[0]
        self.count, self.array = index["count"], index["array"]
        self._points = index["points"]
        self._point_records = [point[0] for point in self._points]
        self.chunk_starts = self._chunks([0], chunk_size(self.count, group)) if self.count else []
        self._handle = None
        self._next = None  # (record number, line number) the open handle stands at
        self._pending: list[tuple[bytes, int]] = []  # records of a line read past
        self._array: Optional[list] = None

    def _record(self, raw: bytes, line: int) -> dict:
        try:
            return _without_lone_surrogates(_parse(raw))
        except ValueError as problem:  # the scan checked it: the file changed since
            raise self._error(f"line {line} {problem}.") from None

    def _seek(self, start: int) -> None:
        if self._handle is None:
            self._handle = open(self.path, "rb")
        point = self._points[bisect.bisect_right(self._point_records, start) - 1]
        self._handle.seek(point[1])
        self._next, self._pending = (point[0], point[2] - 1), []

    def _read_line(self) -> list[tuple[bytes, int]]:
        line = self._handle.readline()
        if not line:
            raise self._error(f"ended before record {self._next[0]}: it changed while being read")
        self.bytes_read += len(line)
        number = self._next[1] + 1
        if number == 1:
            line = line.removeprefix(codecs.BOM_UTF8)
        self._next = (self._next[0], number)
        return [(raw, number) for raw in _line_records(line)]

    def read(self, start: int, stop: int) -> list[dict]:
        if self.array:
            if self._array is None:
                self._array = _json_array(self.path)
                self.bytes_read += os.path.getsize(self.path)
            self.records_read += stop - start
            return [_without_lone_surrogates(value) for value in self._array[start:stop]]
        if self._next is None or self._next[0] != start:
            self._seek(start)
        records = []
        while self._next[0] < stop:
            if not self._pending:
                self._pending = self._read_line()
                continue
            raw, line = self._pending.pop(0)
            if self._next[0] >= start:
                records.append(self._record(raw, line))
                self.records_read += 1
            self._next = (self._next[0] + 1, self._next[1])
        return records

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._handle, self._next, self._pending, self._array = None, None, [], None
