"""The same tiny job under the deepspeed launcher, mpirun and torchrun: same losses."""

import os
import subprocess
import sys

import pytest

from bert_ds.runtime.shm_buffers import SHM_FOLDER, allreduce_buffer
from tests.support.helpers import REPO, free_port, read_metrics, run_pretrain

BIN = os.path.dirname(sys.executable)
ARGS = ["--preset", "tiny", "--train-steps", "4", "--log-interval", "1"]


@pytest.fixture(scope="module")
def cache(shared_cache):
    """The session's BERT_DS_CACHE (tests/conftest.py): the sample tokenizer is trained once."""
    return shared_cache


def _env(cache):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(BERT_DS_CACHE=cache, OMP_NUM_THREADS="1", PATH=f"{BIN}:{env.get('PATH', '')}")
    return env


def _launch(command, cache):
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, env=_env(cache), cwd=REPO)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]


def test_deepspeed_mpirun_and_torchrun_agree(tmp_path, cache):
    reference = tmp_path / "torchrun.jsonl"
    result = run_pretrain([*ARGS, "--metrics-file", str(reference)], nproc=2, cache_dir=cache)
    assert result.returncode == 0, result.stderr[-3000:]
    script = os.path.join("bert_ds", "pretrain.py")
    port = str(free_port())
    launched = {
        "deepspeed": [f"{BIN}/deepspeed", "--num_gpus", "2", "--master_port", port, script],
        "mpirun": [f"{BIN}/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                   "-x", "BERT_DS_CACHE", "-x", "OMP_NUM_THREADS", "-x", "PATH", sys.executable, script],
    }
    expected = [m["loss"] for m in read_metrics(reference)]
    for name, command in launched.items():
        metrics = tmp_path / f"{name}.jsonl"
        _launch([*command, *ARGS, "--metrics-file", str(metrics)], cache)
        assert [m["loss"] for m in read_metrics(metrics)] == pytest.approx(expected, abs=1e-6), name
    # The deepspeed launcher's ranks all-reduce through shared memory on CPU; the job gives it back.
    left = [allreduce_buffer(rank, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}) for rank in (0, 1)]
    assert not [path for path in left if path.exists()], sorted(p.name for p in SHM_FOLDER.glob(f"*_{port}_*"))
