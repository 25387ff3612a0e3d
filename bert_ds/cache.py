"""bert_ds's cache folder (BERT_DS_CACHE, default ~/.cache/bert_ds) and the lock that lets one
process build a cached file while every other process that needs it waits.

What lives there: the built-in sample's sentencepiece tokenizer and the record indexes of local
JSON Lines and text sources (data/record_index.py; for JSON, built by the start-up check of
every record, data/json_records.py). Point BERT_DS_CACHE at a shared file system
on a cluster, so one process of the whole job builds each of them once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator


def cache_dir() -> Path:
    return Path(os.environ.get("BERT_DS_CACHE", Path.home() / ".cache" / "bert_ds"))


@contextlib.contextmanager
def exclusive(lock_path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on `lock_path` (created if missing); yields whether it is held
    (always, with `wait`; without, False when another process holds it). The kernel drops it when
    the process dies, so a killed builder never leaves the others waiting."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
