"""SWAG examples from the official CSV files (train.csv, val.csv, test.csv) or from `allenai/swag`.

The CSV files are real CSV (quoted fields with commas), so they are read with the csv module;
columns are found by header name (the files start with an unnamed index column, ignored here).
Every row must be complete: SWAG has no known damaged rows, so any bad row raises a
FinetuneDataError naming the file and line instead of being skipped.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from bert_ds.finetune.data.tasks import (
    FinetuneDataError,
    ReadReport,
    load_hub_split,
    parse_hub_spec,
    read_text_file,
    require_hub_columns,
)

SWAG_HUB_ID = "allenai/swag"
SWAG_HUB_CONFIG = "regular"
NUM_CHOICES = 4
ENDING_COLUMNS = tuple(f"ending{i}" for i in range(NUM_CHOICES))
TEXT_COLUMNS = ("sent1", "sent2") + ENDING_COLUMNS
# Split -> file name in the official release; "dev" is accepted as the other tasks' name for val.
SWAG_FILES = {"train": "train.csv", "val": "val.csv", "dev": "val.csv", "test": "test.csv"}
_HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}


@dataclass(frozen=True)
class SwagExample:
    """A context and the start of the next sentence, with four candidate endings.

    The model scores `start + " " + endings[i]` as the second segment after `context` for each
    i and picks the best (one [CLS] score per choice, as in the paper)."""

    guid: str
    """"<split>-<line>" (local files) or "<split>-<record>" (hub)."""
    context: str
    """sent1: the first sentence."""
    start: str
    """sent2: the beginning of the second sentence, which each ending completes."""
    endings: tuple[str, ...]
    """The four candidate endings, ending0..ending3."""
    label: Optional[int]
    """Index of the gold ending, or None in the test split."""


def parse_swag_label(value: Any, where: str, is_test: bool) -> Optional[int]:
    """A label cell -> 0..3; empty (or the hub's -1) in the test split -> None; else FinetuneDataError."""
    text = "" if value is None else str(value).strip()
    if is_test and text in ("", "-1"):
        return None
    if text not in {str(i) for i in range(NUM_CHOICES)}:
        raise FinetuneDataError(f"{where}: label {value!r} is not one of 0..{NUM_CHOICES - 1}.")
    return int(text)


def _split_name(split: str) -> str:
    if split not in SWAG_FILES:
        raise FinetuneDataError(f"SWAG has no split {split!r}; splits: {list(SWAG_FILES)}.")
    return "val" if split == "dev" else split


def read_swag_file(path: Union[str, Path], split: str) -> tuple[list[SwagExample], ReadReport]:
    """Examples of one SWAG CSV file; train/val rows need a label 0..3, test rows may lack one."""
    path, split = Path(path), _split_name(split)
    is_test = split == "test"
    report = ReadReport(str(path))
    examples: list[SwagExample] = []
    reader = csv.reader(io.StringIO(read_text_file(path), newline=""))
    header = _next_row(reader, path)
    if header is None:
        raise FinetuneDataError(f"{path}: the file is empty; expected a header line.")
    needed = list(TEXT_COLUMNS) + ([] if is_test else ["label"])
    missing = [name for name in needed if name not in header]
    if missing:
        raise FinetuneDataError(f"{path}: header lacks column(s) {missing} (columns: {header}).")
    at = {name: header.index(name) for name in TEXT_COLUMNS}
    label_at = header.index("label") if "label" in header else None
    next_line = reader.line_num + 1
    while (row := _next_row(reader, path)) is not None:
        # A quoted field may span lines: name the line the record starts on.
        line, next_line = next_line, reader.line_num + 1
        where = f"{path}: line {line}"
        if len(row) != len(header):
            raise FinetuneDataError(f"{where} has {len(row)} fields, the header {len(header)}.")
        label = None if label_at is None else parse_swag_label(row[label_at], where, is_test)
        endings = tuple(row[at[name]] for name in ENDING_COLUMNS)
        examples.append(SwagExample(f"{split}-{line}", row[at["sent1"]], row[at["sent2"]], endings, label))
    report.rows = len(examples)
    return examples, report



def _next_row(reader, path: Path) -> Optional[list[str]]:
    """The next CSV record, None at the end; a malformed one (e.g. a field over the csv module's
    size limit) is a FinetuneDataError naming the line."""
    try:
        return next(reader, None)
    except csv.Error as error:
        raise FinetuneDataError(f"{path}: line {reader.line_num}: {error}.") from None


def swag_examples_from_hub(
    rows: Any, split: str, source: str = SWAG_HUB_ID
) -> tuple[list[SwagExample], ReadReport]:
    """Examples of a hub split with the `allenai/swag` "regular" schema (the CSV's column names;
    int "label", -1 in the test split)."""
    split = _split_name(split)
    is_test = split == "test"
    report = ReadReport(f"{source}:{SWAG_HUB_CONFIG} {_HUB_SPLITS[split]}")
    require_hub_columns(rows, list(TEXT_COLUMNS) + ["label"], report.source)
    examples = []
    for position, row in enumerate(rows):
        label = parse_swag_label(row["label"], f"{report.source}: record {position}", is_test)
        endings = tuple(row[name] for name in ENDING_COLUMNS)
        examples.append(SwagExample(f"{split}-{position}", row["sent1"], row["sent2"], endings, label))
    report.rows = len(examples)
    return examples, report


def load_swag(split: str, data: str = "swagaf/data") -> tuple[list[SwagExample], ReadReport]:
    """Examples of `split` (train, val/dev, test) from `data`: a folder holding the official CSV
    files, one CSV file, or a hub spec `hf:allenai/swag[:regular]`."""
    hub = parse_hub_spec(data)
    if hub is not None:
        rows = load_hub_split(hub, _HUB_SPLITS[_split_name(split)], default_config=SWAG_HUB_CONFIG)
        return swag_examples_from_hub(rows, split, source=hub.hub_id)
    path = Path(data)
    if os.path.isdir(path):  # os.path: a path too long or with a NUL byte is no folder, not an OSError
        path = path / SWAG_FILES[_split_name(split)]
    if not os.path.isfile(path):
        raise FinetuneDataError(f"No SWAG {split} file: {path} does not exist.")
    return read_swag_file(path, split)
