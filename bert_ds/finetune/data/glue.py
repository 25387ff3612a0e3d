"""GLUE examples from the official `glue_data/` folders or from the `nyu-mll/glue` hub copy.

Local files are read exactly as GLUE's download script writes them: tab-separated, UTF-8,
no quoting at all (the text holds unbalanced quote characters, so a CSV reader with quoting
would swallow rows), one row per "\\n"-terminated line. Columns are found by header name; CoLA's
train/dev files have no header and get fixed names (tasks.GlueTask.headerless_columns).

Bad data policy (invariant 8: bad input never silently costs data):
- a missing required column, an unknown label, a non-numeric STS-B score or undecodable bytes
  raise FinetuneDataError naming the file and line;
- a row with the wrong number of fields (QQP's train file has a few, broken by stray newlines)
  is skipped in train/dev files and listed in the ReadReport with its line number;
- in a test file the same row raises, since a GLUE submission needs a prediction for every row;
- more than 1% of a file's rows (and more than 5) with the wrong field count raise too: that is
  the wrong file or format, not a few damaged rows.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from bert_ds.finetune.data.tasks import (
    GLUE_HUB_ID,
    FinetuneDataError,
    GlueTask,
    ReadReport,
    get_task,
    hub_split,
    load_hub_split,
    parse_hub_spec,
    require_hub_columns,
)

# Above this share of rows with a wrong field count a file is refused rather than read.
MAX_MALFORMED_FRACTION = 0.01
MAX_MALFORMED_ALWAYS_ALLOWED = 5


@dataclass(frozen=True)
class GlueExample:
    """One sentence or sentence pair with its label."""

    guid: str
    """The row's id column (test files: the index a submission lists), else "<split>-<line>"."""
    text_a: str
    text_b: Optional[str]
    """None for single-sentence tasks (CoLA, SST-2)."""
    label: Union[int, float, None]
    """Class int in the hub's order, the STS-B score as float, or None for test rows."""


def _as_task(task: Union[str, GlueTask]) -> GlueTask:
    return task if isinstance(task, GlueTask) else get_task(task)


def _check_split(task: GlueTask, split: str) -> None:
    if split not in task.splits:
        raise FinetuneDataError(f"GLUE task {task.name} has no split {split!r}; splits: {list(task.splits)}.")


def tsv_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, tab-separated fields) of every line, with no quote handling.

    Lines end at "\\n" only (a stray "\\r" inside a field stays in the field; a "\\r\\n" ending is
    dropped), and a UTF-8 byte order mark at the start of the file is removed.
    """
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise FinetuneDataError(f"{path}: line {number} is not valid UTF-8 ({error.reason}).") from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line.removesuffix("\n").removesuffix("\r").split("\t")


def parse_label(task: GlueTask, value: str, where: str) -> Union[int, float]:
    """A TSV label string -> the hub's int (or STS-B's float score); FinetuneDataError otherwise."""
    if task.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise FinetuneDataError(f"{where}: score {value!r} is not a number.")
        return score
    if value not in task.labels:
        raise FinetuneDataError(f"{where}: label {value!r} is not one of {list(task.labels)}.")
    return task.labels.index(value)


def read_glue_file(
    task: Union[str, GlueTask], path: Union[str, Path], split: str
) -> tuple[list[GlueExample], ReadReport]:
    """Examples of one official GLUE TSV file; `split` says whether rows carry labels (train/dev)
    and whether the file has a header (CoLA train/dev have none). See the module docstring for
    what is skipped and what raises."""
    task, path = _as_task(task), Path(path)
    _check_split(task, split)
    is_test = split in task.test_splits
    report = ReadReport(str(path))
    examples: list[GlueExample] = []
    lines = tsv_lines(path)
    if task.headerless_columns and not is_test:
        columns = list(task.headerless_columns)
    else:
        first = next(lines, None)
        if first is None:
            raise FinetuneDataError(f"{path}: the file is empty; expected a header line.")
        columns = first[1]
    needed = list(task.text_columns) + ([task.id_column] if is_test else [task.label_column])
    missing = [name for name in needed if name not in columns]
    if missing:
        what = "has no header; expected" if task.headerless_columns and not is_test else "header lacks"
        raise FinetuneDataError(f"{path}: {what} column(s) {missing} for {task.name} {split} (columns: {columns}).")
    text_at = [columns.index(name) for name in task.text_columns]
    label_at = None if is_test else columns.index(task.label_column)
    id_at = columns.index(task.id_column) if task.id_column in columns else None
    for number, fields in lines:
        if len(fields) != len(columns):
            if is_test:
                raise FinetuneDataError(
                    f"{path}: line {number} has {len(fields)} fields, the header {len(columns)}; a test file "
                    "must be complete, since a submission needs a prediction for every row."
                )
            report.skip(number, "rows with the wrong number of fields")
            continue
        where = f"{path}: line {number}"
        texts = [fields[i] for i in text_at]
        examples.append(
            GlueExample(
                guid=fields[id_at] if id_at is not None else f"{split}-{number}",
                text_a=texts[0],
                text_b=texts[1] if len(texts) > 1 else None,
                label=None if label_at is None else parse_label(task, fields[label_at], where),
            )
        )
    report.rows = len(examples)
    _refuse_mostly_malformed(report)
    return examples, report


def _refuse_mostly_malformed(report: ReadReport) -> None:
    bad = len(report.skipped)
    if bad > MAX_MALFORMED_ALWAYS_ALLOWED and bad > MAX_MALFORMED_FRACTION * (bad + report.rows):
        raise FinetuneDataError(
            f"{report.summary()}: too many malformed rows for a GLUE file; is it the right file and format?"
        )


def glue_file(task: Union[str, GlueTask], data_dir: Union[str, Path], split: str) -> Path:
    """`data_dir/<FOLDER>/<split>.tsv`, or `data_dir/<split>.tsv` when `data_dir` is the task folder."""
    task, data_dir = _as_task(task), Path(data_dir)
    _check_split(task, split)
    candidates = [data_dir / task.folder / f"{split}.tsv", data_dir / f"{split}.tsv"]
    for candidate in candidates:
        if os.path.isfile(candidate):  # not Path.is_file: a name too long is no file rather than an OSError
            return candidate
    raise FinetuneDataError(
        f"No {task.name} {split} file: looked for {', '.join(str(c) for c in candidates)} "
        "(GLUE's download script writes glue_data/<TASK>/<split>.tsv)."
    )


def glue_examples_from_hub(
    task: Union[str, GlueTask], rows: Any, split: str, source: str = GLUE_HUB_ID
) -> tuple[list[GlueExample], ReadReport]:
    """Examples of a hub split (a `datasets.Dataset` with the `nyu-mll/glue` schema: the task's
    text columns, an int "label" (float for stsb; -1 in test splits) and "idx")."""
    task = _as_task(task)
    _check_split(task, split)
    is_test = split in task.test_splits
    report = ReadReport(f"{source}:{task.hub_config} {hub_split(split)}")
    require_hub_columns(rows, list(task.hub_text_columns) + ["label"], report.source)
    examples: list[GlueExample] = []
    for position, row in enumerate(rows):
        label = None if is_test else row["label"]
        if task.labels is not None and label is not None and not 0 <= label < len(task.labels):
            raise FinetuneDataError(
                f"{report.source}: record {position} has label {label}, expected 0..{len(task.labels) - 1}."
            )
        if task.labels is None and label is not None:
            label = parse_label(task, str(label), f"{report.source}: record {position}")
        texts = [row[name] for name in task.hub_text_columns]
        guid = str(row["idx"]) if "idx" in row else f"{split}-{position}"
        examples.append(GlueExample(guid, texts[0], texts[1] if len(texts) > 1 else None, label))
    report.rows = len(examples)
    return examples, report


def load_glue(
    task: Union[str, GlueTask], split: str, data: str = "glue_data"
) -> tuple[list[GlueExample], ReadReport]:
    """Examples of `task`'s `split` ("train", "dev", "test", MNLI's "dev_matched", ...) from `data`:
    a local glue_data folder (or the task's folder), or a hub spec `hf:ID[:CONFIG][@REVISION]` such as
    `hf:nyu-mll/glue` (the config defaults to the task name)."""
    task = _as_task(task)
    hub = parse_hub_spec(data)
    if hub is None:
        return read_glue_file(task, glue_file(task, data, split), split)
    _check_split(task, split)
    rows = load_hub_split(hub, hub_split(split), default_config=task.hub_config)
    return glue_examples_from_hub(task, rows, split, source=hub.hub_id)
