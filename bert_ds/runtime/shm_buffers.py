"""Give back the shared memory of DeepSpeed's CPU all-reduce when the job ends, killed or not.

On CPU, when every rank of a job runs on one host (DeepSpeed's launcher sets LOCAL_SIZE to the
world size), `deepspeed.init_distributed` has each rank create a POSIX shared-memory segment of
66 MiB, named `deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`, and map every
peer's by that name. DeepSpeed never unlinks these names, so each such job left world × 66 MiB of
RAM in /dev/shm until the host rebooted (one run of the test suite: ~2 GB).

A name is only needed until every peer has opened it, which each rank has done when it leaves
`init_distributed` (it waits there for all peers' segments). So after a barrier each rank unlinks
its own name: the mappings stay valid, and the kernel frees the memory when the last rank exits.

A job killed inside `init_distributed`, before that barrier, still leaves its names behind. So at
start each host's first rank removes this user's segments of that prefix that are older than
STALE_S and that no process has open or mapped (read from /proc), with one warning line each.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

SHM_FOLDER = Path("/dev/shm")
"""Where glibc's shm_open keeps its named segments on Linux."""
PREFIX = "deepspeed_allreduce_buffer"
STALE_S = 600.0
"""A name older than this that no process holds is a killed job's: live ones are unlinked in seconds."""


def allreduce_buffer(rank: int, environ: Mapping[str, str] = os.environ) -> Path:
    """The shared-memory name DeepSpeed's CPU all-reduce gives `rank` of the job in `environ`."""
    address, port = environ.get("MASTER_ADDR", ""), environ.get("MASTER_PORT", "")
    return SHM_FOLDER / f"{PREFIX}_{os.getuid()}_{address}_{port}_{rank}"


def release_allreduce_buffer(rank: int) -> None:
    """Unlink this rank's buffer name, if there is one (none on GPUs, or with ranks on several
    hosts); call only after a barrier that follows `init_distributed` on every rank (a peer still
    looking for the name would wait for it forever)."""
    allreduce_buffer(rank).unlink(missing_ok=True)


def _held_shm_paths() -> set[str]:
    """Every /dev/shm path some readable process has open or mapped."""
    held = set()
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            for line in (process / "maps").read_text().splitlines():
                path = line.split(maxsplit=5)[-1]  # the sixth field, the file mapped (absent: the inode)
                if path.startswith(str(SHM_FOLDER)):
                    held.add(path.removesuffix(" (deleted)"))
            for descriptor in (process / "fd").iterdir():
                target = os.readlink(descriptor)
                if target.startswith(str(SHM_FOLDER)):
                    held.add(target)
        except OSError:  # the process ended meanwhile, or is another user's
            continue
    return held


def clear_stale_allreduce_buffers(max_age_s: float = STALE_S) -> list[Path]:
    """Remove this user's all-reduce buffer names older than `max_age_s` that no process holds,
    each with a warning on stderr; the removed."""
    now = time.time()
    old = []
    for path in SHM_FOLDER.glob(f"{PREFIX}_{os.getuid()}_*"):
        try:
            if now - path.stat().st_mtime > max_age_s:
                old.append(path)
        except FileNotFoundError:
            continue
    if not old:
        return []
    held = _held_shm_paths()
    removed = []
    for path in old:
        if str(path) in held:
            continue
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:  # another host-mate removed it first
            continue
        removed.append(path)
        print(f"warning: removed {path} ({size / 2**20:.0f} MiB), DeepSpeed's CPU all-reduce buffer of a job killed "
              "before it could release it", file=sys.stderr, flush=True)
    return removed
