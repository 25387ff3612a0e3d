"""Progress of `python -m bert_ds.data.prepare` (records, records/s, MB/s, ETA), and its units
written by several processes at once."""

from __future__ import annotations

import multiprocessing
import queue
import sys
import time
from typing import Optional
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait


class Progress:
    """A tqdm bar over the source's records (to stderr; in a log file, one line every 30 s); a
    count without a total where the records are counted as they are read (JSON Lines)."""

    def __init__(self, total: Optional[int], done: int):
        from tqdm import tqdm

        self.started, self.text_bytes = time.perf_counter(), 0
        interactive = sys.stderr.isatty()
        self.bar = tqdm(total=total, initial=done, unit=" records", unit_scale=True, desc="prepare", file=sys.stderr,
                        mininterval=0.5 if interactive else 30, dynamic_ncols=interactive, smoothing=0.1,
                        delay=1)  # nothing shown for a run that stops at once: an error stays one line

    def add(self, records: int, text_bytes: int) -> None:
        self.text_bytes += text_bytes
        self.bar.update(records)
        seconds = max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix_str(f"{self.text_bytes / seconds / 1e6:,.1f} MB/s of text", refresh=False)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def _worker(task, messages) -> list[dict]:
    from bert_ds.data.prepare.inputs import write_unit_in_worker

    args, unit, settings, output = task
    return write_unit_in_worker(args, unit, settings, output, lambda records, size: messages.put((records, size)))


def run_parallel(workers: int, tasks: list, progress: Progress) -> dict[int, list[dict]]:
    """Each task's unit written by one of `workers` processes; unit index -> its shards. The
    first error of any unit stops the rest and is raised here."""
    context = multiprocessing.get_context("spawn")  # no fork of a process holding open readers
    messages = context.Manager().Queue()
    results: dict[int, list[dict]] = {}
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        pending = {pool.submit(_worker, task, messages): task[1].index for task in tasks}
        try:
            while pending:
                finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                _drain(messages, progress)
                for future in finished:
                    results[pending.pop(future)] = future.result()
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    _drain(messages, progress)
    return results


def _drain(messages, progress: Progress) -> None:
    while True:
        try:
            records, size = messages.get_nowait()
        except queue.Empty:
            return
        progress.add(records, size)
