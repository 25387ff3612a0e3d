"""`sbatch slurm/pretrain_large.sh` and slurm/finetune_*.sh on a real single-node Slurm (slurmctld + slurmd + munge)."""

import csv
import json
import os
import random
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


def _sbatch(slurm, script: str, out, env: dict, *args: str, tasks: int = 2) -> str:
    """Submits `script` on CPUs (`tasks` one-CPU tasks); its batch log goes to OUT-<job>.out."""
    result = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", f"--ntasks-per-node={tasks}", "--cpus-per-task=1", "--gpus-per-node=0",
         "--partition=debug", "--time=15", f"--output={out}-%j.out", script, *args],
        capture_output=True, text=True, env={**slurm, "OMP_NUM_THREADS": "1", **env}, cwd=REPO, check=True,
    )
    return result.stdout.strip().split(";")[0]


def _submit(slurm, out, cache, **overrides) -> str:
    env = {
        "OUTPUT_DIR": str(out), "PRESET": "tiny", "DATA": "sample", "GLOBAL_BATCH": "16", "MICRO_BATCH": "8",
        "LOG_INTERVAL": "1", "STOP_AT_STEP": "", "BERT_DS_CACHE": cache, **overrides,
    }
    return _sbatch(slurm, "slurm/pretrain_large.sh", out, env)


def _job_state(slurm, job: str) -> str:
    info = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=slurm).stdout
    return next((w.split("=")[1] for w in info.split() if w.startswith("JobState=")), "UNKNOWN")


def _wait(slurm, job: str, until, timeout=400):
    deadline = time.time() + timeout
    while not until():
        assert time.time() < deadline, f"job {job} still {_job_state(slurm, job)}"
        time.sleep(2)


def _wait_done(slurm, job: str) -> str:
    _wait(slurm, job, lambda: _job_state(slurm, job) in ("COMPLETED", "FAILED", "CANCELLED"))
    return _job_state(slurm, job)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("slurm_cache"))


def test_sbatch_runs_saves_and_resubmission_resumes(slurm, cache, tmp_path):
    out = tmp_path / "run"
    job = _submit(slurm, out, cache, TRAIN_STEPS="4", SAVE_INTERVAL="2")
    assert _wait_done(slurm, job) == "COMPLETED", (tmp_path / f"run-{job}.out").read_text()
    assert (out / "latest").read_text() == "step00000004"
    assert sorted(p.name for p in (out / "logs").iterdir()) == [f"{job}-0.log", f"{job}-1.log"]

    again = _submit(slurm, out, cache, TRAIN_STEPS="6", SAVE_INTERVAL="2")
    assert _wait_done(slurm, again) == "COMPLETED"
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
    assert _wait_done(slurm, again) == "COMPLETED"
    assert read_metrics(metrics)[-1]["step"] == saved + 2
    assert (out / "latest").read_text() == f"step{saved + 2:08d}"


# --- fine-tuning scripts: tiny original-format data, the tiny pre-training checkpoint as INIT -----------

_WORDS = "the a film plot actor scene story music ending cast was is very quite rather good bad dull fun".split()


def _sentence(rng, n: int = 6) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)) + "."


def _write_glue(root, rng) -> None:
    folder = root / "SST-2"
    folder.mkdir(parents=True)
    for split, count in (("train", 16), ("dev", 8)):
        rows = [f"{_sentence(rng)}\t{i % 2}" for i in range(count)]
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")


def _write_squad(root, rng) -> None:
    root.mkdir()
    for split, count in (("train", 8), ("dev", 4)):
        paragraphs = []
        for i in range(count):
            answer = f"the {rng.choice(_WORDS)} {rng.choice(_WORDS)}"
            context = f"{_sentence(rng)} It was {answer} in the end. {_sentence(rng)}"
            qa = dict(id=f"{split}-{i}", question=f"what was it {i}?",
                      answers=[dict(text=answer, answer_start=context.index(answer))])
            paragraphs.append(dict(context=context, qas=[qa]))
        data = dict(version="1.1", data=[dict(title=f"{split} article", paragraphs=paragraphs)])
        (root / f"{split}-v1.1.json").write_text(json.dumps(data))


def _write_swag(root, rng) -> None:
    root.mkdir()
    header = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
              "ending0", "ending1", "ending2", "ending3", "label"]
    for split, count in (("train", 8), ("val", 4)):
        with open(root / f"{split}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for i in range(count):
                sent1, sent2 = _sentence(rng), "then, the actor"
                endings = [_sentence(rng, 4) for _ in range(4)]
                writer.writerow([i, f"video_{i}", i, f"{sent1} {sent2}", sent1, sent2, "gold", *endings, i % 4])


@pytest.fixture(scope="module")
def finetune_data(tmp_path_factory):
    """GLUE SST-2 (glue_data layout), SQuAD v1.1 and SWAG folders of a few examples each."""
    root, rng = tmp_path_factory.mktemp("finetune_data"), random.Random(0)
    _write_glue(root / "glue_data", rng)
    _write_squad(root / "squad", rng)
    _write_swag(root / "swag", rng)
    return root


def _finetune_case(name, script, entrypoint, env, args, task, metric):
    missing = not os.path.exists(os.path.join(REPO, entrypoint))
    return pytest.param(script, env, args, task, metric, id=name, marks=pytest.mark.skipif(
        missing, reason=f"{entrypoint} does not exist yet (the script is written, its entrypoint is not)"))


@pytest.mark.parametrize("script, env, args, task, metric", [
    # GRID=1 with a 2-setting grid given as extra arguments: checks GRID and "$@" pass-through.
    _finetune_case("glue", "slurm/finetune_glue.sh", "bert_ds/finetune/glue.py",
                   dict(TASK="sst2", DATA_DIR="glue_data", GRID="1"),
                   ["--grid-batch-sizes", "8", "--grid-lrs", "1e-4,5e-5", "--grid-epochs", "1"], "sst2", "accuracy"),
    _finetune_case("squad", "slurm/finetune_squad.sh", "bert_ds/finetune/squad.py",
                   dict(VERSION="1.1", DATA_DIR="squad", MAX_SEQ_LENGTH="64", RESTARTS="2"),
                   ["--max-query-length", "16", "--doc-stride", "16"], "squad", "f1"),
    _finetune_case("swag", "slurm/finetune_swag.sh", "bert_ds/finetune/swag.py",
                   dict(DATA_DIR="swag", RESTARTS="2"), [], "swag", "accuracy"),
])
def test_finetune_script_runs_on_slurm(slurm, pretrained_tiny, finetune_data, tmp_path, script, env, args, task, metric):
    out = tmp_path / "run"
    settings = {"INIT": pretrained_tiny, "OUTPUT_DIR": str(out), "BATCH_SIZE": "8", "EPOCHS": "1", "MAX_SEQ_LENGTH": "32",
                **env, "DATA_DIR": str(finetune_data / env["DATA_DIR"])}
    job = _sbatch(slurm, script, out, settings, "--no-save-model", *args)
    state = _wait_done(slurm, job)
    logs = sorted(p.name for p in (out / "logs").iterdir()) if (out / "logs").is_dir() else []
    assert state == "COMPLETED", (tmp_path / f"run-{job}.out").read_text() + "".join(
        (out / "logs" / name).read_text()[-3000:] for name in logs)
    assert logs == [f"{job}-0.log", f"{job}-1.log"]
    results = json.loads((out / "results.json").read_text())
    assert {"task", "metrics", "selected", "runs"} <= results.keys()
    assert results["task"] == task and metric in results["metrics"]
    assert results["runs"] == 2 and results["selected"]["batch_size"] == 8
    assert not (out / "model").exists()  # --no-save-model came through "$@"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_batch_scripts_are_shellcheck_clean():
    scripts = sorted(str(p) for p in (__import__("pathlib").Path(REPO) / "slurm").glob("*.sh"))
    assert {"pretrain_large.sh", "finetune_glue.sh", "finetune_squad.sh", "finetune_swag.sh",
            "_finetune_common.sh"} <= {os.path.basename(p) for p in scripts}
    # -x follows `source` (the fine-tuning scripts' shared _finetune_common.sh) and checks it in context.
    result = subprocess.run(["shellcheck", "-x", *scripts], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
