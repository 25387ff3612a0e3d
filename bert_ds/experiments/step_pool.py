"""Run an experiment's steps N at a time, each as soon as a slot is free and the steps it needs have
ended.

Table 5 has three pre-trainings and fifteen fine-tuning cells, each cell needing one model. Run as
two waves (every pre-training, then every cell), two slots on a 2-core machine leave one core idle
for the whole third pre-training (hours); here the cells of the models already pre-trained fill
that slot instead. A signal to stop reaches the running steps (`StepProcesses`).
"""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import threading
from typing import Callable, Hashable

from bert_ds.errors import EXIT_CODE_FOR_SIGNAL

Step = tuple[Callable[[], object], tuple]
"""(what to call, the keys of the steps that must have ended before it starts)."""


def run_steps(steps: dict[Hashable, Step], jobs: int) -> dict:
    """Each step's result by its key. Steps start in the dict's order among those whose prerequisites
    have ended, at most `jobs` at once; with one job that is the dict's order. After a failure no
    step starts; the first failure is raised once the running ones have ended."""
    for key, (_, needs) in steps.items():
        unknown = [need for need in needs if need not in steps]
        if unknown:
            raise ValueError(f"step {key!r} needs {unknown!r}, which are not steps")
    waiting = list(steps)
    results: dict = {}
    failure: BaseException | None = None
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        running: dict[concurrent.futures.Future, Hashable] = {}
        while running or (waiting and failure is None):
            while failure is None and len(running) < jobs:
                key = next((k for k in waiting if all(need in results for need in steps[k][1])), None)
                if key is None:
                    break
                waiting.remove(key)
                running[pool.submit(steps[key][0])] = key
            if not running:  # nothing can start: a prerequisite never ends (a cycle)
                raise ValueError(f"steps {waiting!r} wait for one another")
            ended, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in ended:
                key = running.pop(future)
                try:
                    results[key] = future.result()
                except BaseException as error:  # noqa: BLE001 (re-raised below, once the others end)
                    failure = failure or error
    if failure is not None:
        raise failure
    return results


class Stopped(Exception):
    """The experiment was told to stop (a signal); its steps were told too."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StepProcesses:
    """The running steps' subprocesses. A SIGTERM (scancel, `kill`), SIGUSR1 (Slurm's warning
    before a time limit) or SIGINT (Ctrl-C; passed on as SIGTERM) to the experiment reaches every
    one of them, so that a pre-training saves at its next step boundary and ends instead of running
    on as an orphan; after it no step starts, and the step that ended by it raises `Stopped`. A step
    that a signal ended on its own (scancel signals every process of a job, and a child may end
    before the experiment's handler runs) raises `Stopped` too, not a failure."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
    PASSED_ON_AS = {signal.SIGINT: signal.SIGTERM}
    # A step's exit status when a signal ended it: killed by it, or pretrain.py's own status after
    # saving (errors.EXIT_CODE_FOR_SIGNAL).
    ENDED_BY = {**{-s: s for s in SIGNALS}, **{code: s for s, code in EXIT_CODE_FOR_SIGNAL.items()}}

    def __init__(self):
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._previous: dict = {}
        self.stopped_by: int | None = None

    def forward_signals(self) -> None:
        """Install the handlers (from the main thread); `restore_signals` puts the previous ones back."""
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._forward)

    def restore_signals(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _forward(self, signum: int, frame) -> None:
        self.stopped_by = self.stopped_by or signum
        for process in tuple(self._running):  # one C call: no lock in a signal handler
            self._tell(process, signum)

    def check(self) -> None:
        """Raise `Stopped` once a stop came: no step starts after it."""
        if self.stopped_by is not None:
            raise Stopped(self.stopped_by)

    def run(self, command: list[str], **popen) -> int:
        """`subprocess.run(command, **popen).returncode`, its process told of a stop."""
        self.check()
        process = subprocess.Popen(command, **popen)
        with self._lock:
            self._running.add(process)
        if self.stopped_by is not None:  # the signal came between its start and the line above
            self._tell(process, self.stopped_by)
        try:
            returncode = process.wait()
        finally:
            with self._lock:
                self._running.discard(process)
        if returncode != 0 and self.stopped_by is not None:
            raise Stopped(self.stopped_by)
        if returncode in self.ENDED_BY:
            raise Stopped(self.ENDED_BY[returncode])
        return returncode

    def _tell(self, process: subprocess.Popen, signum: int) -> None:
        try:
            process.send_signal(self.PASSED_ON_AS.get(signum, signum))
        except ProcessLookupError:  # it has just ended
            pass
