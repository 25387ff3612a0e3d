"""Kills, damaged checkpoints, full disks and diverging losses: real 1-2 process jobs with faults
injected at exact points (bert_ds/training/loop/faults.py)."""

import os
import random
import time

import pytest
import torch

from tests.support.helpers import read_metrics, run_pretrain

TINY = ["--preset", "tiny", "--log-interval", "1", "--save-interval", "2"]


@pytest.fixture(scope="module")
def cache(shared_cache):
    """The session's BERT_DS_CACHE (tests/conftest.py): the sample tokenizer is trained once."""
    return shared_cache


def _job(args, cache, nproc=1, faults="", timeout=180):
    os.environ.pop("BERT_DS_FAULTS", None)
    if faults:
        os.environ["BERT_DS_FAULTS"] = faults
    try:
        return run_pretrain(args, nproc=nproc, cache_dir=cache, timeout=timeout)
    finally:
        os.environ.pop("BERT_DS_FAULTS", None)


def _final_state(save, step):
    from bert_ds.checkpoint.convert import read_full_state

    full, adam_step, _ = read_full_state(save / f"step{step:08d}")
    return full, adam_step


def test_killed_ten_times_ends_exactly_like_an_uninterrupted_run(tmp_path, cache):
    """A 2-rank run SIGKILLed at 10 seeded points (after steps, and in the middle and at the end of
    saves, on either rank), resumed each time, ends with bitwise the weights and Adam moments of an
    uninterrupted run, and its example log lists exactly the same examples per step."""
    steps = 14
    common = TINY + ["--train-steps", str(steps), "--zero-stage", "2", "--dropout", "0"]
    straight = tmp_path / "straight"
    result = _job(common + ["--save", str(straight), "--example-log", str(tmp_path / "straight.ids")], cache, nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]

    rng = random.Random(20261129)
    points = sorted(rng.sample(range(1, steps), 10))
    faults = []
    for step in points:
        point = rng.choice(["step", "save-middle", "save-end"]) if step % 2 == 0 else "step"
        faults.append(f"kill:{point}:{step}:{rng.randint(0, 1)}")
    killed = tmp_path / "killed"
    args = common + ["--save", str(killed), "--auto-resume", "--example-log", str(tmp_path / "killed.ids")]
    for fault in faults:
        began = time.monotonic()
        result = _job(args, cache, nproc=2, faults=fault)
        assert result.returncode != 0, f"{fault} did not stop the run"
        assert time.monotonic() - began < 120, f"{fault}: the surviving rank did not exit in time"
        assert "Traceback" not in result.stdout
    result = _job(args, cache, nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]

    (ours, our_step), (theirs, their_step) = _final_state(killed, steps), _final_state(straight, steps)
    assert our_step == their_step and ours.keys() == theirs.keys()
    for name in ours:
        for kind in ours[name]:
            assert torch.equal(ours[name][kind], theirs[name][kind]), (name, kind)
    for dp in (0, 1):
        assert (tmp_path / f"killed.ids.dp{dp}").read_text() == (tmp_path / f"straight.ids.dp{dp}").read_text()
    uids = [u for dp in (0, 1) for line in (tmp_path / f"killed.ids.dp{dp}").read_text().splitlines() for u in line.split()[1:]]
    assert len(uids) == len(set(uids)) == steps * 16  # 16 examples per step (tiny preset), none twice


def test_truncated_checkpoint_is_named_and_fallback_only_when_asked(tmp_path, cache):
    save = tmp_path / "ckpt"
    assert _job(TINY + ["--train-steps", "4", "--save", str(save)], cache).returncode == 0
    damaged = save / "step00000004" / "mp_rank_00_model_states.pt"
    damaged.write_bytes(damaged.read_bytes()[:1000])
    refused = _job(TINY + ["--train-steps", "6", "--load", str(save)], cache)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert str(damaged) in refused.stderr and "--fallback-to-previous" in refused.stderr
    metrics = tmp_path / "m.jsonl"
    resumed = _job(TINY + ["--train-steps", "6", "--load", str(save), "--fallback-to-previous", "--metrics-file", str(metrics)], cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Falling back" in resumed.stdout and "step00000002" in resumed.stdout
    assert [m["step"] for m in read_metrics(metrics)] == [3, 4, 5, 6]


def test_full_disk_while_saving_keeps_training_and_the_previous_checkpoint(tmp_path, cache):
    save = tmp_path / "ckpt"
    result = _job(TINY + ["--train-steps", "6", "--save", str(save)], cache, nproc=2, faults="enospc:save:4:1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "No space left on device" in result.stdout and "step00000002 is intact" in result.stdout
    assert sorted(p.name for p in save.glob("step*")) == ["step00000002", "step00000006"]
    assert (save / "latest").read_text() == "step00000006"


def test_unwritable_save_folder_fails_at_start(tmp_path, cache):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = _job(TINY + ["--train-steps", "2", "--save", str(blocker / "ckpt")], cache)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "not writable" in result.stderr and str(blocker) in result.stderr


def test_non_finite_steps_are_skipped_then_stop_the_run(tmp_path, cache):
    metrics = tmp_path / "m.jsonl"
    skipped = _job(TINY + ["--train-steps", "6", "--metrics-file", str(metrics)], cache, faults="nan:step:3,nan:step:4")
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    logged = read_metrics(metrics)
    assert [m["skipped_steps"] for m in logged] == [0, 0, 1, 2, 2, 2]
    # One replica trains without ZeRO; its optimizer reports the gradient norm DeepSpeed clipped with.
    assert all(m["grad_norm"] > 0 for m in logged[:2] + logged[4:]), [m["grad_norm"] for m in logged]
    assert all(m["loss"] == m["loss"] for m in logged[4:])  # finite again after the skipped steps
    save = tmp_path / "ckpt"
    stopped = _job(TINY + ["--train-steps", "8", "--save", str(save), "--max-skipped-steps", "3"], cache,
                   faults="nan:step:3,nan:step:4,nan:step:5")
    assert stopped.returncode == 3 and "3 consecutive steps (3-5)" in stopped.stderr
    assert (save / "latest").read_text() == "step00000004"  # nothing written after the run went bad


def _shm_segment(name: str, age_s: float):
    """A file in /dev/shm named as DeepSpeed names its CPU all-reduce buffers, `age_s` old."""
    from bert_ds.runtime.shm_buffers import PREFIX, SHM_FOLDER

    path = SHM_FOLDER / f"{PREFIX}_{os.getuid()}_{name}_0"
    path.write_bytes(b"\0" * 4096)
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def _holding(path, how):
    """A live process that holds `path` open (how="fd") or only mapped (how="map", its fd closed)."""
    import subprocess
    import sys

    code = ("import mmap, sys; f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 0)\n"
            "if sys.argv[2] == 'map': f.close()\nprint('ready', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path), how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "ready"
    return holder


def test_stale_allreduce_buffers_are_removed_and_held_ones_kept(tmp_path):
    """A job killed inside DeepSpeed's start-up leaves its 66 MiB /dev/shm names: an old one no
    process holds goes; one a process holds open or mapped, or a young one, stays. (Aged 400 s
    against a 300 s limit: the jobs of other tests, at 600 s, leave them alone.)"""
    from bert_ds.runtime.shm_buffers import clear_stale_allreduce_buffers

    tag = f"test-{os.getpid()}-{tmp_path.name}"
    orphan, opened, mapped = (_shm_segment(f"{tag}-{kind}", 400) for kind in ("orphan", "opened", "mapped"))
    young = _shm_segment(f"{tag}-young", 10)
    holders = [_holding(opened, "fd"), _holding(mapped, "map")]
    try:
        removed = clear_stale_allreduce_buffers(max_age_s=300)
        assert orphan in removed and not orphan.exists()
        assert not {opened, mapped, young} & set(removed) and opened.exists() and mapped.exists() and young.exists()
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        for path in (orphan, opened, mapped, young):
            path.unlink(missing_ok=True)


def test_what_a_killed_job_left_does_not_hang_or_fill_the_next(tmp_path, cache, monkeypatch):
    """torch's JIT loader takes a lock while it checks DeepSpeed's prebuilt op at every start; a
    job killed in that second leaves it, and without bert_ds's check every later job waits forever.
    The job runs on a copy of the built ops (TORCH_EXTENSIONS_DIR), so the stale lock is this
    test's alone: another test's job (make test runs two workers) would clear a shared one first.
    A killed job's all-reduce buffer in /dev/shm is gone after the next job's start (this one's, or
    another test's job's: any job clears it), while one a live process maps stays."""
    import shutil

    from bert_ds.runtime.prebuild_ops import STALE_LOCK_S, clear_stale_locks, op_build_folders

    for built in op_build_folders():
        if built.is_dir():
            shutil.copytree(built, tmp_path / "extensions" / built.name, ignore=shutil.ignore_patterns("lock"))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))

    fresh, old, absent = (tmp_path / name for name in ("fresh", "old", "absent"))
    for folder in (fresh, old):
        folder.mkdir()
        (folder / "lock").touch()
    hour_ago = time.time() - 3600
    os.utime(old / "lock", (hour_ago, hour_ago))
    assert clear_stale_locks([fresh, old, absent]) == [old / "lock"]  # a lock in use stays
    assert (fresh / "lock").exists() and not (old / "lock").exists()

    lock = op_build_folders()[0] / "lock"  # the shm_comm op every CPU job loads
    assert not lock.exists()
    lock.touch()
    stale = time.time() - 2 * STALE_LOCK_S
    os.utime(lock, (stale, stale))
    tag = f"test-{os.getpid()}-{tmp_path.name}"
    orphan, mapped = _shm_segment(f"{tag}-killed", 3600), _shm_segment(f"{tag}-alive", 3600)
    holder = _holding(mapped, "map")
    try:
        result = _job(TINY + ["--train-steps", "2"], cache, timeout=120)
    finally:
        lock.unlink(missing_ok=True)
        holder.kill()
        holder.wait()
        orphan_was_removed, mapped_was_kept = not orphan.exists(), mapped.exists()
        for path in (orphan, mapped):
            path.unlink(missing_ok=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"warning: removed {lock}, a build lock" in result.stderr
    assert orphan_was_removed and mapped_was_kept


def test_ops_are_always_checked_by_the_pinned_ninja(monkeypatch):
    """ninja 1.11 (a system's) and 1.12+ (requirements.txt's) hash build commands differently: a job
    finding the other one rebuilt every op (50 s here). Every job puts the venv's ninja first."""
    import shutil
    import sys

    from bert_ds.runtime.prebuild_ops import use_pinned_ninja

    venv_bin = os.path.dirname(sys.executable)
    assert os.access(os.path.join(venv_bin, "ninja"), os.X_OK)  # installed from requirements.txt
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # a launcher's PATH, no venv
    use_pinned_ninja()
    assert shutil.which("ninja") == os.path.join(venv_bin, "ninja")
    use_pinned_ninja()  # once is enough: no second copy
    assert os.environ["PATH"] == f"{venv_bin}:/usr/local/bin:/usr/bin:/bin"


def test_each_environment_builds_its_ops_in_a_folder_of_its_own(monkeypatch):
    """torch's default op folder is one per user and Python: two venvs (CI's clone beside a working
    copy) rebuilt each other's ops at every switch (25-90 s an op). Each environment has its own,
    make install's prebuild fills it, and a user's TORCH_EXTENSIONS_DIR is kept."""
    import sys
    from pathlib import Path

    from torch.utils.cpp_extension import get_default_build_root

    from bert_ds.runtime.prebuild_ops import op_build_folders, own_extensions_dir, use_own_extensions_dir

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    own = own_extensions_dir()
    assert own.parent == Path(get_default_build_root()) and own.name.startswith(f"py{sys.version_info.major}{sys.version_info.minor}")
    with monkeypatch.context() as other:
        other.setattr(sys, "prefix", "/opt/another/venv")
        assert own_extensions_dir() != own and own_extensions_dir().parent == own.parent
    use_own_extensions_dir()
    assert os.environ["TORCH_EXTENSIONS_DIR"] == str(own)
    folders = op_build_folders()
    assert folders and all(folder.parent == own for folder in folders)
    # The job finds the ops make install built (prebuild_ops): none of them is built again.
    assert all(any(folder.glob("*.so")) for folder in folders), [list(f.iterdir()) for f in folders if f.is_dir()]
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/scratch/my-ops")
    use_own_extensions_dir()
    assert os.environ["TORCH_EXTENSIONS_DIR"] == "/scratch/my-ops"


def test_a_collective_that_lost_its_peer_is_told_apart_from_other_errors():
    """What gloo raises when the other end is gone, and torch's distributed error types, become
    pretrain.py's one-line "lost contact" error; an unrelated RuntimeError keeps its traceback."""
    from bert_ds.errors import first_line, lost_peer

    gloo = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                        "[10.77.0.12]:40576. This is typically caused by a remote worker crashing.\nmore")
    timeout = RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 600000ms "
                           "for recv operation to complete")
    assert lost_peer(gloo) and lost_peer(timeout) and lost_peer(torch.distributed.DistNetworkError("store gone"))
    assert not lost_peer(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) and not lost_peer(ValueError("gloo"))
    assert first_line(gloo).endswith("remote worker crashing.") and len(first_line(RuntimeError("x" * 900))) == 304
