"""Rank heartbeats in the job's rendezvous store, so that a rank whose step stalls can say which
peer went silent.

Every rank's watchdog thread (training/loop/watchdog.py) writes `bert_ds/heartbeat/<rank>` every
few seconds: a counter that grows with each write, the rank's step and phase, and its host. The
store is the TCPStore the process group was built on (MASTER_ADDR:MASTER_PORT, served by rank 0
or the launcher), reached through a connection of the watchdog's own with a short timeout, so a
lost store never blocks the collectives' connection and a lost peer never blocks the watchdog
for long.

Nothing compares clocks across hosts: a peer is silent when its counter did not change between
two readings the watchdog took itself, some seconds apart. A process that is stopped, dead,
frozen in the kernel or cut off by the network stops writing; a live process stuck in a
collective keeps writing (the wait releases Python's lock), and its step and phase then tell
who the others are waiting for.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import threading
import time
from typing import Optional

KEY = "bert_ds/heartbeat/{rank}"


@dataclasses.dataclass(frozen=True)
class Beat:
    """One rank's latest heartbeat."""

    count: int
    step: int
    phase: str
    host: str


class Heartbeats:
    """This rank's heartbeat writer and the reader of every rank's (world > 1 only)."""

    def __init__(self, rank: int, world_size: int, host: str, timeout_s: float = 5.0, environ=os.environ):
        self.rank, self.world_size, self.host = rank, world_size, host
        self.address = environ.get("MASTER_ADDR")
        self.port = int(environ["MASTER_PORT"]) if environ.get("MASTER_PORT") else None
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.count = 0
        self.error = ""
        """Why the store could not be reached the last time (empty while it can)."""
        self._store = None
        self._stuck: Optional[threading.Thread] = None
        self._stuck_since = 0.0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1 and self.address is not None and self.port is not None

    @property
    def store_name(self) -> str:
        return f"{self.address}:{self.port}"

    def _connect(self):
        if self._store is None:
            import torch.distributed as dist

            self._store = dist.TCPStore(self.address, self.port, is_master=False, timeout=self.timeout,
                                        wait_for_workers=False)
        return self._store

    def _bounded(self, operation):
        """`operation(store)`'s result, or None (with `error` set) when the store cannot be reached
        within the timeout. A store request over a link that silently drops packets can wait
        without end whatever the store's timeout says, so it runs in a thread of its own that is
        abandoned if it does not return; while one is stuck, no other is started."""
        if self._stuck is not None and self._stuck.is_alive():
            self.error = f"a request to it has had no answer for {time.monotonic() - self._stuck_since:.0f} s"
            return None
        outcome = {}

        def attempt():
            try:
                outcome["value"] = operation(self._connect())
            except Exception as error:  # a timeout, a refused or reset connection
                outcome["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"

        thread = threading.Thread(target=attempt, name="bert_ds-heartbeat", daemon=True)
        started = time.monotonic()
        thread.start()
        thread.join(self.timeout.total_seconds() + 1)
        if thread.is_alive():
            self._stuck, self._stuck_since, self._store = thread, started, None
            self.error = f"no answer within {self.timeout.total_seconds():g} s"
            return None
        if "error" in outcome:
            self._store, self.error = None, outcome["error"]
            return None
        self.error = ""
        return outcome["value"]

    def publish(self, step: int, phase: str) -> bool:
        """Write this rank's heartbeat; False (with `error` set) when the store cannot be reached."""
        if not self.enabled:
            return False
        self.count += 1
        value = json.dumps({"count": self.count, "step": step, "phase": phase, "host": self.host})
        return self._bounded(lambda store: store.set(KEY.format(rank=self.rank), value) or True) is not None

    def read(self) -> Optional[dict[int, Beat]]:
        """Every rank's latest heartbeat that exists; None when the store cannot be reached."""
        if not self.enabled:
            return None

        def read_all(store):
            beats = {}
            for rank in range(self.world_size):
                key = KEY.format(rank=rank)
                if store.check([key]):  # get() would wait for a key that was never written
                    fields = json.loads(store.get(key))
                    beats[rank] = Beat(fields["count"], fields["step"], fields["phase"], fields["host"])
            return beats

        return self._bounded(read_all)


def silent_ranks(before: dict[int, Beat], after: dict[int, Beat], world_size: int) -> list[int]:
    """Ranks whose heartbeat did not change between two readings (or that never wrote one)."""
    return [rank for rank in range(world_size)
            if rank not in after or (rank in before and after[rank].count == before[rank].count)]


def describe_ranks(ranks: list[int], beats: dict[int, Beat]) -> str:
    """'rank 2 on node2 (at step 17, PHASE), rank 3 ...' for the hang report."""
    parts = []
    for rank in ranks:
        beat = beats.get(rank)
        parts.append(f"rank {rank}" + (f" on {beat.host} (at step {beat.step}, {beat.phase})" if beat else " (never heard from)"))
    return ", ".join(parts)
