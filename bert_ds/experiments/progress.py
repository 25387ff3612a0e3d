"""A line now and then on the steps an experiment is running: each step's name, its time so far and
the last progress line of its log (a pre-training's `step N/M ... ETA`, a fine-tuning's epoch bar),
so that hours of `--jobs 3` are not hours of silence on the console."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Optional, TextIO

TAIL_BYTES = 8192
LINE_CHARS = 160
_CONSOLE = threading.Lock()


def say(line: str, out: Optional[TextIO] = None) -> None:
    """Write `line` and its newline in one write, under a lock: steps running in threads (`--jobs`)
    and these status lines print at once, and print()'s separate write of the newline let two
    lines run together (a test's parse of the console lost a step's start line that way)."""
    out = out if out is not None else sys.stdout
    with _CONSOLE:
        out.write(line + "\n")
        out.flush()


def last_progress_line(log: Path) -> str:
    """The log's last non-blank line, a progress bar's latest state included (bars rewrite their
    line with carriage returns), whitespace collapsed, at most LINE_CHARS characters."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    segments = [" ".join(s.split()) for s in tail.replace("\r", "\n").split("\n")]
    line = next((s for s in reversed(segments) if s), "")
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60}h {minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m {int(seconds % 60):02d}s"


class StepProgress:
    """Steps say when they start and end; every `interval` seconds (0: never) a thread prints one
    line per running step."""

    def __init__(self, interval: float, prefix: str = "[table5]", out: TextIO = sys.stdout):
        self.interval, self.prefix, self.out = interval, prefix, out
        self._running: dict[str, tuple[Path, float]] = {}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def started(self, what: str, log: Path) -> None:
        with self._lock:
            self._running[what] = (log, time.monotonic())

    def ended(self, what: str) -> None:
        with self._lock:
            self._running.pop(what, None)

    def lines(self) -> list[str]:
        with self._lock:
            running = list(self._running.items())
        now = time.monotonic()
        return [f"{self.prefix} running {duration(now - began)}: {what}: {last_progress_line(log) or '(nothing logged yet)'}"
                for what, (log, began) in running]

    def __enter__(self) -> "StepProgress":
        if self.interval > 0:
            self._thread = threading.Thread(target=self._report, name="step-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _report(self) -> None:
        while not self._done.wait(self.interval):
            for line in self.lines():
                say(line, self.out)
