"""bert_ds's cache folder (BERT_DS_CACHE, default ~/.cache/bert_ds) and the lock that lets one
process build a cached file while every other process that needs it waits.

What lives there: the built-in sample's sentencepiece tokenizer and the record indexes of local
JSON Lines and text sources (data/records/index.py; for JSON, built by the start-up check of
every record, data/records/json_lines.py), and the start-up data check of each local source
(data/tokenizer/data_check_cache.py). Point BERT_DS_CACHE at a shared file system
on a cluster, so one process of the whole job builds each of them once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import IO, Iterator, Optional


def cache_dir() -> Path:
    """BERT_DS_CACHE, or ~/.cache/bert_ds when it is unset or empty (an empty value, say from a
    shell substitution that found nothing, would otherwise be the current folder: a checkout
    filled with cache files)."""
    return Path(os.environ.get("BERT_DS_CACHE") or Path.home() / ".cache" / "bert_ds")


@contextlib.contextmanager
def exclusive(lock_path: Path, wait: bool = True, without_locks: str = "") -> Iterator[bool]:
    """Hold an exclusive lock on `lock_path` (created if missing); yields whether it is held
    (always, with `wait`; without, False when another process holds it). The kernel drops it when
    the process dies, so a killed builder never leaves the others waiting. On a file system
    without locks it yields True after one warning per folder, whose second half is
    `without_locks` (the cache's advice by default)."""
    with holding(lock_path, wait, without_locks) as lock:
        yield lock is not None


@contextlib.contextmanager
def holding(lock_path: Path, wait: bool = True, without_locks: str = "") -> Iterator[Optional[IO]]:
    """`exclusive`, yielding the open lock file instead of True (None when another process holds
    it). A child process given its descriptor (Popen's `pass_fds`) holds the lock with this one,
    so the lock lasts while either lives: a step whose parent was killed still keeps it."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        except OSError as error:
            if error.errno not in _NO_LOCKS:
                raise
            _warn_no_locks(lock_path, error, without_locks or CACHE_WITHOUT_LOCKS)
        yield lock


def staging_path(target: Path) -> Path:
    """Where one process builds `target` before `publish` puts it in place (unique per host and
    process: a shared cache folder sees several nodes, whose process ids may repeat)."""
    return target.with_name(f"{target.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def publish(staging: Path, target: Path) -> None:
    """Put a built file or folder in place atomically. When another process put its own there
    first (possible only without locks), keep that one and drop this."""
    try:
        os.replace(staging, target)
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not target.exists():
            raise
        shutil.rmtree(staging, ignore_errors=True)


# What flock raises on a file system that has no locks (Lustre mounted without `flock`, some NFS
# set-ups). Building without the lock is still correct, since a built file is put in place by an
# atomic rename: processes starting together may just build the same file at once.
_NO_LOCKS = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL}
_warned: set[Path] = set()


CACHE_WITHOUT_LOCKS = ("processes may build the same cached file at once; set BERT_DS_CACHE to a folder on a "
                       "file system with locks (e.g. node-local /tmp, or Lustre mounted with -o flock) to build each once.")


def _warn_no_locks(lock_path: Path, error: OSError, consequence: str) -> None:
    if lock_path.parent not in _warned:
        _warned.add(lock_path.parent)
        print(f"bert_ds: warning: {lock_path.parent} cannot be locked ({error.strerror}): {consequence}",
              file=sys.stderr, flush=True)
