"""The inputs of `python -m bert_ds.data.prepare`: a source's files in order, as readers (local
files checked first; a hub source's Parquet files at its pinned commit; JSON Lines files left to
pyarrow's reader, which checks them as it parses), and one work unit of them written as shards
(data/prepare/units.py) from Arrow tables (data/prepare/tables.py), in this process or in a worker."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from bert_ds.data.prepare.units import KEPT_COLUMNS, STATE_DIR, Settings, write_unit
from bert_ds.errors import DataError


class Inputs:
    """A source's input files as record readers, in order, with what the manifest says of them."""

    def __init__(self, spec: str, txt_documents: str, commit: Optional[str]):
        from bert_ds.data.sources import parse_sources, record_layout

        sources = parse_sources([spec])
        if len(sources) != 1:
            raise DataError(f"prepare takes one source, {spec!r} names {len(sources)}; prepare them one at a time.")
        self.source = source = sources[0]
        self.json_lines = False
        self.layout = record_layout(source)
        # A WikiExtractor document is stored as an article record; a book without its PG licence.
        self.meta = dict(spec=spec, name=source.name, location=source.location, layout=self.layout.stored)
        if self.layout.strips_licence:
            self.meta["gutenberg_licence"] = "removed"
        if source.is_hub:
            self._open_hub(commit)
        else:
            self._open_local(txt_documents)
        if not self.json_lines:
            self.counts = [reader.count for reader in self.readers]

    def _open_hub(self, commit: Optional[str]) -> None:
        from bert_ds.data.hub.fs import parse_hub_location
        from bert_ds.data.hub.parquet import RemoteParquetRecords, footer_columns
        from bert_ds.data.sources import hub_parquet

        hub = parse_hub_location(self.source.location)
        found = hub_parquet(self.source, commit)
        if found is None:
            raise DataError(f"Data source {self.source.name!r}: hub dataset {hub.hub_id!r} has no Parquet files at "
                            f"revision {hub.revision!r}; prepare its Parquet conversion: hf:{hub.hub_id}"
                            f"{':' + hub.config if hub.config else ''}@refs/convert/parquet")
        self.meta.update(hub_id=hub.hub_id, config=hub.config or found.files[0].path.split("/")[3],
                         revision=hub.revision, commit=found.commit, partial_conversion=found.partial)
        self.readers = [RemoteParquetRecords(self.source.name, f, self.layout.group) for f in found.files]
        self.names = [f.path for f in found.files]
        self.sizes = [f.size for f in found.files]
        self.columns = ("text",) + tuple(c for c in KEPT_COLUMNS if c in footer_columns(found.files[0]))

    def _open_local(self, txt_documents: str) -> None:
        from bert_ds.data.prepare.tables import is_json_array, json_lines_columns
        from bert_ds.data.sources import check_sources, file_records, local_files, reader_kind

        files = local_files(self.source)
        self.names, self.sizes = files, [os.path.getsize(path) for path in files]
        kind = reader_kind(self.source, files, txt_documents)
        if kind == "json" and not any(is_json_array(path) for path in files):
            # JSON Lines: pyarrow parses each record once, while writing (data/prepare/tables.py).
            self.json_lines = True
            self.readers, self.counts = [None] * len(files), [None] * len(files)
            self.columns = ("text",) + tuple(c for c in KEPT_COLUMNS if c in json_lines_columns(files[0]))
            return
        check_sources([self.source], txt_documents)  # every record checked: a bad one named by file and line
        self.readers = [file_records(self.source.name, path, self.layout.group, kind) for path in files]
        self.columns = ("text",) + tuple(c for c in KEPT_COLUMNS if c in self._local_columns())

    def _local_columns(self) -> list[str]:
        first = next((reader for reader in self.readers if reader.count), None)
        if first is None:
            return []
        if self.names[0].endswith(".parquet"):
            import pyarrow.parquet as pq

            return pq.read_schema(first.path).names
        record = first.read(0, 1)[0]
        first.close()
        return [name for name, value in record.items() if isinstance(value, (str, int))]

    def tables(self, k: int, skip: int, columns: tuple[str, ...]):
        """Input k's records from its record `skip` on, as Arrow tables of `columns`."""
        from bert_ds.data.prepare import tables
        from bert_ds.data.records.parquet import ParquetRecords

        if self.json_lines:
            return tables.json_lines_tables(self.source.name, self.names[k], skip, columns)
        reader = self.readers[k]
        if isinstance(reader, ParquetRecords):
            return tables.parquet_tables(reader, skip, columns)
        return tables.record_tables(reader, skip, columns, lambda record: self.describe((k,), record))

    def describe(self, inputs: tuple[int, ...], record: int) -> str:
        """Names record `record` of the unit made of `inputs`."""
        for k in inputs:
            if record < self.counts[k]:
                return f"Data source {self.source.name!r}: {self.names[k]} record {record}"
            record -= self.counts[k]
        return f"Data source {self.source.name!r}: record past the end of {self.names[inputs[-1]]}"


def saved_commit(output: Path) -> Optional[str]:
    """The commit a started folder was begun at (a resumed prepare reads the same files)."""
    path = output / STATE_DIR / "settings.json"
    return json.loads(path.read_text())["source"].get("commit") if path.is_file() else None


def write_inputs_unit(inputs: Inputs, unit, settings: Settings, output: Path, report_progress) -> list[dict]:
    def tables_from(start: int):
        """The unit's records from record `start` on: its inputs in order (one whose count is
        known and below `start` is skipped unread)."""
        skip = start
        for k in unit.inputs:
            count = inputs.counts[k]
            if count is not None and skip >= count:
                skip -= count
                continue
            if count is not None:
                yield from _books(inputs.tables(k, skip, settings.columns), inputs)
                skip = 0
                continue
            seen = 0
            for table in inputs.tables(k, 0, settings.columns):  # a count known once read: skip by rows
                seen += table.num_rows
                if seen > skip:
                    yield from _books(iter([table.slice(max(skip - (seen - table.num_rows), 0))]), inputs)
            skip = max(skip - seen, 0)

    return write_unit(unit, tables_from, output, settings, report_progress)


def _books(tables, inputs: Inputs):
    """`tables` whose books lose a Project Gutenberg header and footer where the layout says so
    (data/text/gutenberg.py): the shards hold the books, and count the books' words."""
    if not inputs.layout.strips_licence:
        yield from tables
        return
    import pyarrow as pa

    from bert_ds.data.text.gutenberg import strip_gutenberg

    for table in tables:
        texts = pa.array([strip_gutenberg(text)[0] for text in table.column("text").to_pylist()], pa.string())
        yield table.set_column(table.column_names.index("text"), "text", texts)


_WORKER_INPUTS: dict[tuple, Inputs] = {}
"""The inputs a worker process opened, kept for the next unit it is given."""


def write_unit_in_worker(args: dict, unit, settings: Settings, output: str, report_progress) -> list[dict]:
    """One unit in a worker process, which opens the inputs once (indexes and footers come from
    the cache the main process filled)."""
    key = (args["spec"], args["txt_documents"], saved_commit(Path(output)))
    if key not in _WORKER_INPUTS:
        _WORKER_INPUTS[key] = Inputs(*key)
    return write_inputs_unit(_WORKER_INPUTS[key], unit, settings, Path(output), report_progress)
