"""Random access to a local source's records, so a loader shard reads only the chunks it keeps.

An epoch of a local source is its files in the epoch's seeded order, each file's records in file
order, so record r of the epoch is one fixed record of one fixed file. This module finds record r
without reading what comes before it, from cheap metadata:

    .parquet      row counts of the row groups, from the footers (no data read)
    .jsonl/.json  byte offsets of evenly spaced lines, from one scan of the file that also checks
                  every record (data/records/json_lines.py), cached
    .txt (book)   one record per file
    .txt (lines)  positions of evenly spaced blank-line-separated documents, one scan, cached

Scans are cached under BERT_DS_CACHE/record-index, keyed by the file's path, size and mtime, and
built by one process while the others wait (bert_ds/runtime/cache.py); a point is kept every S records,
S doubling so that a file keeps at most 65,536 points (reading from record r skips at most S-1
records, about 1/65,536 of the file, unparsed).

Chunks are the unit by which shards divide a source (data/stream.py: chunk j of an epoch belongs
to shard j mod K). A chunk never crosses a file or a Parquet row group. Its size is the file's
units / 64, rounded up, at most 1,024 units (a unit is a record, or N records for `sentences:N`):
a small file gives every unit its own chunk (the sample's 60 Wikipedia articles, so any shard
count stays balanced), a large one gives chunks big enough that reaching one costs nothing.
Parquet files are read by row group (data/records/parquet.py), which a chunk never crosses: write
row groups of at most ~1,000 rows (`python -m bert_ds.data.prepare` does).

Records are what the `datasets` readers yield for the same files: a .txt file is one record,
decoded as UTF-8 with undecodable bytes replaced and universal newlines; blank-line documents are
split as `datasets`' text reader splits them (`text.split("\\n\\n")`, empty pieces dropped); JSON
Lines skip blank lines and, as pyarrow does, also end a line at a lone CR; a .json file holding
one array is its elements (read whole: it cannot be seeked into).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from bert_ds.errors import DataError

MIN_CHUNKS_PER_FILE = 64
MAX_CHUNK_UNITS = 1024
MAX_POINTS = 65_536
INDEX_VERSION = 2
ANNOUNCE_BYTES = 1 << 28
"""Files larger than this say so on stderr while their index is built."""
SECONDS_PER_GIB = {"jsonl": "6-22", "paragraphs": "about 3", "sha256": "about 2"}
"""Index build time per GiB on a 2-core CPU, announced with a long build: JSON Lines (every record
parsed and checked; short records cost the most), blank-line text, a sha256 (benchmarks/corpus_check.py)."""


def chunk_size(records: int, group: int) -> int:
    """Records per chunk of a file of `records` records, for documents of `group` records."""
    units = math.ceil(records / group)
    return group * min(max(math.ceil(units / MIN_CHUNKS_PER_FILE), 1), MAX_CHUNK_UNITS)


class SeekPoints:
    """Evenly spaced seek points of one sequential scan: (record number, position, line number),
    one every `stride` records, the stride doubling to keep at most MAX_POINTS."""

    def __init__(self):
        self.points: list[list[int]] = []
        self.stride = 1

    def due(self, record: int) -> bool:
        return not self.points or record >= self.points[-1][0] + self.stride

    def add(self, record: int, position: int, line: int) -> None:
        self.extend([[record, position, line]])

    def room(self) -> int:
        """Points that can be added before (and including) the one that halves them."""
        return MAX_POINTS + 1 - len(self.points)

    def extend(self, points: list[list[int]]) -> None:
        """Points due one after another, at most `room()` of them."""
        self.points.extend(points)
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]
            self.stride *= 2


def index_file(path: str, kind: str) -> Path:
    """Where the cached scan of `path` (of this size and mtime) is kept."""
    from bert_ds.runtime.cache import cache_dir

    status = os.stat(path)
    key = json.dumps([os.path.realpath(path), status.st_size, status.st_mtime_ns, kind, INDEX_VERSION])
    return cache_dir() / "record-index" / f"{hashlib.sha1(key.encode()).hexdigest()}.json"


def cached_scan(path: str, kind: str, scan, wait: bool = True) -> Optional[dict]:
    """`scan(path)`'s result from the cache, computed (under a lock) on first use. Without
    `wait`, None while another process computes it."""
    from bert_ds.runtime.cache import exclusive, publish, staging_path

    target = index_file(path, kind)
    try:
        if not target.exists():
            with exclusive(target.with_suffix(".lock"), wait) as held:
                if not held:
                    return None
                if not target.exists():
                    size = os.path.getsize(path)
                    if size > ANNOUNCE_BYTES:
                        print(f"bert_ds: indexing {path} ({size / 2**30:.1f} GiB) once, into {target.parent} "
                              f"({SECONDS_PER_GIB[kind]} s per GiB)", file=sys.stderr, flush=True)
                    index = scan(path)
                    staging = staging_path(target)
                    staging.write_text(json.dumps(dict(index, path=path, kind=kind)))
                    publish(staging, target)
        return json.loads(target.read_text())
    except OSError as error:
        raise DataError(f"Cannot write the record index of {path} into {target.parent}: {error.strerror}; "
                        "set BERT_DS_CACHE to a writable folder.") from None


def index_files(source_name: str, paths: list[str], kind: str, scan) -> list[dict]:
    """Every file's cached scan, the missing ones built now (the start-up check). Files another
    process is building are left for last, so the processes of a job that start together build
    different files at once; a large build says so on stderr (rank 0)."""
    unbuilt = [path for path in paths if not index_file(path, kind).exists()]
    size = sum(os.path.getsize(path) for path in unbuilt)
    if size > ANNOUNCE_BYTES and len(unbuilt) > 1 and os.environ.get("RANK", "0") == "0":
        print(f"bert_ds: indexing {len(unbuilt):,} files of data source {source_name!r} ({size / 2**30:.1f} GiB) "
              f"once, {SECONDS_PER_GIB[kind]} s per GiB shared among the processes starting now",
              file=sys.stderr, flush=True)
    indexes: dict[str, dict] = {}
    for wait in (False, True):
        for path in paths:
            if path not in indexes:
                try:
                    index = cached_scan(path, kind, scan, wait)
                except DataError as error:
                    raise DataError(f"Data source {source_name!r}: {error}") from None
                if index is not None:
                    indexes[path] = index
    return [indexes[path] for path in paths]


class FileRecords:
    """One file's records by number; `read(start, stop)` continues without seeking when called
    in order. `records_read` / `bytes_read` count what was parsed and read from disk."""

    count: int
    chunk_starts: list[int]

    def __init__(self, source_name: str, path: str, group: int):
        self.source_name, self.path, self.group = source_name, path, group
        self.records_read = 0
        self.bytes_read = 0

    def _chunks(self, boundaries: list[int], size: int) -> list[int]:
        """Chunk starts of the file for chunks of `size` records, never crossing one of
        `boundaries` (row-group starts)."""
        starts = []
        for begin, end in zip(boundaries, boundaries[1:] + [self.count]):
            starts.extend(range(begin, end, size))
        return starts

    def _error(self, detail: str) -> DataError:
        return DataError(f"Data source {self.source_name!r}: {self.path} {detail}")

    def read(self, start: int, stop: int) -> list[dict]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _open_text(path: str):
    # As `datasets`' text reader: UTF-8, undecodable bytes replaced, universal newlines.
    return open(path, encoding="utf-8", errors="replace")


def _paragraphs(handle, points: Optional[SeekPoints] = None, first: int = 0) -> Iterator[str]:
    """Blank-line-separated documents from the handle's position, exactly as `datasets` splits
    them (`text.split("\\n\\n")`, empty pieces dropped). A separator always ends at a line's end,
    so after one the next document starts at the next line: the positions kept in `points`."""
    buffer, emitted, line_number = "", first, 0
    while True:
        if not buffer and points is not None and points.due(emitted):
            points.add(emitted, handle.tell(), line_number)
        line = handle.readline()
        if not line:
            break
        line_number += 1
        buffer += line
        if buffer.endswith("\n\n"):
            if len(buffer) > 2:
                yield buffer[:-2]
                emitted += 1
            buffer = ""
    if buffer:
        yield buffer


def index_paragraph_files(source_name: str, paths: list[str]) -> list[dict]:
    """The indexes of .txt files of blank-line-separated documents (built now where missing)."""
    return index_files(source_name, paths, "paragraphs", _scan_paragraphs)


def _scan_paragraphs(path: str) -> dict:
    points = SeekPoints()
    with _open_text(path) as handle:
        count = sum(1 for _ in _paragraphs(handle, points))
    kept = [point for point in points.points if point[0] < count]
    return dict(count=count, points=kept, stride=points.stride)


class ScannedRecords(FileRecords):
    """A file read sequentially from cached seek points (its index scan, `index(source_name,
    [path])[0]`: count and points): `read(start, stop)` seeks to the point at or before `start`
    and iterates; read in order, it never seeks again. Subclasses give the scan and the parse."""

    def __init__(self, source_name: str, path: str, group: int):
        super().__init__(source_name, path, group)
        index = self.index(source_name, [path])[0]
        self.count, self._points = index["count"], index["points"]
        self._point_records = [point[0] for point in self._points]
        self.chunk_starts = self._chunks([0], chunk_size(self.count, group)) if self.count else []
        self._handle, self._iterator, self._next = None, None, None

    @staticmethod
    def index(source_name: str, paths: list[str]) -> list[dict]:
        raise NotImplementedError

    def _open(self):
        raise NotImplementedError

    def _items(self, handle, point: list[int]) -> Iterator:
        """The file's items (one per record) from seek point `point` (record, position, line)."""
        raise NotImplementedError

    def _record(self, item) -> tuple[dict, int]:
        """An item's record and the bytes it took in the file."""
        raise NotImplementedError

    def read(self, start: int, stop: int) -> list[dict]:
        if self._next != start:
            if self._handle is None:
                self._handle = self._open()
            point = self._points[bisect.bisect_right(self._point_records, start) - 1]
            self._handle.seek(point[1])
            self._iterator, self._next = self._items(self._handle, point), point[0]
        records = []
        for item in self._iterator:
            record, size = self._record(item)
            self.bytes_read += size  # read from the file, kept or not
            if self._next >= start:
                records.append(record)
                self.records_read += 1
            self._next += 1
            if self._next >= stop:
                break
        return records

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._handle, self._iterator, self._next = None, None, None


class ParagraphRecords(ScannedRecords):
    index = staticmethod(index_paragraph_files)

    def _open(self):
        return _open_text(self.path)

    def _items(self, handle, point: list[int]) -> Iterator[str]:
        return _paragraphs(handle, first=point[0])

    def _record(self, text: str) -> tuple[dict, int]:
        return {"text": text}, len(text.encode("utf-8", "replace")) + 2


class TextFileRecords(FileRecords):
    def __init__(self, source_name: str, path: str, group: int):
        super().__init__(source_name, path, group)
        self.count, self.chunk_starts = 1, [0]

    def read(self, start: int, stop: int) -> list[dict]:
        if start >= stop:
            return []
        with _open_text(self.path) as handle:
            text = handle.read()
        self.records_read += 1
        self.bytes_read += os.path.getsize(self.path)
        return [{"text": text}]


class EpochRecords:
    """One epoch of a local source: its files in the epoch's order, read by record number, with
    the epoch's chunk table (chunk j's first record is `chunk_starts[j]`)."""

    def __init__(self, files: list[FileRecords]):
        self.files = files
        counts = [f.count for f in files]
        self.file_starts = [int(s) for s in np.cumsum([0] + counts[:-1])] if files else [0]
        self.total = int(sum(counts))
        self.chunk_starts = np.array(
            [start + c for f, start in zip(files, self.file_starts) for c in f.chunk_starts], dtype=np.int64
        )
        self._current: Optional[FileRecords] = None  # the one file kept open

    def chunk_of(self, record: int) -> int:
        return int(np.searchsorted(self.chunk_starts, record, side="right")) - 1

    def read(self, start: int, stop: int) -> list[dict]:
        """Records [start, stop) of the epoch (fewer at its end)."""
        stop = min(stop, self.total)
        records = []
        while start < stop:
            k = bisect.bisect_right(self.file_starts, start) - 1
            while self.files[k].count == 0:
                k += 1
            begin = self.file_starts[k]
            end = min(stop, begin + self.files[k].count)
            records.extend(self._file(k).read(start - begin, end - begin))
            start = end
        return records

    def _file(self, k: int) -> FileRecords:
        """File k, closing the one read before it (one open file per reader, however many files)."""
        if self._current is not None and self._current is not self.files[k]:
            self._current.close()
        self._current = self.files[k]
        return self._current

    def iter_records(self) -> Iterator[dict]:
        for k, f in enumerate(self.files):
            for start in range(0, f.count, 1024):
                yield from self._file(k).read(start, min(start + 1024, f.count))
        self.close()

    @property
    def records_read(self) -> int:
        return sum(f.records_read for f in self.files)

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self.files)

    def close(self) -> None:
        for f in self.files:
            f.close()
