"""`sbatch slurm/pretrain_large.sh` and slurm/finetune_*.sh on a real single-node Slurm (slurmctld + slurmd + munge)."""

import contextlib
import json
import os
import random
import shutil
import subprocess

import pytest

from tests.support.helpers import REPO, read_metrics
from tests.support.slurm_cluster import (is_rank, job_state, missing_requirements, single_node_cluster, wait_for_job,
                                         wait_until_ended)
from tests.support.task_fixtures import write_squad, write_sst2_plumbing, write_swag

_WHY_NOT = missing_requirements()
pytestmark = pytest.mark.skipif(bool(_WHY_NOT), reason=_WHY_NOT or "runs")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running slurmctld + slurmd (tests/support/slurm_cluster.py); yields the environment that points sbatch at them."""
    yield from single_node_cluster(tmp_path_factory.mktemp("slurm"))


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


def _client(slurm):
    return lambda command: subprocess.run(command, capture_output=True, text=True, env=slurm)


def _job_state(slurm, job: str) -> str:
    return job_state(_client(slurm), job)


def _wait(slurm, job: str, until, timeout=400):
    wait_for_job(_client(slurm), job, until, timeout)


def _wait_done(slurm, job: str) -> str:
    return wait_until_ended(_client(slurm), job)


@pytest.fixture(scope="module")
def cache(shared_cache):
    """The session's BERT_DS_CACHE (tests/conftest.py): the sample tokenizer is trained once."""
    return shared_cache


def test_sbatch_runs_saves_and_resubmission_resumes(slurm, cache, tmp_path):
    out = tmp_path / "run"
    evaluation = dict(EVAL_INTERVAL="2", EVAL_SAMPLES="16", KEEP_BEST="1")  # on the sample's held-out articles
    job = _submit(slurm, out, cache, TRAIN_STEPS="4", SAVE_INTERVAL="2", **evaluation)
    assert _wait_done(slurm, job) == "COMPLETED", (tmp_path / f"run-{job}.out").read_text()
    assert (out / "latest").read_text() == "step00000004"
    assert sorted(p.name for p in (out / "logs").iterdir()) == [f"{job}-0.log", f"{job}-1.log"]

    again = _submit(slurm, out, cache, TRAIN_STEPS="6", SAVE_INTERVAL="2", **evaluation)
    assert _wait_done(slurm, again) == "COMPLETED"
    assert "resumed from" in (out / "logs" / f"{again}-0.log").read_text()
    lines = read_metrics(out / "metrics.jsonl")
    assert [m["step"] for m in lines if "loss" in m] == [1, 2, 3, 4, 5, 6]
    assert [m["step"] for m in lines if "eval/mlm_loss" in m] == [2, 4, 6]  # the resumed job continues the series
    assert json.loads((out / "best.json").read_text())["tag"] in {p.name for p in out.glob("step*")}


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


def test_phase_two_waits_for_phase_one_and_both_chain_in_one_command(slurm, cache, tmp_path):
    """Phase 2 submitted alone on an unfinished phase 1 refuses to start (exit 2, nothing written);
    `bash slurm/pretrain_large_all.sh` plans both phases, then phase 2 runs after phase 1 completes
    (afterok) and continues its schedule at 512 tokens."""
    out = tmp_path / "run"
    env = {"OUTPUT_DIR": str(out), "PRESET": "tiny", "DATA": "sample", "GLOBAL_BATCH": "16", "MICRO_BATCH": "8",
           "LOG_INTERVAL": "1", "TRAIN_STEPS": "6", "PHASE1_STEPS": "4", "SAVE_INTERVAL": "2", "BERT_DS_CACHE": cache}
    early = _sbatch(slurm, "slurm/pretrain_large_phase2.sh", out, env)
    assert _wait_done(slurm, early) == "FAILED"
    log = (tmp_path / f"run-{early}.out").read_text()
    assert "error: This phase starts at step 4 but" in log and "holds no checkpoint" in log
    assert not out.exists()

    result = subprocess.run(
        ["bash", "slurm/pretrain_large_all.sh", "--cpus-per-task=1", "--gpus-per-node=0", "--partition=debug",
         "--time=15", f"--output={tmp_path}/all-%j.out"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={**slurm, "OMP_NUM_THREADS": "1", "NODES": "1", "TASKS_PER_NODE": "2", **env},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("bert_ds launch plan (pre-training)") == 2  # both phases planned before submitting
    first, second = (line.split("job ")[1].split(";")[0].split(",")[0] for line in result.stdout.splitlines()[-1].split("; "))
    assert _wait_done(slurm, second) == "COMPLETED", (tmp_path / f"all-{second}.out").read_text()[-3000:]
    assert _job_state(slurm, first) == "COMPLETED"
    metrics = read_metrics(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    tokens_per_sample = [(b["consumed_tokens"] - a["consumed_tokens"]) / 16 for a, b in zip(metrics, metrics[1:])]
    assert max(tokens_per_sample[:3]) <= 128 < min(tokens_per_sample[3:])  # steps 5-6 at 512 tokens
    assert "sequence length 128 -> 512" in (out / "logs" / f"{second}-0.log").read_text()


# --- fine-tuning scripts: tiny original-format data, the tiny pre-training checkpoint as INIT -----------

@pytest.fixture(scope="module")
def finetune_data(tmp_path_factory):
    """GLUE SST-2 (glue_data layout), SQuAD v1.1 and SWAG folders of a few examples each."""
    root, rng = tmp_path_factory.mktemp("finetune_data"), random.Random(0)
    write_sst2_plumbing(root / "glue_data", rng)
    write_squad(root / "squad", rng)
    write_swag(root / "swag", rng)
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
    budget = results["selection_budget"]
    assert budget["settings"] * budget["restarts"] == budget["runs"] == 2
    assert not (out / "model").exists()  # --no-save-model came through "$@"


def _rank_processes(out) -> list[int]:
    """The pids of the glue.py ranks whose arguments name the output folder `out`."""
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and is_rank(int(pid), "glue.py", naming=str(out))]


def test_a_hung_finetuning_job_is_requeued_to_run_again(slurm, pretrained_tiny, finetune_data, tmp_path):
    """A rank stopped (SIGSTOP) mid fine-tuning: the other rank's watchdog ends the run (exit 98,
    OUT/hang/rank-R.txt), and the batch script requeues the job to run again from the start instead
    of failing it, as slurm/pretrain_large.sh does for pre-training. The requeued job is cancelled
    in its requeue hold: running again from the start is an ordinary run."""
    import signal
    import time

    out = tmp_path / "run"
    settings = {"INIT": pretrained_tiny, "OUTPUT_DIR": str(out), "BATCH_SIZE": "8", "EPOCHS": "2000", "MAX_SEQ_LENGTH": "32",
                "DATA_DIR": str(finetune_data / "glue_data"), "TASK": "sst2", "GRID": "0", "STEP_TIMEOUT": "10"}
    job = _sbatch(slurm, "slurm/finetune_glue.sh", out, settings, "--no-save-model", "--startup-timeout", "30")
    batch_log = tmp_path / f"run-{job}.out"
    try:
        # After the first epoch's line, so that STEP_TIMEOUT, not the start-up limit, applies.
        _wait(slurm, job, lambda: len(_rank_processes(out)) == 2 and "epoch 1/2000 |" in (out / "logs" / f"{job}-0.log").read_text())
        stopped = max(_rank_processes(out))
        os.kill(stopped, signal.SIGSTOP)
        _wait(slurm, job, lambda: "requeueing job" in batch_log.read_text(), timeout=120)
        said = batch_log.read_text()
        assert f"requeueing job {job} (restart 1 of at most 3) to run again from the start" in said, said[-3000:]
        reports = sorted(p.name for p in (out / "hang").iterdir())
        assert reports and all(f"{name}: error: hang:" in said for name in reports), (reports, said[-3000:])
        assert all((out / "hang" / name).read_text().splitlines()[1] == f"job {job} run 0" for name in reports)
        time.sleep(1)
        assert "Restarts=1" in _client(slurm)(["scontrol", "show", "job", job]).stdout
    finally:
        _client(slurm)(["scancel", job])
        for pid in _rank_processes(out):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert _wait_done(slurm, job) == "CANCELLED"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_batch_scripts_are_shellcheck_clean():
    scripts = sorted(str(p) for p in (__import__("pathlib").Path(REPO) / "slurm").glob("*.sh"))
    assert {"pretrain_large.sh", "finetune_glue.sh", "finetune_squad.sh", "finetune_swag.sh", "finetune_ner.sh",
            "_finetune_common.sh"} <= {os.path.basename(p) for p in scripts}
    # -x follows `source` (the fine-tuning scripts' shared _finetune_common.sh) and checks it in context.
    result = subprocess.run(["shellcheck", "-x", *scripts], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
