"""The step watchdog (training/loop/watchdog.py) on real jobs: a rank stopped with SIGSTOP, a data
loader worker stopped mid-run, and steps and checkpoint writes that are slow but progressing.
The two-node partition is in tests/test_slurm_two_nodes.py."""

import os
import signal
import subprocess
import time

import pytest

from tests.support.helpers import REPO, entrypoint_command, read_metrics

LIMIT = 6  # --step-timeout of these jobs: tiny steps take a fraction of a second
TINY = ["--preset", "tiny", "--data", "sample", "--log-interval", "1", "--train-steps", "1000", "--seed", "3"]


@pytest.fixture(scope="module")
def cache(shared_cache):
    return shared_cache


class Job:
    """A pre-training job in a session of its own, its output in files (a pipe nobody reads
    would fill and stall the job: a hang of the test's own making)."""

    def __init__(self, tmp_path, args, cache, nproc=1, faults="", script="bert_ds/pretrain.py"):
        command, env = entrypoint_command(script, args, nproc, cache, None, {"BERT_DS_FAULTS": faults} if faults else None)
        self.out, self.err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.process = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=REPO, start_new_session=True)

    def processes(self) -> list[int]:
        """Every live process the job started (torchrun puts its ranks in sessions of their own)."""
        parents = {}
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
        found, frontier = [], [self.process.pid]
        while frontier:
            children = [pid for pid, parent in parents.items() if parent in frontier]
            found += children
            frontier = children
        return found

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        for pid in [*self.processes(), self.process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)  # a stopped process too
            except ProcessLookupError:
                pass
        self.process.wait()

    def log(self) -> str:
        return self.out.read_text() + self.err.read_text()


def _environ(pid: int) -> dict:
    with open(f"/proc/{pid}/environ", "rb") as file:
        pairs = (item.split(b"=", 1) for item in file.read().split(b"\0") if b"=" in item)
        return {key.decode(): value.decode(errors="replace") for key, value in pairs}


def _wait_for_step(job: Job, metrics, step: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not (metrics.exists() and any(m.get("step", 0) >= step for m in read_metrics(metrics))):
        assert job.process.poll() is None, f"the job ended first:\n{job.log()[-3000:]}"
        assert time.monotonic() < deadline, job.log()[-3000:]
        time.sleep(0.5)


def _hang_report(save, rank: int) -> str:
    report = (save / "hang" / f"rank-{rank}.txt").read_text()
    assert "Python stacks of every thread" in report and 'File "' in report, report
    return report


def test_a_stopped_rank_ends_the_other_by_its_watchdog_naming_the_silent_peer(tmp_path, cache):
    save, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    job = Job(tmp_path, TINY + ["--save", str(save), "--save-interval", "3", "--metrics-file", str(metrics),
                                "--step-timeout", str(LIMIT)], cache, nproc=2)
    try:
        _wait_for_step(job, metrics, 4)
        rank1 = next(pid for pid in job.processes() if _environ(pid).get("RANK") == "1"
                     and "pretrain.py" in open(f"/proc/{pid}/cmdline").read())
        os.kill(rank1, signal.SIGSTOP)
        stopped_at = time.monotonic()
        while "error: hang:" not in job.err.read_text():  # printed once the stacks are written
            assert time.monotonic() - stopped_at < LIMIT + 60, job.log()[-3000:]
            time.sleep(0.5)
    finally:
        job.kill()  # torchrun would wait for the stopped rank to take its SIGTERM
    log, report = job.log(), _hang_report(save, 0)
    cause = next(line for line in log.splitlines() if line.startswith("error: hang:"))
    assert cause == report.splitlines()[0]
    assert "on rank 0 (" in cause and "no heartbeat for" in cause and "from rank 1 on " in cause, cause
    assert f"stacks in {save / 'hang' / 'rank-0.txt'}" in cause and "exiting with code 98" in cause
    assert "job none run 0" in report  # not a Slurm job: the batch scripts match this line
    assert not (save / "hang" / "rank-1.txt").exists()  # the stopped rank could write nothing


def test_a_stalled_data_loader_worker_is_reported_as_a_data_stall(tmp_path, cache):
    save, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    job = Job(tmp_path, TINY + ["--save", str(save), "--metrics-file", str(metrics), "--num-workers", "1",
                                "--step-timeout", str(LIMIT)], cache)
    workers = []
    try:
        _wait_for_step(job, metrics, 3)
        workers = job.processes()
        assert workers, "no loader worker process"
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)  # the worker's reads stop, as on a hung file system
        code = job.wait(timeout=LIMIT + 60)
    finally:
        job.kill()
        for pid in workers:  # orphaned once the job exits, and stopped: it would never notice
            os.kill(pid, signal.SIGKILL)
    assert code == 98, job.log()[-3000:]
    cause = next(line for line in job.log().splitlines() if line.startswith("error: hang:"))
    assert "data stall on rank 0" in cause and "reading the next batch from the data loader" in cause, cause
    assert _hang_report(save, 0).splitlines()[0] == cause


def test_slow_steps_and_checkpoint_writes_that_progress_never_trip_it(tmp_path, cache):
    """A 4 s limit; the first step, a step of two 2.5 s micro batches, and a checkpoint write
    each take longer than that but keep progressing (or have the start-up limit)."""
    save, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    args = ["--preset", "tiny", "--data", "sample", "--log-interval", "1", "--train-steps", "5", "--global-batch-size", "16",
            "--micro-batch-size", "8", "--save", str(save), "--save-interval", "4", "--metrics-file", str(metrics),
            "--step-timeout", "4"]
    job = Job(tmp_path, args, cache, faults="slow=6:micro-batch:1,slow=2.5:micro-batch:3,slow=6:save:4")
    code = job.wait(timeout=240)
    assert code == 0, job.log()[-3000:]
    assert [m["step"] for m in read_metrics(metrics) if "loss" in m] == [1, 2, 3, 4, 5]
    assert not (save / "hang").exists()


def test_a_checkpoint_write_that_stalls_past_ten_times_the_first_one_trips_it(tmp_path, cache):
    """The first write (step 3) has the start-up limit and is measured; the second (step 6) stalls
    for 60 s: it ends at 10x the first write (at least the 3 s step limit), not at the start-up
    limit, and the checkpoint it was writing is not the latest."""
    save = tmp_path / "ckpt"
    args = ["--preset", "tiny", "--data", "sample", "--log-interval", "1", "--train-steps", "8", "--global-batch-size", "8",
            "--micro-batch-size", "8", "--save", str(save), "--save-interval", "3", "--step-timeout", "3"]
    job = Job(tmp_path, args, cache, faults="slow=60:save:6")
    started = time.monotonic()
    code = job.wait(timeout=240)
    assert code == 98 and time.monotonic() - started < 55, job.log()[-3000:]
    cause = next(line for line in job.log().splitlines() if line.startswith("error: hang:"))
    assert "checkpoint write stalled on rank 0" in cause and "writing checkpoint step 6" in cause, cause
    assert (save / "latest").read_text() == "step00000003"


def test_a_slow_rank_is_named_a_straggler_in_the_log_and_the_metrics(tmp_path, cache):
    """Rank 1's forward passes of steps 4-6 take 0.4 s longer: the log window ending at step 6
    names it, with its host, as the slowest rank and a straggler."""
    import socket

    metrics = tmp_path / "metrics.jsonl"
    args = ["--preset", "tiny", "--data", "sample", "--log-interval", "3", "--train-steps", "6", "--global-batch-size", "16",
            "--micro-batch-size", "8", "--metrics-file", str(metrics)]
    job = Job(tmp_path, args, cache, nproc=2, faults=",".join(f"slow=0.4:forward:{step}:1" for step in (4, 5, 6)))
    assert job.wait(timeout=240) == 0, job.log()[-3000:]
    last = [m for m in read_metrics(metrics) if "loss" in m][-1]
    assert last["step"] == 6 and last["slowest_forward_rank"] == 1 and last["forward_ms_slowest"] >= 400, last
    assert last["slowest_forward_host"] == socket.gethostname() and 0 <= last["data_ms_median"] < 400
    assert [rank for rank, _, _ in last["forward_ms_by_rank"]] == [1, 0]  # every rank of a small world, slowest first
    assert f"straggler: rank 1 on {socket.gethostname()}: forward pass" in job.log()


def test_the_launch_plan_shows_the_limits_and_the_slurm_script_passes_them(tmp_path):
    import json

    env = {**os.environ, "DRY_RUN": "1", "PRESET": "tiny", "DATA": "sample", "NODES": "1", "TASKS_PER_NODE": "1",
           "PLAN_DEVICE": "cpu", "STEP_TIMEOUT": "45", "COLLECTIVE_TIMEOUT": "120", "OUTPUT_DIR": str(tmp_path / "run")}
    result = subprocess.run(["bash", "slurm/pretrain_large.sh", "--plan-json", str(tmp_path / "plan.json")],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert (plan["step_timeout"], plan["startup_timeout"], plan["collective_timeout"]) == (45, 1800, 120)
    assert "watchdog   | a rank with no progress ends the run (exit 98" in result.stdout
    assert "steps 45 s (--step-timeout); start-up, first step and first checkpoint write 1800 s" in result.stdout


def test_auto_limits_follow_the_measured_steps_and_checkpoint_writes():
    from bert_ds.training.loop.watchdog import Limits, Watchdog

    watchdog = Watchdog(Limits(step=None, startup=1800), rank=0, world_size=1, hang_dir=None)
    assert watchdog.limit() == 1800  # start-up
    with watchdog.phase("step", "the training loop"):
        watchdog.step_done(1, 900.0)  # the first step (kernel builds, connections) is no measure
        assert watchdog.step_limit() == 1800
        for step, seconds in enumerate([40.0, 50.0, 60.0], start=2):
            watchdog.step_done(step, seconds)
        assert watchdog.limit() == 500  # 10x the median step
        watchdog.step_done(5, 1.0)
        watchdog.step_done(6, 1.0)
        assert watchdog.limit() == 400  # the median of 40, 50, 60, 1, 1 is 40
        with watchdog.phase("checkpoint", "writing"):
            assert watchdog.limit() == 1800
    fast = Watchdog(Limits(step=None), rank=0, world_size=1, hang_dir=None)
    for step in range(1, 5):
        fast.step_done(step, 0.2)
    assert fast.step_limit() == 300  # at least 300 s
    fixed = Watchdog(Limits(step=7), rank=0, world_size=1, hang_dir=None)
    fixed.step_done(1, 0.1)
    with fixed.phase("data", "reading"):
        assert fixed.limit() == 7 and not Limits(step=0).enabled
    # Checkpoint writes after the first: 10x the longest so far, at least the step limit.
    quick = Watchdog(Limits(step=0.01), rank=0, world_size=1, hang_dir=None)
    quick.step_done(1, 0.1)
    with quick.phase("checkpoint", "writing"):
        assert quick.limit() == 1800  # nothing measured yet
        time.sleep(0.05)
    with quick.phase("checkpoint", "writing"):
        assert 0.5 <= quick.limit() < 1.5
    with quick.phase("data", "reading"):
        assert quick.limit() == 0.01


def test_fine_tuning_runs_under_the_watchdog_too(tmp_path, pretrained_tiny):
    """A 2-rank GLUE job whose rank 1 is stopped after its first epoch: rank 0 writes OUTPUT/hang/
    and names the silent rank."""
    import random

    from tests.support.glue_fixtures import write_sst2

    write_sst2(tmp_path / "glue", random.Random(0))
    out = tmp_path / "out"
    args = ["--task", "sst2", "--data-dir", str(tmp_path / "glue"), "--init", pretrained_tiny, "--output", str(out),
            "--max-seq-length", "48", "--epochs", "40", "--batch-size", "8", "--lr", "1e-3", "--no-save-model",
            "--step-timeout", str(LIMIT)]
    job = Job(tmp_path, args, None, nproc=2, script="bert_ds/finetune/glue.py")
    try:
        deadline = time.monotonic() + 240
        while "epoch 1/40 |" not in job.log():
            assert job.process.poll() is None and time.monotonic() < deadline, job.log()[-3000:]
            time.sleep(0.5)
        rank1 = next(pid for pid in job.processes() if _environ(pid).get("RANK") == "1")
        os.kill(rank1, signal.SIGSTOP)
        stopped_at = time.monotonic()
        while "error: hang:" not in job.err.read_text():
            assert time.monotonic() - stopped_at < LIMIT + 60, job.log()[-3000:]
            time.sleep(0.5)
    finally:
        job.kill()
    cause = _hang_report(out, 0).splitlines()[0]
    assert "on rank 0 (" in cause and "fine-tuning" in cause and "from rank 1 on " in cause, cause


def test_the_silent_peers_are_named_from_earlier_readings_when_the_store_has_gone():
    """Rank 0 hosts the store; when it trips and exits first, the others' last reading fails:
    the readings at half and three quarters of the limit still name the silent peers."""
    from bert_ds.runtime.heartbeat import Beat
    from bert_ds.training.loop.watchdog import Limits, Watchdog

    class GoneStore:
        enabled, store_name, error = True, "node1:29500", "DistNetworkError: Broken pipe"

        def read(self):
            return None

    def beats(counts):
        return {rank: Beat(count, 10, "step", "node1" if rank < 2 else "node2") for rank, count in enumerate(counts)}

    watchdog = Watchdog(Limits(step=10), rank=1, world_size=4, hang_dir=None, heartbeats=GoneStore())
    named = watchdog._peers((100.0, beats([5, 5, 5, 5])), later=(104.0, beats([9, 9, 5, 5])))
    assert named.startswith("no heartbeat for 4 s from rank 2 on node2 (at step 10, step), rank 3 on node2"), named
    assert "rank 0" not in named
    assert "node1:29500 (rank 0's host) cannot be reached (DistNetworkError: Broken pipe)" in watchdog._peers((100.0, beats([5] * 4)))


_PEER_GONE_SCRIPT = """
import sys, time
from bert_ds.training.loop.watchdog import Limits, Watchdog, watch

class NoStore:
    enabled = False
    def publish(self, step, what): pass
    def read(self): return None

watchdog = Watchdog(Limits(step=4), rank=0, world_size=2, hang_dir=sys.argv[1], heartbeats=NoStore())
with watch(watchdog):
    watchdog.step_done(1, 0.1)
    with watchdog.phase("collective", "the all-reduce of the step's flags"):
        time.sleep(float(sys.argv[2]))
        raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.77.0.11]:24976")
"""


@pytest.mark.parametrize("stalled_for, reported", [(2.6, True), (0.5, False)])
def test_a_stalled_rank_whose_peer_exits_first_still_writes_its_report(tmp_path, stalled_for, reported):
    """The first rank to trip exits and closes its connections; a peer stalled in the same
    collective then gets gloo's "connection closed" before its own watchdog trips. Past half its
    limit it reports the stall as the watchdog would (stacks, exit 98); a rank that was not
    stalled (a peer that simply died) keeps the error, for the lost-contact line."""
    import sys

    result = subprocess.run([sys.executable, "-c", _PEER_GONE_SCRIPT, str(tmp_path / "hang"), str(stalled_for)],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    if reported:
        assert result.returncode == 98, result.stderr[-2000:]
        report = (tmp_path / "hang" / "rank-0.txt").read_text()
        first = report.splitlines()[0]
        assert first.startswith("error: hang: collective stalled on rank 0 (") and "in the all-reduce of the step's flags" in first
        assert "when another process's connection closed ([../third_party/gloo" in first and "Python stacks of every thread" in report
    else:
        assert result.returncode == 1 and "Connection closed by peer" in result.stderr
        assert not (tmp_path / "hang").exists()
