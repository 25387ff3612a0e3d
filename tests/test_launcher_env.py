"""Rank discovery from each launcher's environment variables (bert_ds.runtime.launcher.discover)."""

import pytest

from bert_ds.config import ConfigError
from bert_ds.runtime.launcher import discover


def test_torchrun_and_deepspeed_variables():
    launch = discover(dict(RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", MASTER_ADDR="n1", MASTER_PORT="29500"))
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_rank) == ("torch", 3, 8, 1)
    assert launch.environment()["MASTER_PORT"] == "29500"


def test_srun_step_variables():
    env = dict(SLURM_PROCID="5", SLURM_STEP_NUM_TASKS="8", SLURM_LOCALID="1", SLURM_JOB_ID="4242",
               SLURM_JOB_NODELIST="gpu[07-08]", SLURM_NTASKS="8")
    launch = discover(env)
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_rank) == ("slurm", 5, 8, 1)
    assert launch.master_addr == "gpu07" and launch.master_port == 20000 + 4242
    exported = discover({**env, "MASTER_ADDR": "head", "MASTER_PORT": "12345"})
    assert (exported.master_addr, exported.master_port) == ("head", 12345)


def test_batch_script_without_srun_is_one_process():
    # sbatch's own shell has SLURM_PROCID and SLURM_NTASKS but is no job step.
    assert discover(dict(SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_JOB_ID="1")).world_size == 1


def test_mpirun_variables():
    launch = discover(dict(OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="1"))
    assert (launch.launcher, launch.rank, launch.world_size) == ("mpi", 1, 2)
    assert discover(dict(PMI_RANK="0", PMI_SIZE="4")).world_size == 4


@pytest.mark.parametrize(
    "env, message",
    [
        (dict(RANK="0"), "set RANK but not WORLD_SIZE"),
        (dict(RANK="4", WORLD_SIZE="4"), "rank 4, world size 4"),
        (dict(SLURM_PROCID="2", SLURM_STEP_NUM_TASKS="2"), "(slurm): rank 2, world size 2"),
        (dict(RANK="x", WORLD_SIZE="2"), "RANK='x' is not an integer"),
    ],
)
def test_inconsistent_variables_are_named(env, message):
    with pytest.raises(ConfigError) as caught:
        discover(env)
    assert message in str(caught.value)
