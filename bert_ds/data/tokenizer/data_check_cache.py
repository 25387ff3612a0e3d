"""The start-up data check (vocab_check.sample_source), read once per state of a local corpus.

Every start of a run reads the first documents of each source, splits their sentences and
tokenizes them: about half a second of one core for the built-in sample, paid again by each dry
run, each requeued or resubmitted job and each phase. A local source's result is the same as long
as its files, the tokenizer, the reading settings and the reading code are, so it is kept under
BERT_DS_CACHE/data-check, keyed by all of these:

- every file of the source (real path, size, modification time), as the record indexes are keyed;
- the tokenizer's content (the files its `save` writes) and its casing, not its path, so a
  tokenizer trained again into the same folder is checked again;
- the seed, the sentence splitter and the sample's size;
- bert_ds/data's own source files (path, size, modification time): a change of how text is read
  or cleaned checks again, without anyone remembering to bump a version.

Hub sources are read every time (their files are not ours to stat). A cache that cannot be
written only costs the next start the same check.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path

from bert_ds.data.sources import DataSource, local_files
from bert_ds.data.text.splitters import DEFAULT_SPLITTER
from bert_ds.data.tokenizer.vocab_check import SAMPLE_CHARACTERS, SAMPLE_DOCUMENTS, SourceSample, sample_source

DATA_PACKAGE = Path(__file__).resolve().parents[1]
"""bert_ds/data: its files key the cache (the readers, cleaning, splitters and this check)."""


def checked_sample(source: DataSource, tokenizer, seed: int, sentence_splitter: str = DEFAULT_SPLITTER) -> SourceSample:
    """`sample_source(source, tokenizer, seed)`, from the cache when nothing it depends on changed."""
    if source.is_hub:
        return sample_source(source, tokenizer, seed, sentence_splitter=sentence_splitter)
    entry = cache_entry(source, tokenizer, seed, sentence_splitter)
    try:
        return SourceSample(**json.loads(entry.read_text()))
    except (OSError, ValueError, TypeError):  # not there yet, or unreadable: check again
        pass
    sample = sample_source(source, tokenizer, seed, sentence_splitter=sentence_splitter)
    _store(entry, sample)
    return sample


def cache_entry(source: DataSource, tokenizer, seed: int, sentence_splitter: str) -> Path:
    from bert_ds.runtime.cache import cache_dir

    key = json.dumps([source.name, source.layout, [_file_state(path) for path in local_files(source)],
                      tokenizer_fingerprint(tokenizer), seed, sentence_splitter, SAMPLE_DOCUMENTS, SAMPLE_CHARACTERS,
                      _reading_code()])
    return cache_dir() / "data-check" / f"{hashlib.sha1(key.encode()).hexdigest()}.json"


def tokenizer_fingerprint(tokenizer) -> str:
    """A digest of what defines the tokenizer: the files `save` writes, its class and its casing."""
    digest = hashlib.sha1(f"{type(tokenizer).__name__}\n{tokenizer.casing()}\n".encode())
    with tempfile.TemporaryDirectory(prefix="bert_ds-tokenizer-") as folder:
        tokenizer.save(folder)
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                digest.update(f"{path.relative_to(folder)}\n".encode() + path.read_bytes())
    return digest.hexdigest()


def _file_state(path: str) -> tuple[str, int, int]:
    status = os.stat(path)
    return os.path.realpath(path), status.st_size, status.st_mtime_ns


def _reading_code() -> list[tuple[str, int, int]]:
    return [_file_state(str(path)) for path in sorted(DATA_PACKAGE.rglob("*.py"))]


def _store(entry: Path, sample: SourceSample) -> None:
    from bert_ds.runtime.cache import publish, staging_path

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = staging_path(entry)
        staging.write_text(json.dumps(dataclasses.asdict(sample)))
        publish(staging, entry)
    except OSError:
        pass
