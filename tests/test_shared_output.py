"""One experiment folder shared by several jobs (experiments/shared_output.py): the options that
decide results are recorded once and a job with others is refused; a step claimed by one job makes
another wait (and a stop still ends the wait); updates from several processes are all kept."""

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
    check_options(tmp_path, options)
    check_options(tmp_path, dict(options))  # the same: accepted
    assert json.loads((tmp_path / "options.json").read_text()) == options
    with pytest.raises(ConfigError, match=r"restarts 2 where it has 3.*another --output") as refused:
        check_options(tmp_path, dict(options, restarts=2))
    assert "tokenizer" not in str(refused.value)  # only what differs is named
    check_options(tmp_path, dict(options, new_option=1))  # an option the record predates: not a difference


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


def _add_many(path, key, count):
    for _ in range(count):
        update_json(path, lambda record: record.update({key: record.get(key, 0) + 1, "total": record.get("total", 0) + 1}))


def test_updates_from_several_processes_are_all_kept(tmp_path):
    path = tmp_path / "step_seconds.json"
    workers = [multiprocessing.get_context("spawn").Process(target=_add_many, args=(path, f"job{n}", 40)) for n in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert json.loads(path.read_text()) == {"job0": 40, "job1": 40, "job2": 40, "total": 120}
    assert not list(tmp_path.glob("*.tmp"))
