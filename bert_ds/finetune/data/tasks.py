"""The GLUE task table, plus the error and report types that every fine-tuning reader shares.

One `GlueTask` per task says where its data lives (folder and TSV columns of the official
`glue_data/` download, config and columns of the `nyu-mll/glue` hub copy), what its labels are,
which dev/test splits it has, how it is scored and which file a GLUE submission expects.

Label ints are the hub's: `labels[i]` is the string the TSV files write for the class the hub
calls `i`, so local and hub data give the same ints and a submission writes `labels[prediction]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Optional

from bert_ds.data.sources import DataError

GLUE_HUB_ID = "nyu-mll/glue"


class FinetuneDataError(DataError):
    """A fine-tuning data problem; the message names the file (or hub split) and the line,
    record or question id involved."""


@dataclass
class ReadReport:
    """What a reader did with one file or hub split: rows turned into examples and rows skipped."""

    source: str
    """The file path, or `hub_id[:config] split` for hub data."""
    rows: int = 0
    """Examples produced."""
    skipped: list[tuple[int, str]] = field(default_factory=list)
    """(line number, reason) of every skipped row, in file order."""

    def skip(self, line: int, reason: str) -> None:
        self.skipped.append((line, reason))

    def summary(self, first: int = 5) -> str:
        """One line: counts, and the reasons with their first few line numbers."""
        text = f"{self.source}: {self.rows} examples"
        if not self.skipped:
            return text + ", nothing skipped"
        by_reason: dict[str, list[int]] = {}
        for line, reason in self.skipped:
            by_reason.setdefault(reason, []).append(line)
        parts = []
        for reason, lines in by_reason.items():
            shown = ", ".join(str(n) for n in lines[:first]) + (", ..." if len(lines) > first else "")
            parts.append(f"{len(lines)} {reason} (lines {shown})")
        return f"{text}, {len(self.skipped)} rows skipped: " + "; ".join(parts)


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: data layout, labels, splits, metrics, submission file and hub mapping."""

    name: str
    """Our short name, which is also the hub config name (e.g. "sst2")."""
    folder: str
    """Folder under glue_data/ written by GLUE's download script (e.g. "SST-2")."""
    text_columns: tuple[str, ...]
    """Header names of the one or two text columns (the same in train, dev and test files)."""
    label_column: str
    """Header name of the label column in train/dev files (test files have none)."""
    labels: Optional[tuple[str, ...]]
    """TSV label strings in hub int order; None for a regression task (STS-B)."""
    metrics: tuple[str, ...]
    """Metric names (see metrics.py); the first is the one the BERT paper reports."""
    submission_files: dict[str, str]
    """Test split -> the file name a GLUE submission expects for it."""
    hub_text_columns: tuple[str, ...]
    """Text columns of the `nyu-mll/glue` config (the hub's label column is always "label")."""
    dev_splits: tuple[str, ...] = ("dev",)
    """Dev split names (file stems); MNLI has a matched and a mismatched one."""
    headerless_columns: Optional[tuple[str, ...]] = None
    """Column names of train/dev files that have no header line (CoLA), else None."""
    id_column: str = "index"
    """Header name of the row id in test files (submissions list predictions by it)."""

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def test_splits(self) -> tuple[str, ...]:
        return tuple(self.submission_files)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train",) + self.dev_splits + self.test_splits

    @property
    def hub_config(self) -> str:
        return self.name


_BINARY = ("0", "1")
_ENTAIL = ("entailment", "not_entailment")
_PAIR = ("sentence1", "sentence2")
GLUE_TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in (
        # CoLA's train/dev files have no header: source code, label, the original "*" mark, sentence.
        GlueTask(name="cola", folder="CoLA", text_columns=("sentence",), label_column="label", labels=_BINARY,
                 metrics=("mcc",), submission_files={"test": "CoLA.tsv"}, hub_text_columns=("sentence",),
                 headerless_columns=("source", "label", "original_label", "sentence")),
        GlueTask(name="sst2", folder="SST-2", text_columns=("sentence",), label_column="label", labels=_BINARY,
                 metrics=("accuracy",), submission_files={"test": "SST-2.tsv"}, hub_text_columns=("sentence",)),
        # MRPC's header is copied from Microsoft's file and starts with a UTF-8 byte order mark.
        GlueTask(name="mrpc", folder="MRPC", text_columns=("#1 String", "#2 String"), label_column="Quality",
                 labels=_BINARY, metrics=("f1", "accuracy"), submission_files={"test": "MRPC.tsv"},
                 hub_text_columns=_PAIR),
        GlueTask(name="stsb", folder="STS-B", text_columns=_PAIR, label_column="score", labels=None,
                 metrics=("spearman", "pearson"), submission_files={"test": "STS-B.tsv"}, hub_text_columns=_PAIR),
        GlueTask(name="qqp", folder="QQP", text_columns=("question1", "question2"), label_column="is_duplicate",
                 labels=_BINARY, metrics=("f1", "accuracy"), submission_files={"test": "QQP.tsv"},
                 hub_text_columns=("question1", "question2"), id_column="id"),
        # Hub order: entailment 0, neutral 1, contradiction 2 (Google's run_classifier used another).
        GlueTask(name="mnli", folder="MNLI", text_columns=_PAIR, label_column="gold_label",
                 labels=("entailment", "neutral", "contradiction"), metrics=("accuracy",),
                 submission_files={"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
                 hub_text_columns=("premise", "hypothesis"), dev_splits=("dev_matched", "dev_mismatched")),
        GlueTask(name="qnli", folder="QNLI", text_columns=("question", "sentence"), label_column="label",
                 labels=_ENTAIL, metrics=("accuracy",), submission_files={"test": "QNLI.tsv"},
                 hub_text_columns=("question", "sentence")),
        GlueTask(name="rte", folder="RTE", text_columns=_PAIR, label_column="label", labels=_ENTAIL,
                 metrics=("accuracy",), submission_files={"test": "RTE.tsv"}, hub_text_columns=_PAIR),
        # WNLI: 1 means entailment, as in the hub's ClassLabel (not_entailment 0, entailment 1).
        GlueTask(name="wnli", folder="WNLI", text_columns=_PAIR, label_column="label", labels=_BINARY,
                 metrics=("accuracy",), submission_files={"test": "WNLI.tsv"}, hub_text_columns=_PAIR),
    )
}


def get_task(name: str) -> GlueTask:
    """The task called `name`: our name or the GLUE folder name, any case ("sst2", "SST-2")."""
    key = name.strip().lower()
    for task in GLUE_TASKS.values():
        if key in (task.name, task.folder.lower()):
            return task
    raise FinetuneDataError(f"Unknown GLUE task {name!r}; known tasks: {', '.join(GLUE_TASKS)}.")


def eval_name(task: GlueTask, split: str) -> str:
    """The name a dev result is reported under: the task name, or "mnli-m" / "mnli-mm"."""
    if task.name == "mnli" and split.startswith("dev_"):
        return "mnli-m" if split == "dev_matched" else "mnli-mm"
    return task.name


def hub_split(split: str) -> str:
    """Our split name (file stem) -> the hub's: dev -> validation, dev_matched -> validation_matched."""
    return "validation" + split[3:] if split.startswith("dev") else split


class HubSpec(NamedTuple):
    """A hub dataset as `datasets.load_dataset` takes it."""

    hub_id: str
    config: Optional[str]
    revision: Optional[str]
    """A branch, tag or commit; e.g. `refs/convert/parquet`, the hub's automatic Parquet copy of a
    dataset whose loading script `datasets` (>= 4) no longer runs."""


def parse_hub_spec(data: str) -> Optional[HubSpec]:
    """`hf:ID[:CONFIG][@REVISION]` (the corpus sources' syntax, plus a revision) -> HubSpec; a
    local path -> None. A revision may hold '/', so it is split off first, at the last '@'."""
    if not data.startswith("hf:"):
        return None
    location, at, revision = data[3:].rpartition("@")
    if not at:
        location, revision = revision, ""
    hub_id, _, config = location.partition(":")
    return HubSpec(hub_id, config or None, revision or None)


def load_hub_split(hub: HubSpec, split: str, default_config: Optional[str] = None):
    """`datasets.load_dataset(ID, CONFIG or default_config, split=split, revision=REVISION)`; any
    failure becomes a FinetuneDataError."""
    from datasets import load_dataset  # lazy: the dataset stack is slow to import

    config = hub.config or default_config
    try:
        return load_dataset(hub.hub_id, config, split=split, revision=hub.revision)
    except Exception as error:  # network, unknown id/config/split/revision: all end the same way
        at = f" at revision {hub.revision}" if hub.revision else ""
        raise FinetuneDataError(f"Cannot load hub dataset {hub.hub_id!r} ({config}, {split}){at}: {error}") from None


def require_hub_columns(rows: Any, needed: Iterable[str], source: str) -> None:
    """Raise a FinetuneDataError naming `source` when the hub rows lack any of the `needed` columns."""
    columns = getattr(rows, "column_names", None)
    if columns is None:  # a plain list of dicts: its first row tells
        columns = list(rows[0]) if len(rows) else []
    missing = [name for name in needed if name not in columns]
    if missing:
        raise FinetuneDataError(f"{source}: missing column(s) {missing} (columns: {list(columns)}).")


def read_text_file(path: Path) -> str:
    """A data file's text (a UTF-8 byte order mark dropped); a FinetuneDataError naming the line
    of the first byte that is not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise FinetuneDataError(f"{path}: line {line} is not valid UTF-8 ({error.reason}).") from None
