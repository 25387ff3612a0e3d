"""One experiment folder shared by several jobs (experiments/shared_output.py): the options that
decide results are recorded once and a job with others is refused; a step claimed by one job makes
another wait (and a stop still ends the wait); updates from several processes are all kept."""

import errno
import fcntl
import json
import multiprocessing
import threading
import time

import pytest

from bert_ds.errors import ConfigError
from bert_ds.experiments import shared_output
from bert_ds.experiments.shared_output import check_options, claimed, update_json


def test_a_job_with_other_result_options_is_refused_by_name(tmp_path):
    options = dict(scale="desk", restarts=3, tokenizer="bert-base-uncased", data=["books=/b"])
    check_options(tmp_path, options, anything_made=False)
    check_options(tmp_path, dict(options), anything_made=True)  # the same: accepted
    assert json.loads((tmp_path / "options.json").read_text()) == options
    with pytest.raises(ConfigError, match=r"restarts 2 where it has 3.*another --output") as refused:
        check_options(tmp_path, dict(options, restarts=2), anything_made=True)
    assert "tokenizer" not in str(refused.value)  # only what differs is named
    check_options(tmp_path, dict(options, new_option=1), anything_made=True)  # one the record predates: added
    assert json.loads((tmp_path / "options.json").read_text())["new_option"] == 1
    # Nothing made yet (a first job that failed on a typo): the corrected job's options replace the record.
    check_options(tmp_path, dict(options, restarts=5), anything_made=False)
    assert json.loads((tmp_path / "options.json").read_text())["restarts"] == 5


def test_without_file_locks_jobs_warn_once_and_go_on(tmp_path, monkeypatch, capsys):
    """Lustre without -o flock, NFS with nolock: flock raises ENOSYS; a job says what that means and
    goes on unlocked instead of failing."""
    def no_locks(handle, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with claimed(tmp_path / "pretrain" / "ltr" / ".claim", "pre-training ltr", lambda: None, print):
        update_json(tmp_path / "step_seconds.json", lambda times: times.update(a=1))
    check_options(tmp_path, {"restarts": 3}, anything_made=False)
    err = capsys.readouterr().err
    assert err.count("cannot be locked (Function not implemented): jobs of this experiment folder cannot see") == 2
    assert json.loads((tmp_path / "step_seconds.json").read_text()) == {"a": 1}


def test_a_claimed_step_makes_another_job_wait_until_it_is_released(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_output, "POLL_SECONDS", 0.05)
    claim, said, order = tmp_path / "cell" / ".claim", [], []
    holder_in, release = threading.Event(), threading.Event()

    def holder():  # flock locks belong to open files, so two threads stand for two jobs
        with claimed(claim, "pre-training ltr", lambda: None, said.append):
            holder_in.set()
            release.wait(10)
            order.append("holder done")

    thread = threading.Thread(target=holder)
    thread.start()
    holder_in.wait(10)
    threading.Timer(0.3, release.set).start()
    with claimed(claim, "pre-training ltr", lambda: None, said.append):
        order.append("waiter in")
    thread.join(10)
    assert order == ["holder done", "waiter in"]
    assert said == ["pre-training ltr: another job is running it; waiting for that job to finish it"]


def test_a_stop_ends_the_wait_for_a_claimed_step(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_output, "POLL_SECONDS", 0.05)
    claim, holder_in, release = tmp_path / ".claim", threading.Event(), threading.Event()

    def holder():
        with claimed(claim, "x", lambda: None, lambda line: None):
            holder_in.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    holder_in.wait(10)
    began, tries = time.monotonic(), []

    def still_running():
        tries.append(1)
        if len(tries) == 3:
            raise KeyboardInterrupt("stopped")

    with pytest.raises(KeyboardInterrupt):
        with claimed(claim, "x", still_running, lambda line: None):
            pass
    release.set()
    thread.join(10)
    assert len(tries) == 3 and time.monotonic() - began < 5


def _add_many(path, key, count, start):
    def add(record):
        value = record.get(key, 0)
        time.sleep(0.002)  # a read-modify-write long enough for another process to step in without the lock
        record.update({key: value + 1, "total": record.get("total", 0) + 1})

    start.wait(60)  # every process updates at once
    for _ in range(count):
        update_json(path, add)


def test_updates_from_several_processes_are_all_kept(tmp_path):
    path = tmp_path / "step_seconds.json"
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    workers = [context.Process(target=_add_many, args=(path, f"job{n}", 40, start)) for n in range(3)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert json.loads(path.read_text()) == {"job0": 40, "job1": 40, "job2": 40, "total": 120}
    assert not list(tmp_path.glob("*.tmp*"))


def test_a_finished_steps_leftover_child_does_not_keep_the_claim(tmp_path):
    """The step's process gets the claim's descriptor (so an orphaned step stays claimed), and so may
    a child it leaves behind (a launcher's helper). Once the job saw its step end, the claim is
    released for every holder: the next job does not wait for that leftover."""
    import subprocess

    from bert_ds.runtime.cache import holding

    claim = tmp_path / ".claim"
    with claimed(claim, "x", lambda: None, lambda line: None) as descriptor:
        leftover = subprocess.Popen(["sleep", "60"], pass_fds=(descriptor,))
    try:
        with holding(claim, wait=False) as lock:
            assert lock is not None  # free, although the leftover still holds the descriptor
        assert leftover.poll() is None
    finally:
        leftover.kill()
        leftover.wait()
