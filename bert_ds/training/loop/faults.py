"""Deterministic fault injection for the reliability tests (never set in real runs).

BERT_DS_FAULTS holds comma-separated faults `KIND:POINT:STEP[:RANK]` (RANK: every rank if absent):
    kill:step:7:1          rank 1 SIGKILLs itself right after step 7's optimizer step
    kill:save-middle:9:0   ... while saving step 9: after DeepSpeed's files, before its rank file
    kill:save-end:9:0      ... after every file, before rank 0 marks the checkpoint complete
    nan:step:5             step 5's loss (hence its gradients) becomes NaN
    enospc:save:6:1        saving step 6 fails on rank 1 with "No space left on device", raised by
                           DeepSpeed's own file writes (see `failing_writes`)
    slow=2.5:micro-batch:4 every micro batch of step 4 takes 2.5 s longer: a slow step that keeps
                           progressing (the watchdog must not end it)
    slow=6:save:6          writing step 6's checkpoint takes 6 s longer
Real failures (a killed node, a full disk, a diverging loss) reach the same code paths; injecting
them lets a test put them at exact, repeatable moments.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from typing import Optional

VARIABLE = "BERT_DS_FAULTS"


@dataclass(frozen=True)
class Fault:
    kind: str
    point: str
    step: int
    rank: Optional[int]
    seconds: float = 0.0
    """How long a `slow=SECONDS` fault sleeps."""


def _parse(text: str) -> list[Fault]:
    faults = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        fields = item.split(":")
        if len(fields) not in (3, 4):
            raise ValueError(f"{VARIABLE}: {item!r} is not KIND:POINT:STEP[:RANK]")
        kind, _, seconds = fields[0].partition("=")
        faults.append(Fault(kind, fields[1], int(fields[2]), int(fields[3]) if len(fields) == 4 else None,
                            float(seconds or 0)))
    return faults


_FAULTS = _parse(os.environ.get(VARIABLE, ""))


def _matching(kind: str, point: str, step: int, rank: int) -> list[Fault]:
    return [f for f in _FAULTS if f.kind == kind and f.point == point and f.step == step and f.rank in (None, rank)]


def _due(kind: str, point: str, step: int, rank: int) -> bool:
    return bool(_matching(kind, point, step, rank))


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


def delay(point: str, step: int, rank: int) -> None:
    """Sleep as long as a `slow=SECONDS` fault due here says."""
    for fault in _matching("slow", point, step, rank):
        time.sleep(fault.seconds)


def poisoned(step: int, rank: int) -> bool:
    """Whether this step's loss is to be made NaN."""
    return _due("nan", "step", step, rank)
