"""`sbatch slurm/pretrain_large.sh` on a real single-node Slurm (slurmctld + slurmd + munge)."""

import os
import shutil
import socket
import subprocess
import time

import pytest

from tests.helpers import REPO, read_metrics

pytestmark = pytest.mark.skipif(
    shutil.which("slurmctld") is None or shutil.which("munged") is None or os.geteuid() != 0,
    reason="needs Slurm and munge (apt-get install slurm-wlm munge; .ci/run installs them) and root",
)


def _slurm_conf(root) -> str:
    host = socket.gethostname()
    return "\n".join([
        "ClusterName=bertds", f"SlurmctldHost={host}", "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SlurmUser=root", "SlurmdUser=root", "MpiDefault=none", "ReturnToService=2",
        "SlurmdParameters=config_overrides", "KillWait=30",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/slurmctld.log", f"SlurmdLogFile={root}/slurmd.log",
        f"NodeName={host} CPUs={os.cpu_count()} RealMemory=20000 State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", "",
    ])


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running slurmctld + slurmd; yields the environment that points sbatch at them."""
    root = tmp_path_factory.mktemp("slurm")
    for folder in ("state", "spool"):
        (root / folder).mkdir()
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root))
    os.makedirs("/run/munge", exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    if not os.path.exists("/etc/munge/munge.key"):
        subprocess.run(["mungekey", "-c"], check=True)
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env)
    subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
    deadline = time.time() + 60
    while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env).stdout:
        assert time.time() < deadline, (root / "slurmctld.log").read_text()[-2000:]
        time.sleep(1)
    yield env
    for name in ("slurmd", "slurmctld"):
        pid_file = root / f"{name}.pid"
        if pid_file.exists():
            subprocess.run(["kill", pid_file.read_text().strip()], check=False)


def _submit(slurm, out, cache, **overrides) -> str:
    env = {
        **slurm, "OUTPUT_DIR": str(out), "PRESET": "tiny", "DATA": "sample", "GLOBAL_BATCH": "16",
        "MICRO_BATCH": "8", "LOG_INTERVAL": "1", "STOP_AT_STEP": "", "BERT_DS_CACHE": cache,
        "OMP_NUM_THREADS": "1", **overrides,
    }
    result = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=0",
         "--partition=debug", "--time=15", f"--output={out}-%j.out", "slurm/pretrain_large.sh"],
        capture_output=True, text=True, env=env, cwd=REPO, check=True,
    )
    return result.stdout.strip().split(";")[0]


def _job_state(slurm, job: str) -> str:
    info = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=slurm).stdout
    return next((w.split("=")[1] for w in info.split() if w.startswith("JobState=")), "UNKNOWN")


def _wait(slurm, job: str, until, timeout=400):
    deadline = time.time() + timeout
    while not until():
        assert time.time() < deadline, f"job {job} still {_job_state(slurm, job)}"
        time.sleep(2)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("slurm_cache"))


def test_sbatch_runs_saves_and_resubmission_resumes(slurm, cache, tmp_path):
    out = tmp_path / "run"
    job = _submit(slurm, out, cache, TRAIN_STEPS="4", SAVE_INTERVAL="2")
    _wait(slurm, job, lambda: _job_state(slurm, job) in ("COMPLETED", "FAILED", "CANCELLED"))
    assert _job_state(slurm, job) == "COMPLETED", (tmp_path / f"run-{job}.out").read_text()
    assert (out / "latest").read_text() == "step00000004"
    assert sorted(p.name for p in (out / "logs").iterdir()) == [f"{job}-0.log", f"{job}-1.log"]

    again = _submit(slurm, out, cache, TRAIN_STEPS="6", SAVE_INTERVAL="2")
    _wait(slurm, again, lambda: _job_state(slurm, again) in ("COMPLETED", "FAILED", "CANCELLED"))
    assert _job_state(slurm, again) == "COMPLETED"
    assert "resumed from" in (out / "logs" / f"{again}-0.log").read_text()
    assert [m["step"] for m in read_metrics(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def test_cancelled_job_leaves_a_checkpoint_the_next_job_resumes(slurm, cache, tmp_path):
    out = tmp_path / "run"
    job = _submit(slurm, out, cache, TRAIN_STEPS="2000", SAVE_INTERVAL="1000")
    metrics = out / "metrics.jsonl"
    _wait(slurm, job, lambda: metrics.exists() and len(read_metrics(metrics)) >= 3)
    subprocess.run(["scancel", job], env=slurm, check=True)
    _wait(slurm, job, lambda: _job_state(slurm, job) not in ("RUNNING", "COMPLETING", "PENDING"))
    saved = int((out / "latest").read_text().removeprefix("step"))  # written on SIGTERM, not by the interval
    assert 3 <= saved < 1000
    assert f"received SIGTERM: saving and stopping at step {saved}" in (out / "logs" / f"{job}-0.log").read_text()

    again = _submit(slurm, out, cache, TRAIN_STEPS="2000", STOP_AT_STEP=str(saved + 2), SAVE_INTERVAL="1000")
    _wait(slurm, again, lambda: _job_state(slurm, again) in ("COMPLETED", "FAILED", "CANCELLED"))
    assert _job_state(slurm, again) == "COMPLETED"
    assert read_metrics(metrics)[-1]["step"] == saved + 2
    assert (out / "latest").read_text() == f"step{saved + 2:08d}"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_batch_scripts_are_shellcheck_clean():
    scripts = sorted(str(p) for p in (__import__("pathlib").Path(REPO) / "slurm").glob("*.sh"))
    assert scripts
    result = subprocess.run(["shellcheck", *scripts], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
