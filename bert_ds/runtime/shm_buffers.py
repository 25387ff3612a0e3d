"""Give back the shared memory of DeepSpeed's CPU all-reduce when the job ends, killed or not.

On CPU, when every rank of a job runs on one host (DeepSpeed's launcher sets LOCAL_SIZE to the
world size), `deepspeed.init_distributed` has each rank create a POSIX shared-memory segment of
66 MiB, named `deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`, and map every
peer's by that name. DeepSpeed never unlinks these names, so each such job left world × 66 MiB of
RAM in /dev/shm until the host rebooted (one run of the test suite: ~2 GB).

A name is only needed until every peer has opened it, which each rank has done when it leaves
`init_distributed` (it waits there for all peers' segments). So after a barrier each rank unlinks
its own name: the mappings stay valid, and the kernel frees the memory when the last rank exits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SHM_FOLDER = Path("/dev/shm")
"""Where glibc's shm_open keeps its named segments on Linux."""
PREFIX = "deepspeed_allreduce_buffer"


def allreduce_buffer(rank: int, environ: Mapping[str, str] = os.environ) -> Path:
    """The shared-memory name DeepSpeed's CPU all-reduce gives `rank` of the job in `environ`."""
    address, port = environ.get("MASTER_ADDR", ""), environ.get("MASTER_PORT", "")
    return SHM_FOLDER / f"{PREFIX}_{os.getuid()}_{address}_{port}_{rank}"


def release_allreduce_buffer(rank: int) -> None:
    """Unlink this rank's buffer name, if there is one (none on GPUs, or with ranks on several
    hosts); call only after a barrier that follows `init_distributed` on every rank (a peer still
    looking for the name would wait for it forever)."""
    allreduce_buffer(rank).unlink(missing_ok=True)
