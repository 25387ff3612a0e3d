"""Deterministic fault injection for the reliability tests (never set in real runs).

BERT_DS_FAULTS holds comma-separated faults `KIND:POINT:STEP[:RANK]` (RANK: every rank if absent):
    kill:step:7:1          rank 1 SIGKILLs itself right after step 7's optimizer step
    kill:save-middle:9:0   ... while saving step 9: after DeepSpeed's files, before its rank file
    kill:save-end:9:0      ... after every file, before rank 0 marks the checkpoint complete
    nan:step:5             step 5's loss (hence its gradients) becomes NaN
    enospc:save:6:1        saving step 6 fails on rank 1 with "No space left on device", raised by
                           DeepSpeed's own file writes (see `failing_writes`)
Real failures (a killed node, a full disk, a diverging loss) reach the same code paths; injecting
them lets a test put them at exact, repeatable moments.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from dataclasses import dataclass
from typing import Optional

VARIABLE = "BERT_DS_FAULTS"


@dataclass(frozen=True)
class Fault:
    kind: str
    point: str
    step: int
    rank: Optional[int]


def _parse(text: str) -> list[Fault]:
    faults = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        fields = item.split(":")
        if len(fields) not in (3, 4):
            raise ValueError(f"{VARIABLE}: {item!r} is not KIND:POINT:STEP[:RANK]")
        faults.append(Fault(fields[0], fields[1], int(fields[2]), int(fields[3]) if len(fields) == 4 else None))
    return faults


_FAULTS = _parse(os.environ.get(VARIABLE, ""))


def _due(kind: str, point: str, step: int, rank: int) -> bool:
    return any(f.kind == kind and f.point == point and f.step == step and f.rank in (None, rank) for f in _FAULTS)


def at(point: str, step: int, rank: int) -> None:
    """Kill this process when a fault is due here."""
    if _due("kill", point, step, rank):
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def failing_writes(engine, step: int, rank: int):
    """While saving: make DeepSpeed's checkpoint writes fail when an `enospc:save` fault is due."""
    if not _due("enospc", "save", step, rank):
        yield
        return
    writer = engine.checkpoint_engine
    original = writer.save

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "(injected)")

    writer.save = full_disk
    try:
        yield
    finally:
        writer.save = original


def poisoned(step: int, rank: int) -> bool:
    """Whether this step's loss is to be made NaN."""
    return _due("nan", "step", step, rank)
