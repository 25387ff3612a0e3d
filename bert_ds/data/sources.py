"""Corpus sources: their specs, their files, and their records (local files through
data/records/index.py; hub datasets through `datasets` streaming).

A source is written `[NAME=]LOCATION[@WEIGHT][#LAYOUT]`:
- LOCATION is a local file, directory or glob of `.txt` (one document per file, or per blank-line
  separated block with `txt_documents="blank_line"`), `.jsonl`/`.json` or `.parquet` (a `text`
  field per record), or WikiExtractor output (files such as `AA/wiki_00`, any name, recognised by
  their first line starting with `<doc `: data/records/wikiextractor.py); a folder made by `python -m bert_ds.data.prepare` (data/prepared.py); or a
  hub dataset `hf:ID[:CONFIG][@REVISION]` (e.g. `hf:wikimedia/wikipedia:20231101.en`), read by
  row group from its Parquet files (data/hub/parquet.py), else streamed by `datasets`;
- WEIGHT is the source's share of the training tokens (normalised; default 1), or `words`: a
  prepared folder's word count, so that sources mix as their sizes do (the paper's corpora);
- LAYOUT says how records become documents (data/text/layouts.py: book, article, sentences[:N], lines,
  wikiextractor; default from the source's kind, e.g. `sentences:256` for the hub's BookCorpus);
  books (`book`) lose a Project Gutenberg licence header and footer (data/text/gutenberg.py);
- `sample` names the built-in sample corpus: its books and Wikipedia parts in the paper's
  800M : 2,500M words ratio.

Local files are checked before streaming starts, so a missing file, an unreadable one or a
corrupt Parquet footer is reported by name rather than from inside a reader.
"""

from __future__ import annotations

import functools
import glob
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from bert_ds.data.hub.fs import parse_hub_location
from bert_ds.errors import DataError  # noqa: F401 (raised here; imported from here by callers)

SAMPLE_DIR = Path(__file__).parent / "sample"
# The paper's corpus sizes in words (BooksCorpus 800M, English Wikipedia 2,500M).
PAPER_WEIGHTS = {"books": 800.0, "wiki": 2500.0}
_FORMATS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
SUPPORTED = (".txt, .jsonl, .json or .parquet, or WikiExtractor output (files whose first line "
             "starts with '<doc ', any name)")




@dataclass(frozen=True)
class DataSource:
    """One corpus in the mix."""

    name: str
    """Short label used in messages and statistics."""
    location: str
    """Local path/dir/glob, or `hf:ID[:CONFIG]`."""
    weight: float = 1.0
    """Relative share of documents drawn from this source."""
    layout: str = ""
    """The spec's `#LAYOUT` (data/text/layouts.py); empty: the default for the source's kind."""

    @property
    def is_hub(self) -> bool:
        return self.location.startswith("hf:")

    @property
    def is_prepared(self) -> bool:
        from bert_ds.data.prepared import is_prepared

        return not self.is_hub and is_prepared(self.location)


# The sample split the demo and evaluation use: books and half the Wikipedia articles train, the
# other half is held out (`--eval-interval` on the sample scores them).
SAMPLE_TRAIN_SPECS = [f"books={SAMPLE_DIR}/books/*.txt@{PAPER_WEIGHTS['books']:g}",
                      f"wiki={SAMPLE_DIR}/wiki/enwiki-train.jsonl@{PAPER_WEIGHTS['wiki']:g}"]
SAMPLE_HELD_OUT_SPEC = f"wiki-held-out={SAMPLE_DIR}/wiki/enwiki-held-out.jsonl"


def is_sample(specs: list[str] | None) -> bool:
    """The specs name the built-in sample (whole, or its training part)."""
    return not specs or specs == ["sample"] or specs == SAMPLE_TRAIN_SPECS


def sample_sources() -> list[DataSource]:
    """The built-in sample corpus: books + Wikipedia, weighted as in the paper."""
    return [
        DataSource("books", str(SAMPLE_DIR / "books" / "*.txt"), PAPER_WEIGHTS["books"]),
        DataSource("wiki", str(SAMPLE_DIR / "wiki" / "*.jsonl"), PAPER_WEIGHTS["wiki"]),
    ]


def parse_sources(specs: list[str] | None) -> list[DataSource]:
    """`--data` strings -> DataSources; no specs (or "sample") means the built-in sample."""
    if not specs:
        return sample_sources()
    sources: list[DataSource] = []
    for spec in specs:
        if spec == "sample":
            sources.extend(sample_sources())
            continue
        name, _, rest = spec.rpartition("=") if "=" in spec.split(":", 1)[0] else ("", "", spec)
        layout = ""
        if "#" in rest:
            rest, _, layout = rest.rpartition("#")
            _parse_layout_of(spec, layout)
        location, weight_text = rest, ""
        if "@" in rest:
            location, _, weight_text = rest.rpartition("@")
            if location.startswith("hf:") and not _is_weight(weight_text):
                location, weight_text = rest, ""  # the hub revision: hf:ID[:CONFIG]@REVISION
        if not location:
            raise DataError(f"Data source {spec!r} names no location.")
        if location.startswith("hf:"):
            parse_hub_location(location)  # a malformed id fails here, not at the first read
        name = name or _default_name(location, len(sources))
        weight = _weight(spec, name, location, weight_text) if weight_text else 1.0
        sources.append(DataSource(name, location, weight, layout))
    names = [source.name for source in sources]
    if len(set(names)) != len(names):
        raise DataError(f"Data source names must be unique, got {names}; name them as NAME=LOCATION.")
    return sources


def _is_weight(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == "words"
    return True


def _weight(spec: str, name: str, location: str, text: str) -> float:
    """A spec's `@WEIGHT`: a positive number, or `words` (a prepared folder's word count)."""
    if text == "words":
        from bert_ds.data.prepared import is_prepared, prepared_words

        if location.startswith("hf:") or not is_prepared(location):
            raise DataError(f"Data source {spec!r}: weight 'words' needs a folder made by python -m bert_ds.data.prepare "
                            f"(it reads the word count from its manifest), and {location} is not one.")
        return float(prepared_words(name, location))
    try:
        weight = float(text)
    except ValueError:
        raise DataError(f"Data source {spec!r}: weight {text!r} is not a number (nor 'words').") from None
    if not (weight > 0 and math.isfinite(weight)):
        raise DataError(f"Data source {spec!r}: weight must be positive and finite, got {weight}.")
    return weight


def _parse_layout_of(spec: str, layout: str):
    from bert_ds.data.text.layouts import LayoutError, parse_layout

    try:
        return parse_layout(layout)
    except LayoutError as error:
        raise DataError(f"Data source {spec!r}: {error}.") from None


def record_layout(source: DataSource, files: Optional[list[str]] = None):
    """The source's RecordLayout: its spec's `#LAYOUT`, else the default for its kind (local
    sources: by their files' format; `files` when the caller has listed them already)."""
    from bert_ds.data.text.layouts import default_layout

    if source.layout:
        return _parse_layout_of(source.location, source.layout)
    if source.is_prepared:
        from bert_ds.data.prepared import prepared_layout

        return _parse_layout_of(source.location, prepared_layout(source.name, source.location) or "article")
    if source.is_hub:
        return default_layout(source.location, None)
    return default_layout(source.location, source_kind(source, files))


def file_kind(path: str, layout: str = "") -> Optional[str]:
    """How a local file is read: "json" and "parquet" by their extension; "wikiextractor" for a
    file of another extension (or none) whose first line starts with `<doc `, or any such file
    under the layout `wikiextractor`; "text" for other `.txt` files; None: not a corpus file."""
    kind = _FORMATS.get(Path(path).suffix)
    if kind in ("json", "parquet"):
        return kind
    if layout == "wikiextractor" or _starts_with_doc(*file_key(path)):
        return "wikiextractor"
    return kind


@functools.lru_cache(maxsize=None)
def _starts_with_doc(path: str, size: int, mtime: int) -> bool:
    from bert_ds.data.records.wikiextractor import is_wikiextractor

    return is_wikiextractor(path)


def source_kind(source: DataSource, files: Optional[list[str]] = None) -> str:
    """The kind (file_kind) of a local source's files; local_files refuses a source that mixes kinds."""
    return file_kind((files or local_files(source))[0], source.layout)


def reader_kind(source: DataSource, files: list[str], txt_documents: str = "file") -> str:
    """Which reader file_records gives the source's files: its kind, with .txt files of several
    blank-line-separated documents read as "paragraphs"."""
    kind = source_kind(source, files)
    return "paragraphs" if kind == "text" and blank_line_documents(source, files, txt_documents) else kind


def _listed(path: Path) -> bool:
    """A folder's file that is part of the corpus: a known extension, or WikiExtractor output."""
    if path.suffix in _FORMATS:
        return True
    return not path.name.startswith(".") and _starts_with_doc(*file_key(str(path)))


def _default_name(location: str, index: int) -> str:
    if location.startswith("hf:"):
        return location[3:].split("@")[0].split(":")[0].split("/")[-1]
    stem = Path(location.rstrip("/*")).stem or f"source{index}"
    return stem.replace("*", "") or f"source{index}"


def local_files(source: DataSource) -> list[str]:
    """The files of a local source, sorted, each checked to exist and be readable."""
    location = source.location
    if os.path.isdir(os.path.join(location, ".prepare")) and not source.is_prepared:
        raise DataError(f"Data source {source.name!r}: {location} is still being prepared (no manifest.json yet); "
                        "finish it by running its python -m bert_ds.data.prepare command again.")
    if source.is_prepared:
        from bert_ds.data.prepared import prepared_files

        files = prepared_files(source.name, location)
    elif os.path.isdir(location):
        files = sorted(str(path) for path in Path(location).rglob("*") if path.is_file() and _listed(path))
    elif any(char in location for char in "*?["):
        files = sorted(glob.glob(location, recursive=True))
    else:
        files = [location]
    if not files:
        raise DataError(f"Data source {source.name!r}: no files match {location!r}.")
    for path in files:
        if not os.path.isfile(path):
            raise DataError(f"Data source {source.name!r}: file not found: {path}")
        if not os.access(path, os.R_OK):
            raise DataError(f"Data source {source.name!r}: file is not readable: {path}")
    kinds = {path: file_kind(path, source.layout) for path in files}
    unknown = [path for path, kind in kinds.items() if kind is None]
    if unknown:
        names = sorted({Path(path).suffix or "no extension" for path in unknown})
        raise DataError(f"Data source {source.name!r}: unsupported file type {names} ({unknown[0]}; use {SUPPORTED}): "
                        f"{location}")
    if len(set(kinds.values())) > 1:
        found = sorted({f"{kind} ({Path(path).name})" for path, kind in kinds.items()})
        raise DataError(f"Data source {source.name!r} mixes file types {found[:4]}; split it in two.")
    if kinds[files[0]] == "parquet" and not source.is_prepared:  # prepared: sha256 in check_sources
        from bert_ds.data.records.parquet import check_parquet_footers

        check_parquet_footers(source.name, files)
    return files


def check_sources(sources: list[DataSource], txt_documents: str = "file") -> None:
    """Check every local source's files now, so a bad path or record fails at start-up, not mid-run
    in a worker: files exist and are readable, Parquet footers have a string `text` column with no
    nulls, and every JSON record is an object with a string `text` (data/records/json_lines.py). JSON
    files and .txt files of blank-line-separated documents get their record indexes built here
    (once per file, then cached), by the processes starting together at once."""
    for source in sources:
        if source.is_hub:
            hub_parquet(source)  # lists the files, reads (and caches) the footers
            continue
        files = local_files(source)
        key = (source.name, txt_documents, tuple(file_key(path) for path in files))
        if key in _CHECKED_SOURCES:  # rank 0 checks in its plan, then in its loader
            continue
        if source.is_prepared:
            from bert_ds.data.prepared import verify_shards

            verify_shards(source.name, source.location)
        kind = source_kind(source, files)
        if kind == "wikiextractor":
            _check_wikiextractor(source, files)
        elif kind == "json":
            from bert_ds.data.records.json_lines import check_json_files

            if check_json_files(source.name, files) == 0:
                raise DataError(f"Data source {source.name!r}: its files hold no JSON record: {source.location}")
        elif kind == "text" and blank_line_documents(source, files, txt_documents):
            from bert_ds.data.records.index import index_paragraph_files

            index_paragraph_files(source.name, files)
        _CHECKED_SOURCES.add(key)


def _check_wikiextractor(source: DataSource, files: list[str]) -> None:
    """Index WikiExtractor files (each scanned once, then cached) and print what is malformed in
    them, one warning line per file and kind of problem (rank 0; at most MAX_WARNINGS lines)."""
    from bert_ds.data.records.wikiextractor import describe_problems, index_wikiextractor_files

    indexes = index_wikiextractor_files(source.name, files)
    if not sum(index["count"] for index in indexes):
        raise DataError(f"Data source {source.name!r}: its files hold no <doc> document: {source.location}")
    if os.environ.get("RANK", "0") != "0":
        return
    lines = [line for path, index in zip(files, indexes) for line in describe_problems(path, index["problems"])]
    for line in lines[:MAX_WARNINGS]:
        print(f"warning: data source {source.name!r}: {line}", file=sys.stderr, flush=True)
    if len(lines) > MAX_WARNINGS:
        print(f"warning: data source {source.name!r}: {len(lines) - MAX_WARNINGS:,} more such lines", file=sys.stderr)


MAX_WARNINGS = 10
"""Lines of malformed-file warnings one source prints at start-up."""

_CHECKED_SOURCES: set[tuple] = set()
"""Sources (their files' paths, sizes and mtimes) that passed check_sources in this process."""


def file_key(path: str) -> tuple:
    """(path, size, modification time): a file's state, for what is computed from it and kept."""
    status = os.stat(path)
    return path, status.st_size, status.st_mtime_ns


def epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    """The epoch's seeded order of a source's `count` files (the order its records are numbered in)."""
    return [int(i) for i in np.random.default_rng([seed, epoch]).permutation(count)]


def epoch_files(source: DataSource, seed: int, epoch: int) -> list[str]:
    """A local source's files in the epoch's seeded order."""
    files = local_files(source)
    return [files[i] for i in epoch_order(len(files), seed, epoch)]


def blank_line_documents(source: DataSource, files: list[str], txt_documents: str = "file") -> bool:
    """Whether the source's .txt files hold several documents separated by blank lines (its
    layout says so, e.g. `lines`, or --txt-documents blank_line), rather than one per file."""
    if txt_documents not in ("file", "blank_line"):
        raise DataError(f"txt_documents must be 'file' or 'blank_line', got {txt_documents!r}.")
    return record_layout(source, files).blank_line_documents or txt_documents == "blank_line"


def hub_parquet(source: DataSource, commit: Optional[str] = None):
    """A hub source's Parquet files at `commit` (default: its revision's commit now) as
    data/hub/parquet.py's HubParquet, or None when it has none and `datasets` streams it."""
    from bert_ds.data.hub.parquet import resolve

    return resolve(source.name, source.location, commit)


def streams_whole(source: DataSource) -> bool:
    """The source is one stream that every shard reads from its start (a hub dataset without
    Parquet files), rather than chunks a shard reads only its own of."""
    return source.is_hub and hub_parquet(source) is None


def source_epoch(source: DataSource, seed: int, epoch: int, txt_documents: str = "file", opened: Optional[dict] = None,
                 commit: Optional[str] = None):
    """One epoch of a local or hub-Parquet source as data/records/index.py's EpochRecords (record
    r found without reading the ones before it). `opened` keeps each file's reader between
    epochs; `commit` pins a hub source (a resumed run's)."""
    from bert_ds.data.records.index import EpochRecords

    opened = {} if opened is None else opened
    group = record_layout(source).group
    if source.is_hub:
        from bert_ds.data.hub.parquet import RemoteParquetRecords

        files = hub_parquet(source, commit).files
        ordered = [files[i] for i in epoch_order(len(files), seed, epoch)]
        for hub_file in ordered:
            if hub_file.path not in opened:
                opened[hub_file.path] = RemoteParquetRecords(source.name, hub_file, group)
        return EpochRecords([opened[f.path] for f in ordered])
    files = epoch_files(source, seed, epoch)
    kind = reader_kind(source, files, txt_documents)
    for path in files:
        if path not in opened:
            opened[path] = file_records(source.name, path, group, kind, source.is_prepared)
    return EpochRecords([opened[path] for path in files])


def file_records(source_name: str, path: str, group: int, kind: str, whole_row_groups: bool = False):
    """The reader of one local file (data/records/index.py's FileRecords) for its reader_kind; a
    Parquet file with `whole_row_groups` (a prepared shard) makes each row group one chunk."""
    if kind == "parquet":
        from bert_ds.data.records.parquet import local_parquet_records

        return local_parquet_records(source_name, path, group, whole_row_groups)
    if kind == "json":
        from bert_ds.data.records.json_lines import JsonLinesRecords

        return JsonLinesRecords(source_name, path, group)
    if kind == "wikiextractor":
        from bert_ds.data.records.wikiextractor import WikiExtractorRecords

        return WikiExtractorRecords(source_name, path, group)
    from bert_ds.data.records.index import ParagraphRecords, TextFileRecords

    return (ParagraphRecords if kind == "paragraphs" else TextFileRecords)(source_name, path, group)


def load_source(source: DataSource):
    """A hub source without Parquet files as a streaming `datasets.IterableDataset` (resumable
    with its state_dict)."""
    from datasets import load_dataset

    hub = parse_hub_location(source.location)
    try:
        return load_dataset(hub.hub_id, hub.config, split="train", streaming=True, revision=hub.revision)
    except Exception as error:  # network, unknown id, missing config: all end the same way
        raise DataError(f"Data source {source.name!r}: cannot open hub dataset {hub.hub_id!r}: {error}") from None


def document_stream(source: DataSource, seed: int, epoch: int, txt_documents: str = "file") -> Iterator[dict]:
    """Every record of one source for one epoch, in order (files in the epoch's seeded order)."""
    if streams_whole(source):
        return iter(load_source(source))
    return source_epoch(source, seed, epoch, txt_documents).iter_records()


def record_text(record: dict, source: DataSource, position: int) -> str:
    """The record's text, or a DataError naming the source and record when it has none."""
    text = record.get("text")
    if not isinstance(text, str):
        kind = type(text).__name__
        problem = "has no text field 'text'" if text is None else f"has 'text' of type {kind}, not a string"
        raise DataError(
            f"Data source {source.name!r} ({source.location}): record {position} {problem} "
            f"(fields: {sorted(record)})."
        )
    return text


def iter_document_texts(specs: list[str] | None, max_documents: Optional[int] = None, seed: int = 0) -> Iterator[str]:
    """Cleaned document texts of the given sources (all of them, mixed), e.g. for tokenizer training."""
    from bert_ds.data.text.cleaning import TextStats, clean_document

    stats, produced = TextStats(), 0
    sources = parse_sources(specs)
    check_sources(sources)
    for source in sources:
        strip_licence = record_layout(source).strips_licence
        for position, record in enumerate(document_stream(source, seed=seed, epoch=0)):
            if max_documents is not None and produced >= max_documents:
                return
            text = clean_document(record_text(record, source, position), stats, strip_licence)
            if text:
                produced += 1
                yield text
