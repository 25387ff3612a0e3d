"""One experiment folder shared by several jobs (Table 5's `--rows`: a row, or a model and its
cells, a job each).

- The options that decide a result are written once, to OUTPUT/options.json; a later job with
  another value is refused, naming the option, so that cells made with different settings never
  meet in one table.
- A step (a pre-training, a cell) is claimed with an advisory lock on its folder: a second job that
  needs the same step waits for the first to finish it and then finds it done, instead of training
  into the same checkpoint folder. Waiting polls, so that a signal to stop still ends the job.
- Files several jobs update (the step times) are read, changed and written under a lock, each
  writer through a temporary file of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Callable, Iterator

from bert_ds.errors import ConfigError

OPTIONS_FILE = "options.json"
POLL_SECONDS = 5.0


def check_options(output: Path, options: dict) -> None:
    """Record `options` in OUTPUT/options.json on the first run; refuse a later one that differs."""
    path = output / OPTIONS_FILE
    with locked(output / ".options.lock"):
        if not path.is_file():
            write_whole(path, json.dumps(options, indent=1))
            return
        recorded = json.loads(path.read_text())
    differing = [name for name in options if name in recorded and recorded[name] != options[name]]
    if differing:
        said = "; ".join(f"{name} {options[name]!r} where it has {recorded[name]!r}" for name in differing)
        raise ConfigError(f"{output}: made with other settings ({path}): {said}. Every job of one experiment "
                          "needs the same ones; use another --output for other settings.")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created), held for the block; waits without polling."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def claimed(claim: Path, what: str, still_running: Callable[[], None], say: Callable[[str], None]) -> Iterator[None]:
    """Hold the lock file `claim` for the block. If another job holds it, say so once and wait,
    calling `still_running` (which raises to stop) between tries."""
    claim.parent.mkdir(parents=True, exist_ok=True)
    with open(claim, "a") as handle:
        waited = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited:
                    say(f"{what}: another job is running it; waiting for that job to finish it")
                    waited = True
                still_running()
                time.sleep(POLL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def update_json(path: Path, change: Callable[[dict], None]) -> None:
    """Read the JSON object at `path` ({} if none), apply `change` to it and write it back, under a lock."""
    with locked(path.with_name(f".{path.name}.lock")):
        record = json.loads(path.read_text()) if path.is_file() else {}
        change(record)
        write_whole(path, json.dumps(record, indent=1))


def write_whole(path: Path, text: str) -> None:
    """Write to a temporary file of this process, then move it in place: a reader never sees half."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.replace(path)
