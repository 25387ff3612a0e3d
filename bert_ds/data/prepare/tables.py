"""A prepare unit's input records as Arrow tables of the shard's columns (all strings), so that
JSON Lines and Parquet inputs go from pyarrow's readers to the Parquet writer without a Python
object per record:

    JSON Lines   pyarrow's JSON reader, block by block: each record parsed once, in C++ (the
                 reader `datasets` uses). A block it cannot take (invalid JSON, a `text` that is
                 not a string, a null, bytes that are not UTF-8, a type that changes between
                 records, a lone surrogate escape) sends the file to the record-by-record check
                 of data/records/json_lines.py, which names the file and line of a bad record; a
                 file it finds sound is then read record by record from where the blocks stopped.
    Parquet      row groups read as tables (a hub file's through its retried range requests).
    other        (.txt books, blank-line documents, WikiExtractor files, a .json array) record
                 by record, each record checked, in blocks of READ_RECORDS.

Each yields the input's records from record `skip` on; a JSON Lines file, whose record count is
not known before it is read, is parsed from its start and its first `skip` records dropped.
"""

from __future__ import annotations

from typing import Callable, Iterator

from bert_ds.errors import DataError

READ_RECORDS = 4096
"""Records per table from a record-by-record reader (a Parquet row group is decoded whole either way)."""
JSON_BLOCK_BYTES = 16 << 20
"""Bytes of JSON Lines pyarrow parses at a time."""


def schema(columns: tuple[str, ...]):
    import pyarrow as pa

    return pa.schema([(name, pa.string()) for name in columns])


def _is_text_type(kind) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or str(kind) == "string_view"


def as_columns(table, columns: tuple[str, ...], where: Callable[[], str]):
    """`table` with exactly `columns`, as strings: `text` must be a string column without nulls
    holding valid UTF-8 (a DataError naming `where()` otherwise); a kept column the input lacks
    is null."""
    import pyarrow as pa

    arrays = []
    for name in columns:
        if name not in table.column_names:
            if name == "text":
                raise DataError(f"{where()} has no 'text' (columns: {table.column_names}).")
            arrays.append(pa.nulls(table.num_rows, pa.string()))
            continue
        column = table.column(name)
        if name == "text":
            if not _is_text_type(column.type):
                raise DataError(f"{where()} has a 'text' of {column.type}, not strings.")
            if column.null_count:
                raise DataError(f"{where()} has {column.null_count:,} null 'text' value(s).")
        arrays.append(column.cast(pa.string()))
    result = pa.Table.from_arrays(arrays, schema=schema(columns))
    result.column("text").validate(full=True)  # UTF-8 checked: a bad byte raises ArrowInvalid
    return result


def skipping(tables: Iterator, skip: int) -> Iterator:
    """`tables` without their first `skip` rows."""
    for table in tables:
        if skip >= table.num_rows:
            skip -= table.num_rows
            continue
        yield table.slice(skip) if skip else table
        skip = 0


def row(record: dict, columns: tuple[str, ...], where: Callable[[], str]) -> dict:
    """A record as a shard row: its `text` (a string, else a DataError naming `where()`) and the
    kept columns as strings."""
    text = record.get("text")
    if not isinstance(text, str):
        problem = "has no 'text'" if "text" not in record else f"has a 'text' that is {type(text).__name__}, not a string"
        raise DataError(f"{where()} {problem} (fields: {sorted(record)}).")
    values = {"text": text}
    for name in columns[1:]:
        value = record.get(name)
        values[name] = None if value is None else str(value)
    return values


def record_tables(reader, start: int, columns: tuple[str, ...], describe: Callable[[int], str]) -> Iterator:
    """Records [start, reader.count) of a record-by-record reader, each checked (`row`)."""
    import pyarrow as pa

    try:
        while start < reader.count:
            stop = min(start + READ_RECORDS, reader.count)
            records = reader.read(start, stop)
            if not records:
                raise DataError(f"{describe(start)}: the input ended early; it changed while being read.")
            rows = [row(record, columns, lambda k=k: describe(start + k)) for k, record in enumerate(records)]
            yield pa.Table.from_pylist(rows, schema=schema(columns))
            start += len(records)
    finally:
        reader.close()


def parquet_tables(reader, start: int, columns: tuple[str, ...]) -> Iterator:
    """Row groups of a Parquet reader (data/records/parquet.py) from the one holding `start`."""
    first = max(g for g, begin in enumerate(reader.group_starts) if begin <= start) if reader.count else 0
    try:
        def groups():
            for g in range(first, len(reader.group_starts) if reader.count else 0):
                present = tuple(c for c in columns if c in reader.column_names)
                table = reader.row_group_table(g, present)
                yield as_columns(table, columns, lambda: f"{reader.path} row group {g}")
        yield from skipping(groups(), start - reader.group_starts[first] if reader.count else 0)
    finally:
        reader.close()


def json_lines_tables(source_name: str, path: str, skip: int, columns: tuple[str, ...]) -> Iterator:
    """A JSON Lines file's records from record `skip`, parsed by pyarrow (see the module docstring)."""
    import pyarrow as pa
    import pyarrow.json as pj

    done = 0
    try:
        blocks = pj.open_json(path, read_options=pj.ReadOptions(block_size=JSON_BLOCK_BYTES))
        for batch in blocks:
            table = as_columns(pa.Table.from_batches([batch]), columns, lambda: f"{path} (a block of records)")
            for piece in skipping(iter([table]), max(skip - done, 0)):
                yield piece
            done += table.num_rows
        return
    except (pa.ArrowInvalid, pa.ArrowTypeError, DataError, UnicodeDecodeError):
        pass  # found by the record-by-record check below, by line
    from bert_ds.data.records.json_lines import JsonLinesRecords

    reader = JsonLinesRecords(source_name, path, 1)  # its scan raises a DataError naming a bad line
    yield from record_tables(reader, max(skip, done), columns,
                             lambda record: f"Data source {source_name!r}: {path} record {record}")


def json_lines_columns(path: str) -> list[str]:
    """The fields of a JSON Lines file's first block whose values are strings or whole numbers."""
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        first = next(iter(pj.open_json(path, read_options=pj.ReadOptions(block_size=1 << 20))), None)
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError):
        return []
    if first is None:
        return []
    return [field.name for field in first.schema if _is_text_type(field.type) or pa.types.is_integer(field.type)]


def is_json_array(path: str) -> bool:
    """A .json file holding one array of records (read whole, record by record)."""
    import codecs

    with open(path, "rb") as handle:
        return handle.read(64).removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"[")
