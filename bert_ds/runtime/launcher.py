"""Which launcher started this process, and where it sits: one pure function over the environment.

Supported: the `deepspeed` launcher and `torchrun` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), `srun` (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID; the master address is the
job's first node, the port derived from the job id unless MASTER_ADDR/MASTER_PORT are exported),
`mpirun` (OpenMPI's OMPI_COMM_WORLD_*, MPICH/Intel MPI's PMI_*), or nothing (one process).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional

from bert_ds.config import ConfigError


@dataclass(frozen=True)
class Launch:
    """This process's place in the job, as its launcher described it."""

    launcher: str  # "torch" (deepspeed/torchrun/env), "slurm", "mpi" or "none"
    rank: int
    world_size: int
    local_rank: int
    master_addr: Optional[str] = None
    master_port: Optional[int] = None

    def environment(self) -> dict[str, str]:
        """The torch.distributed env:// variables for this launch."""
        env = dict(RANK=str(self.rank), WORLD_SIZE=str(self.world_size), LOCAL_RANK=str(self.local_rank))
        if self.master_addr is not None:
            env["MASTER_ADDR"] = self.master_addr
        if self.master_port is not None:
            env["MASTER_PORT"] = str(self.master_port)
        return env


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(f"Launcher variable {name}={env[name]!r} is not an integer.") from None


def _first_host(nodelist: str) -> str:
    """The first host of a Slurm node list ("node[01-04]" -> "node01"), via scontrol when present."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    head = nodelist.split(",")[0]
    if "[" in head:  # prefix[01-04,07] -> prefix01
        prefix, ranges = head.split("[", 1)
        head = prefix + ranges.split("-")[0].split(",")[0].rstrip("]")
    return head


def discover(env: Mapping[str, str]) -> Launch:
    """Rank, world size, local rank and master address from whichever launcher set `env`.

    Inconsistent variables (a rank outside the world, a rank without a world size) are a
    ConfigError naming them, rather than a hang at the first collective.
    """
    if "RANK" in env or "WORLD_SIZE" in env:
        missing = [name for name in ("RANK", "WORLD_SIZE") if name not in env]
        if missing:
            raise ConfigError(f"Launcher set {'RANK' if 'RANK' in env else 'WORLD_SIZE'} but not {missing[0]}.")
        launch = Launch("torch", _int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0,
                        env.get("MASTER_ADDR"), _int(env, "MASTER_PORT") if "MASTER_PORT" in env else None)
    elif "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env:
        # Inside an srun step (the batch script itself has no SLURM_STEP_NUM_TASKS).
        job = _int(env, "SLURM_JOB_ID") if "SLURM_JOB_ID" in env else 0
        addr = env.get("MASTER_ADDR") or _first_host(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "localhost"))
        port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 20000 + job % 40000
        launch = Launch("slurm", _int(env, "SLURM_PROCID"), _int(env, "SLURM_STEP_NUM_TASKS"),
                        _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0, addr, port)
    elif "OMPI_COMM_WORLD_SIZE" in env:
        launch = Launch("mpi", _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE"),
                        _int(env, "OMPI_COMM_WORLD_LOCAL_RANK") if "OMPI_COMM_WORLD_LOCAL_RANK" in env else 0)
    elif "PMI_SIZE" in env:
        launch = Launch("mpi", _int(env, "PMI_RANK"), _int(env, "PMI_SIZE"),
                        _int(env, "MPI_LOCALRANKID") if "MPI_LOCALRANKID" in env else 0)
    else:
        return Launch("none", 0, 1, 0)
    if not 0 <= launch.rank < launch.world_size or launch.local_rank < 0:
        raise ConfigError(
            f"Launcher variables are inconsistent ({launch.launcher}): rank {launch.rank}, world size "
            f"{launch.world_size}, local rank {launch.local_rank}."
        )
    return launch
