"""The work of `python -m bert_ds.data.prepare`: a source's inputs cut into units, and one unit
written as Parquet shards that a killed run continues exactly where it stopped.

A unit is a run of consecutive input files holding about one shard's worth of input bytes (a
larger file is a unit alone), so the units, and the shards each writes, depend on the source
alone: any `--num-proc` writes the same bytes. Unit u writes `shard-UUUUU-KKKK.parquet`, each a
`.partial` file until complete, then renamed; after each shard, the unit's state file
(`.prepare/unit-UUUUU.json`, replaced atomically) records the shards done and the input record
the next one starts at. A rerun deletes partial files and continues each unit from its state.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from bert_ds.data.prepare.tables import schema
from bert_ds.errors import DataError

STATE_DIR = ".prepare"
KEPT_COLUMNS = ("id", "title")
"""Besides `text`, the columns a shard keeps where its source has them (as strings)."""


@dataclass(frozen=True)
class Settings:
    """What fixes the output bytes: a rerun must use the same."""

    shard_bytes: int
    row_group_rows: int
    columns: tuple[str, ...]

    def as_dict(self) -> dict:
        return dict(shard_bytes=self.shard_bytes, row_group_rows=self.row_group_rows, columns=list(self.columns))


@dataclass(frozen=True)
class Unit:
    index: int
    inputs: tuple[int, ...]
    """Indexes of the source's input files (readers) this unit reads, in order."""
    records: Optional[int]
    """Its input records; None where an input's count is known only once it is read (JSON Lines)."""


def plan_units(sizes: list[int], counts: list[Optional[int]], shard_bytes: int) -> list[Unit]:
    """Consecutive inputs grouped to about `shard_bytes` of input each."""
    units, current, current_bytes = [], [], 0
    for k, size in enumerate(sizes):
        if current and current_bytes + size > shard_bytes:
            units.append(current)
            current, current_bytes = [], 0
        current.append(k)
        current_bytes += size
    if current:
        units.append(current)
    return [Unit(u, tuple(inputs), None if any(counts[k] is None for k in inputs) else sum(counts[k] for k in inputs))
            for u, inputs in enumerate(units)]


def state_path(output: Path, unit: int) -> Path:
    return output / STATE_DIR / f"unit-{unit:05d}.json"


def read_unit_state(output: Path, unit: int) -> dict:
    path = state_path(output, unit)
    if not path.exists():
        return dict(shards=[], next_record=0, done=False)
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise DataError(f"{path} is damaged; delete {output / STATE_DIR} and the shard files to prepare from scratch.") from None


def _write_unit_state(output: Path, unit: int, state: dict) -> None:
    path = state_path(output, unit)
    staging = path.with_name(path.name + f".tmp-{os.getpid()}")
    staging.write_text(json.dumps(state))
    os.replace(staging, path)


def shard_name(unit: int, k: int) -> str:
    return f"shard-{unit:05d}-{k:04d}.parquet"


def row_groups(tables: Iterator, rows: int) -> Iterator:
    """`tables` re-cut into tables of exactly `rows` rows (the last one shorter)."""
    import pyarrow as pa

    pending, count = [], 0
    for table in tables:
        pending.append(table)
        count += table.num_rows
        while count >= rows:
            whole = pa.concat_tables(pending)
            yield whole.slice(0, rows)
            pending, count = [whole.slice(rows)], count - rows
    if count:
        yield pa.concat_tables(pending)


def write_unit(unit: Unit, tables_from: Callable[[int], Iterator], output: Path, settings: Settings,
               progress: Callable[[int, int], None]) -> list[dict]:
    """Write (or finish) unit `unit`; returns its shards' manifest entries. `tables_from(start)`
    gives the unit's input records from record `start` on as Arrow tables of the shard's columns
    (data/prepare/tables.py); `progress(records, text_bytes)` is told what each row group added."""
    import pyarrow.parquet as pq

    from bert_ds.data.prepare.words import count_words_and_characters
    from bert_ds.data.prepared import file_sha256

    state = read_unit_state(output, unit.index)
    if state["done"]:
        return state["shards"]
    for stale in output.glob(f"shard-{unit.index:05d}-*.parquet.partial"):
        stale.unlink()
    start = state["next_record"]
    groups = row_groups(tables_from(start), settings.row_group_rows)
    group = next(groups, None)
    while group is not None:
        name = shard_name(unit.index, len(state["shards"]))
        partial = output / (name + ".partial")
        entry = dict(path=name, records=0, row_groups=0, words=0, characters=0)
        with pq.ParquetWriter(partial, schema(settings.columns), compression="zstd", write_statistics=["text"]) as writer:
            while group is not None:
                writer.write_table(group)
                words, characters = count_words_and_characters(group.column("text"))
                entry["records"] += group.num_rows
                entry["row_groups"] += 1
                entry["words"] += words
                entry["characters"] += characters
                start += group.num_rows
                progress(group.num_rows, characters)
                group = next(groups, None)
                if partial.stat().st_size >= settings.shard_bytes:
                    break
        entry["bytes"], entry["sha256"] = partial.stat().st_size, file_sha256(str(partial))
        os.replace(partial, output / name)
        state["shards"].append(entry)
        state["next_record"] = start
        state["done"] = group is None
        _write_unit_state(output, unit.index, state)
    if unit.records is not None and start < unit.records:
        raise DataError(f"{output}: unit {unit.index} ended at input record {start:,} of {unit.records:,}; its input "
                        "files changed while being read.")
    if not state["done"]:  # a unit without records
        state["done"] = True
        _write_unit_state(output, unit.index, state)
    return state["shards"]


def check_settings(output: Path, settings: Settings, source: dict) -> Optional[str]:
    """Record the settings of a new folder, or compare a resumed folder's: the first difference
    as a sentence (None when they agree)."""
    path = output / STATE_DIR / "settings.json"
    wanted = dict(settings.as_dict(), source=source)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(wanted, indent=1))
        return None
    saved = json.loads(path.read_text())
    for key, value in [*settings.as_dict().items(), *source.items()]:
        before = (saved if key in settings.as_dict() else saved.get("source", {})).get(key)
        if before != value:
            name = "input files (names, sizes)" if key == "inputs" else key
            return (f"{output} was started with other {name} ({_short(before)}; now {_short(value)})"
                    if key == "inputs" else f"{output} was started with {name} {before!r}, this run asks for {value!r}")
    return None


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."
