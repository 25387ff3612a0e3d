"""The step watchdog: a thread per rank that ends a run whose steps stopped finishing.

A rank waiting for a peer that went silent (a link that drops packets, a stopped or frozen
process, a data read or file write that never returns) otherwise waits inside a collective until
the backend's timeout, or forever outside one. The training loop marks where it is with
`phase(kind, what)` and reports progress with `beat()` (every micro batch, every held-out batch,
every phase change) and `step_done()`. When no beat came within the current phase's limit the
watchdog thread:

1. writes every thread's Python stack (faulthandler; py-spy's native stacks too where installed)
   to SAVE/hang/rank-R.txt, under a first line that is the cause and a `job` line the Slurm
   scripts match;
2. prints that one line: the kind of stall (data stall, checkpoint write, collective...), the
   step, this rank and host, the phase it was in, and the peers that went silent (from the
   heartbeats in the job's store, runtime/heartbeat.py);
3. exits with EXIT_CODE_HANG, on which the Slurm scripts requeue the job; the next job resumes
   from the latest complete checkpoint (a checkpoint being written when the watchdog fired is
   not marked complete, so it is never resumed from).

Limits (--step-timeout, --startup-timeout): start-up, the first step and the first checkpoint
write get the start-up limit (30 min by default, as NVIDIA's resiliency extension gives the
first heartbeat); later steps get the step limit, by default 10x the median of the last measured
steps and at least 5 minutes; later checkpoint writes 10x the longest write so far, at least the
step limit (a write is also a collective: a peer cut off while the job saves must not hold it
for the whole start-up limit). Progress is measured by beats, not whole steps, so a long step
made of many micro batches, or a long evaluation, does not trip it while it advances.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Optional

from bert_ds.errors import first_line, lost_peer
from bert_ds.runtime.heartbeat import Heartbeats, describe_ranks, silent_ranks

EXIT_CODE_HANG = 98
"""A rank's exit code when its watchdog ended the run (slurm/*.sh requeue on it)."""
AUTO_STEP_FACTOR = 10
AUTO_STEP_MINIMUM_S = 300.0
AUTO_CHECKPOINT_FACTOR = 10
STEPS_MEASURED = 50
"""The step limit follows the median of this many latest steps."""

# What each kind of phase is called in the one-line cause.
_STALL = {
    "startup": "start-up stalled",
    "data": "data stall",
    "step": "step stalled",
    "collective": "collective stalled",
    "evaluation": "evaluation stalled",
    "checkpoint": "checkpoint write stalled",
}
_SLOW_KINDS = ("startup", "checkpoint")
"""Rare, long and legitimately slow phases: the start-up limit (a checkpoint write's only until
one write was measured)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    step: Optional[float] = None
    """Seconds without progress within a step (None: auto, 0: the watchdog is off)."""
    startup: float = 1800.0
    """Seconds for start-up, the first step and the first checkpoint write."""

    @property
    def enabled(self) -> bool:
        return self.step != 0

    def describe(self) -> str:
        """The plan's words for these limits."""
        if not self.enabled:
            return "off (--step-timeout 0)"
        step = (f"{AUTO_STEP_FACTOR}x the median measured step, at least {AUTO_STEP_MINIMUM_S:g} s (--step-timeout auto)"
                if self.step is None else f"{self.step:g} s (--step-timeout)")
        return (f"a rank with no progress ends the run (exit {EXIT_CODE_HANG}, stacks in SAVE/hang/): "
                f"steps {step}; start-up, first step and first checkpoint write {self.startup:g} s (--startup-timeout); "
                f"later checkpoint writes {AUTO_CHECKPOINT_FACTOR}x the longest one, at least the step limit")


def job_marker(environ=os.environ) -> str:
    """The hang file's `job` line: the Slurm job and its restart count (a requeued job keeps its id)."""
    return f"job {environ.get('SLURM_JOB_ID', 'none')} run {environ.get('SLURM_RESTART_COUNT', '0')}"


class Watchdog:
    """One rank's watchdog thread; see the module's docstring."""

    def __init__(self, limits: Limits, rank: int, world_size: int, hang_dir: Optional[str], say=None,
                 heartbeats: Optional[Heartbeats] = None, after_exit: str = "to be restarted from the latest complete checkpoint"):
        self.limits, self.rank, self.world_size, self.after_exit = limits, rank, world_size, after_exit
        self.host = socket.gethostname()
        self.hang_dir = Path(hang_dir) if hang_dir else None
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.heartbeats = heartbeats if heartbeats is not None else Heartbeats(rank, world_size, self.host)
        self.step, self.steps_done = 0, 0
        self._phases: list[tuple[str, str]] = [("startup", "start-up: model, engine, data, checkpoint load")]
        self._last_beat = time.monotonic()
        self._step_seconds: deque = deque(maxlen=STEPS_MEASURED)
        self._longest_checkpoint = 0.0  # seconds of the longest checkpoint write finished so far
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._wake_read = self._wake_write = -1
        self._previous_wakeup: Optional[int] = None
        self._readings: tuple = (None, None)
        """The thread's heartbeat readings of the current stall (at half and three quarters of the limit)."""
        self._tripping = threading.Lock()

    # --- called by the training loop (main thread) ---------------------------------------------

    def beat(self) -> None:
        self._last_beat = time.monotonic()

    @contextlib.contextmanager
    def phase(self, kind: str, what: str):
        """The loop is in `kind` (a key of _STALL) doing `what` until the block ends."""
        self._phases.append((kind, what))
        self.beat()
        started = time.monotonic()
        try:
            yield
        except RuntimeError as error:
            if lost_peer(error):  # here, before the phase ends and beats: its stall is still measured
                self.peer_lost(error)  # exits when this rank was stalled too
            raise
        finally:
            self._phases.pop()
            self.beat()
            if kind == "checkpoint":
                self._longest_checkpoint = max(self._longest_checkpoint, time.monotonic() - started)

    def step_done(self, step: Optional[int], seconds: float) -> None:
        """Step `step` (None: count them) finished after `seconds` (its own time, without
        evaluations or checkpoints)."""
        self.steps_done += 1
        self.step = self.steps_done if step is None else step
        if self.steps_done > 1:  # the first step (kernel builds, connections, first reads) is no measure
            self._step_seconds.append(seconds)
        self.beat()

    def step_limit(self) -> float:
        """The step limit now: the fixed one, or auto's from the steps measured so far."""
        if self.limits.step is not None:
            return self.limits.step
        if not self._step_seconds:
            return self.limits.startup
        return max(AUTO_STEP_MINIMUM_S, AUTO_STEP_FACTOR * statistics.median(self._step_seconds))

    def limit(self) -> float:
        kind = self._phases[-1][0]
        if kind == "checkpoint" and self._longest_checkpoint and self.steps_done:
            return max(self.step_limit(), AUTO_CHECKPOINT_FACTOR * self._longest_checkpoint)
        if kind in _SLOW_KINDS or self.steps_done == 0:
            return max(self.limits.startup, self.step_limit())
        return self.step_limit()

    # --- the thread ----------------------------------------------------------------------------

    def start(self) -> "Watchdog":
        """Start the thread (from the main thread: it also takes the signal wake-up descriptor)."""
        if not self.limits.enabled:
            return self
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        try:
            # SIGTERM's C handler writes here even while the main thread is stuck in a collective
            # and cannot run the Python handler: the watchdog then takes the stacks itself.
            self._previous_wakeup = signal.set_wakeup_fd(self._wake_write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread (an in-process caller): no wake-up on signals
            self._previous_wakeup = None
        self._thread = threading.Thread(target=self._watch, name="bert_ds-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is None:
            return
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"\0")
        self._thread.join(timeout=15)
        if self._previous_wakeup is not None:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(self._previous_wakeup)
        self._thread = None

    def _term_grace(self) -> float:
        """How long after SIGTERM a rank without progress counts as stalled (the scheduler kills
        it soon after: Slurm's KillWait is 30 s by default)."""
        return max(5.0, 3 * statistics.median(self._step_seconds)) if self._step_seconds else 30.0

    def _watch(self) -> None:
        # The peers' heartbeats when this stall reached half the limit, and again at three
        # quarters: if the store is gone by the trip (its host, rank 0, tripped a moment earlier
        # and exited), those two readings still name the silent peers.
        self._readings = (None, None)
        terminated_at = None
        while True:
            # Ticks follow the step limit on every rank alike, whatever phase each is in, so that
            # a live peer's heartbeat always changes between the two readings in `_peers`.
            tick = min(max(self.step_limit() / 20, 0.5), 10.0)
            if select.select([self._wake_read], [], [], tick)[0]:
                woken_by = os.read(self._wake_read, 64)
                if self._stopped.is_set():
                    return
                if signal.SIGTERM in woken_by and terminated_at is None:
                    terminated_at = time.monotonic()
            limit, (kind, what) = self.limit(), self._phases[-1]
            self.heartbeats.publish(self.step, what)
            now = time.monotonic()
            idle = now - self._last_beat
            earlier, later = self._readings
            if terminated_at is not None and self._last_beat < terminated_at and kind not in _SLOW_KINDS \
                    and idle > self._term_grace():
                self._trip(kind, what, idle, limit, earlier or (now, self.heartbeats.read()), "when SIGTERM came", later)
            if idle <= limit / 2:
                self._readings = (None, None)
                continue
            if earlier is None:
                earlier = (now, self.heartbeats.read())
            elif later is None and idle > 0.75 * limit:
                later = (now, self.heartbeats.read())
            self._readings = (earlier, later)  # also read by peer_lost, on the main thread
            if idle > limit:
                self._trip(kind, what, idle, limit, earlier, later=later)

    def _peers(self, earlier, later=None) -> str:
        """Who this rank waits for, from two readings of the heartbeats some seconds apart: the
        first (`earlier`) and one taken now, or `later` when the store no longer answers."""
        if not self.heartbeats.enabled or earlier is None:
            return ""
        since, before = earlier
        seen, now = time.monotonic(), self.heartbeats.read()
        if now is None and later is not None and later[1] is not None:
            seen, now = later
        if now is None or before is None:
            return (f"the job's store at {self.heartbeats.store_name} (rank 0's host) cannot be reached "
                    f"({self.heartbeats.error}): the network to it is lost or that process is stopped")
        silent = silent_ranks(before, now, self.world_size)
        if silent:
            return (f"no heartbeat for {seen - since:.0f} s from {describe_ranks(silent, now)}: "
                    "those processes are stopped, dead or cut off")
        behind = [rank for rank, beat in now.items() if beat.step < max(b.step for b in now.values())]
        if behind:
            return f"every rank is alive; behind the others: {describe_ranks(behind, now)}"
        return "every rank is alive and at the same step (a collective or device hang: see the stacks)"

    def peer_lost(self, error: BaseException) -> None:
        """A collective failed because a peer is gone. When this rank had already gone half its
        limit without progress, that peer was most likely the first rank whose watchdog tripped on
        the same stall (it exits, closing its connections, a moment before this rank's own
        watchdog would trip): report the stall here too (stacks, the line, EXIT_CODE_HANG), so that
        every stalled rank leaves its report, and not only whichever tripped first. Otherwise return."""
        if self._thread is None:
            return
        limit, (kind, what) = self.limit(), self._phases[-1]
        idle = time.monotonic() - self._last_beat
        if idle <= limit / 2:
            return
        earlier, later = self._readings
        self._trip(kind, what, idle, limit, earlier, f"when another process's connection closed ({first_line(error, 200)})", later)

    def _trip(self, kind: str, what: str, idle: float, limit: float, earlier, when: str = "", later=None) -> None:
        self._tripping.acquire()  # the thread and the main thread never both report: the first one exits
        peers = self._peers(earlier, later)
        path = self.hang_dir / f"rank-{self.rank}.txt" if self.hang_dir else None
        line = (f"error: hang: {_STALL[kind]} on rank {self.rank} ({self.host}) after step {self.step}: no progress for "
                f"{idle:.0f} s in {what}" + (f" {when}" if when else "") + f" (limit {limit:.0f} s, --step-timeout/--startup-timeout)"
                + (f"; {peers}" if peers else "")
                + (f"; stacks in {path}" if path else "")
                + f"; exiting with code {EXIT_CODE_HANG}" + (f" {self.after_exit}" if self.after_exit else ""))
        try:
            self._write_stacks(path, line)
        finally:
            self.say(line)
            os._exit(EXIT_CODE_HANG)

    def _write_stacks(self, path: Optional[Path], line: str) -> None:
        if path is None:
            faulthandler.dump_traceback(sys.stderr, all_threads=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as out:
            out.write(f"{line}\n{job_marker()}\nrank {self.rank} of {self.world_size} on {self.host}, pid {os.getpid()}, "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n\nPython stacks of every thread (the watchdog's own is the 'Current thread'):\n")
            out.flush()
            faulthandler.dump_traceback(out, all_threads=True)
            if shutil.which("py-spy"):
                out.write("\npy-spy dump --native:\n")
                out.flush()
                try:
                    subprocess.run(["py-spy", "dump", "--native", "--pid", str(os.getpid())], stdout=out,
                                   stderr=subprocess.STDOUT, timeout=60)
                except (OSError, subprocess.SubprocessError) as error:
                    out.write(f"(py-spy failed: {error})\n")


class _Idle:
    """The watchdog's interface doing nothing (no run under watch: tests, benchmarks, fine-tuning)."""

    def beat(self) -> None:
        pass

    @contextlib.contextmanager
    def phase(self, kind: str, what: str):
        yield

    def step_done(self, step: Optional[int], seconds: float) -> None:
        pass


_active = _Idle()


def watching():
    """The active watchdog (or one doing nothing): code deep in a step beats through it."""
    return _active


@contextlib.contextmanager
def watch(watchdog: Watchdog):
    """Make `watchdog` the active one and run its thread for the block."""
    global _active
    previous, _active = _active, watchdog.start()
    try:
        yield watchdog
    finally:
        watchdog.stop()
        _active = previous
