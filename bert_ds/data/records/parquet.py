"""A Parquet file's records by number, read by row group: a local file, or a remote one through
fsspec (a hub dataset's Parquet files, data/hub/parquet.py), whose row groups are fetched by
HTTP range requests.

A row group is decoded whole (its `text` column only), so which row groups a shard touches is
what it costs. Chunks (data/records/index.py) never cross a row group; a remote file makes every
row group one chunk, so a loader shard fetches only its own row groups (plus each file's footer
once). A local file of at least 64 row groups does the same; a smaller one is cut finer, so that
the shards of a small corpus stay balanced; a prepared folder's shards (data/prepared.py), whose
row groups were written for it, also make each row group one chunk.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
import numpy as np

from bert_ds.data.records.index import MAX_CHUNK_UNITS, MIN_CHUNKS_PER_FILE, FileRecords, chunk_size
from bert_ds.errors import DataError


@dataclass(frozen=True)
class ParquetFooter:
    """What the loader needs of a Parquet footer: rows and the `text` column's bytes per row group."""

    rows: tuple[int, ...]
    text_bytes: tuple[int, ...]

    @classmethod
    def of(cls, metadata) -> "ParquetFooter":
        """From pyarrow's FileMetaData. The `text` column is found by path: a nested column
        before it takes several slots."""
        groups = [metadata.row_group(g) for g in range(metadata.num_row_groups)]
        text = [c for c in range(metadata.num_columns) if groups and groups[0].column(c).path_in_schema == "text"]
        return cls(tuple(g.num_rows for g in groups),
                   tuple(sum(g.column(c).total_compressed_size for c in text) for g in groups))

    def as_dict(self) -> dict:
        return dict(rows=list(self.rows), text_bytes=list(self.text_bytes))

    @classmethod
    def from_dict(cls, value: dict) -> "ParquetFooter":
        return cls(tuple(value["rows"]), tuple(value["text_bytes"]))


class ParquetRecords(FileRecords):
    """Records of one local Parquet file; RemoteParquetRecords (data/hub/parquet.py) reads a
    remote one. `bytes_read` counts each decoded row group's compressed `text` column."""

    columns: tuple[str, ...] = ("text",)
    """The columns a record holds (data/prepare/command.py keeps a source's `id` and `title` too)."""

    def __init__(self, source_name: str, path: str, group: int, footer: ParquetFooter, whole_row_groups: bool = False):
        super().__init__(source_name, path, group)
        rows = list(footer.rows)
        self._footer = footer
        self._file = None
        self._group_starts = [int(s) for s in np.cumsum([0] + rows[:-1])] if rows else [0]
        self.count = int(sum(rows))
        size = chunk_size(self.count, self.group)
        if whole_row_groups or len(rows) >= MIN_CHUNKS_PER_FILE:
            # Each row group one chunk (up to the largest chunk), so a shard decodes only its own.
            size = max(size, max(rows, default=1) if whole_row_groups else min(max(rows), MAX_CHUNK_UNITS * self.group))
        self.chunk_starts = self._chunks(self._group_starts, size) if self.count else []
        self._decoded: tuple[int, list] = (-1, [])

    def _open(self):
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.path)

    @property
    def group_starts(self) -> list[int]:
        """The record number each row group starts at."""
        return self._group_starts

    @property
    def column_names(self) -> list[str]:
        if self._file is None:
            self._file = self._open()
        return self._file.schema_arrow.names

    def row_group_table(self, g: int, columns: tuple[str, ...]):
        """Row group g's `columns` as a pyarrow Table (the file opened on first use)."""
        if self._file is None:
            self._file = self._open()
        table = self._file.read_row_group(g, columns=list(columns))
        self.bytes_read += self._footer.text_bytes[g]
        return table

    def _decode(self, g: int) -> list[dict]:
        """Row group g's records."""
        table = self.row_group_table(g, self.columns)
        if self.columns == ("text",):
            return [{"text": text} for text in table.column(0).to_pylist()]
        return table.to_pylist()

    def _row_group(self, g: int) -> list[dict]:
        if self._decoded[0] != g:
            records = self._decode(g)
            self.records_read += len(records)
            self._decoded = (g, records)
        return self._decoded[1]

    def read(self, start: int, stop: int) -> list[dict]:
        records = []
        while start < stop:
            g = bisect.bisect_right(self._group_starts, start) - 1
            decoded = self._row_group(g)
            begin = self._group_starts[g]
            end = min(stop, begin + len(decoded))
            records.extend(decoded[start - begin:end - begin])
            start = end
        return records

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._decoded = None, (-1, [])


def local_parquet_records(source_name: str, path: str, group: int, whole_row_groups: bool = False) -> ParquetRecords:
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as parquet:  # closed again: a source may have thousands of files
        footer = ParquetFooter.of(parquet.metadata)
    return ParquetRecords(source_name, path, group, footer, whole_row_groups)


_CHECKED_FOOTERS: set[tuple] = set()
"""(path, size, mtime) of the Parquet files whose footers passed, so each is read once per process."""


def check_parquet_footers(source_name: str, files: list[str]) -> None:
    """Each file's footer checked once per process (check_parquet_footer)."""
    for path in files:
        status = os.stat(path)
        key = (path, status.st_size, status.st_mtime_ns)
        if key not in _CHECKED_FOOTERS:
            check_parquet_footer(source_name, path)
            _CHECKED_FOOTERS.add(key)


def check_parquet_footer(source_name: str, path: str) -> None:
    """A DataError unless the file's footer shows a `text` column of strings without nulls (read
    from the row groups' statistics, where the writer kept them)."""
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as parquet:
            schema, metadata = parquet.schema_arrow, parquet.metadata
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise DataError(f"Data source {source_name!r}: unreadable Parquet file {path}: {error}") from None
    check_text_column(source_name, path, schema, metadata)


def check_text_column(source_name: str, path: str, schema, metadata) -> None:
    """A DataError unless the footer (pyarrow's schema and FileMetaData) shows a `text` column of
    strings without nulls."""
    import pyarrow as pa

    if "text" not in schema.names:
        raise DataError(f"Data source {source_name!r}: {path} has no 'text' column (columns: {schema.names}).")
    if schema.names.count("text") > 1:
        raise DataError(f"Data source {source_name!r}: {path} has {schema.names.count('text')} columns named 'text'.")
    kind = schema.field("text").type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or str(kind) == "string_view"):
        raise DataError(f"Data source {source_name!r}: {path} has a 'text' column of {kind}, not of strings.")
    columns = [c for c in range(metadata.num_columns) if metadata.num_row_groups
               and metadata.row_group(0).column(c).path_in_schema == "text"]
    for group in range(metadata.num_row_groups):
        for column in columns:
            statistics = metadata.row_group(group).column(column).statistics
            if statistics is not None and statistics.has_null_count and statistics.null_count:
                raise DataError(
                    f"Data source {source_name!r}: {path} row group {group} holds {statistics.null_count:,} "
                    "null 'text' value(s); drop those rows or write them as empty strings."
                )
