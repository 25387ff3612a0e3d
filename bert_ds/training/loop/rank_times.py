"""Per-rank times of a log window, to name a straggler before it becomes a hang.

A step's total time is the same on every rank (the gradient all-reduce waits for the slowest),
so it cannot say who is slow. Two parts of a step can: the time a rank waits for its data loader
(purely local) and its forward pass, which holds no data-parallel collective (with tensor
parallelism the TP group's collectives make its members equal: the slow GPU's group shows).
Each rank sums both over the log window; at the window's end one small all-gather brings every
rank's sums to all, and rank 0 logs the slowest rank and host of each next to the median, with a
`straggler:` line when one is 1.25x the median or worse.

On GPUs the forward pass is timed with device events (the host only queues the kernels), read at
the window's end, where the trainer reads the device anyway.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import time
from typing import Optional

import torch

from bert_ds.runtime.device import timing_event

STRAGGLER_RATIO = 1.25
"""A rank this many times the median (and at least a millisecond slower) is called out."""


class RankTimes:
    """This rank's data-wait and forward seconds since the last report."""

    def __init__(self, device: torch.device):
        self.device = device
        self.data_seconds = self.forward_seconds = 0.0
        self.micro_batches = 0
        self._events: list = []
        self.hosts: Optional[list[str]] = None

    @contextlib.contextmanager
    def data_wait(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.data_seconds += time.perf_counter() - start

    @contextlib.contextmanager
    def forward(self):
        start_event = timing_event(self.device)
        start = time.perf_counter()
        if start_event is not None:
            start_event.record()
        try:
            yield
        finally:
            if start_event is None:
                self.forward_seconds += time.perf_counter() - start
            else:
                end_event = timing_event(self.device)
                end_event.record()
                self._events.append((start_event, end_event))
            self.micro_batches += 1

    def report(self, group=None) -> dict:
        """Collective: every rank's per-micro-batch milliseconds of the window, the slowest rank
        and host of each kind and the median (`summarize`). Resets the sums."""
        import torch.distributed as dist

        if self.hosts is None:
            self.hosts = [""] * dist.get_world_size(group)
            dist.all_gather_object(self.hosts, socket.gethostname(), group=group)
        for start, end in self._events:
            self.forward_seconds += start.elapsed_time(end) / 1000  # the window's read has synchronized
        micro = max(self.micro_batches, 1)
        mine = torch.tensor([1000 * self.data_seconds / micro, 1000 * self.forward_seconds / micro], dtype=torch.float64,
                            device=self.device)
        every = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(every, mine, group=group)
        self.data_seconds = self.forward_seconds = 0.0
        self.micro_batches, self._events = 0, []
        rows = torch.stack(every).cpu().tolist()
        return summarize(rows, self.hosts)


SLOWEST_LISTED = 8
"""Ranks listed per kind in each metrics line (all of them in a world this small)."""


def summarize(rows: list[list[float]], hosts: list[str]) -> dict:
    """{forward,data}_ms_{slowest,median}, slowest_{forward,data}_rank/host, `{kind}_ms_by_rank`
    (the SLOWEST_LISTED slowest ranks as [rank, host, ms], slowest first) from per-rank
    [data ms, forward ms] rows, and `straggler`: a line naming a rank 1.25x the median, or ''."""
    out, lines = {}, []
    for column, kind in ((1, "forward"), (0, "data")):
        values = [row[column] for row in rows]
        order = sorted(range(len(values)), key=values.__getitem__, reverse=True)
        slowest = order[0]
        median = statistics.median(values)
        out.update({f"{kind}_ms_slowest": values[slowest], f"{kind}_ms_median": median,
                    f"slowest_{kind}_rank": slowest, f"slowest_{kind}_host": hosts[slowest],
                    f"{kind}_ms_by_rank": [[rank, hosts[rank], round(values[rank], 2)] for rank in order[:SLOWEST_LISTED]]})
        if len(values) > 1 and values[slowest] >= STRAGGLER_RATIO * median and values[slowest] - median >= 1.0:
            what = "forward pass" if kind == "forward" else "wait for the data loader"
            lines.append(f"rank {slowest} on {hosts[slowest]}: {what} {values[slowest]:.0f} ms per micro batch, "
                         f"median {median:.0f} ms ({values[slowest] / max(median, 1e-9):.1f}x)")
    out["straggler"] = "; ".join(lines)
    return out
