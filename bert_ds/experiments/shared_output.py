"""One experiment folder shared by several jobs (Table 5's `--rows`: a row, or a model and its
cells, a job each).

- The options that decide a result are written to OUTPUT/options.json by the first job; a later
  job with another value is refused, naming the option, so that cells made with different
  settings never meet in one table. While nothing has been made with them (a first job that
  failed on a typo), a job's options replace the record instead.
- A step (a pre-training, a cell) is claimed with an advisory lock: a second job that needs the
  same step waits for the first to finish it and then finds it done, instead of training into the
  same checkpoint folder. Waiting polls, so that a signal to stop still ends the job. The step's
  process holds the lock too (its descriptor is passed on), so that a job killed alone (`kill -9`
  of the experiment, not of its steps) leaves the step it ran claimed until that step, and any
  process it passed the descriptor on to, ends. A job that saw its step end releases the claim for
  every holder, so a finished step's leftover child never keeps it.
- Files several jobs update (the step times, the report) are read, changed and written under a
  lock, each writer through a temporary file of its own (host and process in its name).

Locks are flock's (runtime/cache.py's `exclusive`): on a file system without them (Lustre without
`-o flock`, NFS with `nolock`) each job warns once and goes on unlocked, and node-local locks (NFS
`local_lock`, Lustre `localflock`) do not reach jobs on other nodes: there, run the jobs of one
folder one after the other, or on one node.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from bert_ds.errors import ConfigError
from bert_ds.runtime.cache import exclusive, holding, staging_path

OPTIONS_FILE = "options.json"
POLL_SECONDS = 5.0
_THREADS = threading.Lock()
WITHOUT_LOCKS = ("jobs of this experiment folder cannot see each other's steps: run them one after the other "
                 "(or put --output on a file system with locks).")


def check_options(output: Path, options: dict, anything_made: bool, record: bool = True) -> None:
    """Record `options` in OUTPUT/options.json; refuse a job whose options differ from a record
    that something was made with. Options the record predates are added to it. With `record`
    False (a job that only reads the folder) nothing is written: its options are only checked."""
    path = output / OPTIONS_FILE
    with locked(output / ".options.lock"):
        recorded = json.loads(path.read_text()) if path.is_file() else {}
        differing = [name for name in options if name in recorded and recorded[name] != options[name]]
        if differing and anything_made:
            said = "; ".join(f"{name} {options[name]!r} where it has {recorded[name]!r}" for name in differing)
            raise ConfigError(f"{output}: made with other settings ({path}): {said}. Every job of one experiment "
                              "needs the same ones; use another --output for other settings.")
        if record and (differing or set(options) - set(recorded)):
            write_whole(path, json.dumps({**recorded, **options}, indent=1))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the file `path` (created) for the block; waits for it."""
    with exclusive(path, without_locks=WITHOUT_LOCKS):
        yield


@contextlib.contextmanager
def claimed(claim: Path, what: str, still_running: Callable[[], None], say: Callable[[str], None]) -> Iterator[int]:
    """Hold the lock file `claim` for the block, yielding its descriptor (for the step's process to
    hold it as well: Popen's `pass_fds`). If another job holds it, say so once and wait, calling
    `still_running` (which raises to stop) between tries."""
    waited = False
    while True:
        with holding(claim, wait=False, without_locks=WITHOUT_LOCKS) as lock:
            if lock is not None:
                try:
                    yield lock.fileno()
                finally:  # for every holder: a step's leftover child (a launcher's helper) must not keep it
                    _unlock(lock)
                return
        if not waited:
            say(f"{what}: another job is running it; waiting for that job to finish it")
            waited = True
        still_running()
        time.sleep(POLL_SECONDS)


def _unlock(lock) -> None:
    """Release the flock of `lock`'s open file for every process sharing it (children given its
    descriptor included); the step that held it has ended, since `claimed`'s block waits for it."""
    try:
        fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:  # a file system without locks: nothing was held
        pass


def update_json(path: Path, change: Callable[[dict], None]) -> None:
    """Read the JSON object at `path` ({} if none), apply `change` to it and write it back, under a lock
    (this process's thread lock too: without flock, steps of one job running at once still take turns)."""
    with _THREADS, locked(path.with_name(f".{path.name}.lock")):
        record = json.loads(path.read_text()) if path.is_file() else {}
        change(record)
        write_whole(path, json.dumps(record, indent=1))


def write_whole(path: Path, text: str) -> None:
    """Write to a temporary file of this process, then move it in place: a reader never sees half."""
    temporary = staging_path(path)
    temporary.write_text(text)
    temporary.replace(path)


def save_figure(figure, path: Path) -> None:
    """A matplotlib figure saved as PNG through a temporary file of this process and closed, as
    write_whole writes text: a reader never sees half a picture, and two jobs never write one file."""
    import matplotlib.pyplot as plt

    temporary = staging_path(path)
    figure.savefig(temporary, dpi=110, format="png")
    plt.close(figure)
    temporary.replace(path)
