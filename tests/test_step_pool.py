"""The experiment's step scheduler (bert_ds/experiments/step_pool.py): prerequisites, the slot
count, a step starting beside a long one as soon as its own prerequisite ends, and failures."""

import threading

import pytest

from bert_ds.experiments.step_pool import run_steps


class Log:
    def __init__(self):
        self.lock, self.events, self.now, self.most = threading.Lock(), [], 0, 0

    def step(self, name, result=None, wait_for=None, error=None):
        def run():
            with self.lock:
                self.events.append(("start", name))
                self.now += 1
                self.most = max(self.most, self.now)
            if wait_for is not None:
                assert wait_for.wait(10), f"{name} waited in vain"
            with self.lock:
                self.events.append(("end", name))
                self.now -= 1
            if error is not None:
                raise error
            return result
        return run


def test_one_job_runs_the_steps_in_order_and_returns_each_result():
    log = Log()
    steps = {"a": (log.step("a", 1), ()), ("b", 2): (log.step("b", 2), ("a",)), "c": (log.step("c", 3), ())}
    assert run_steps(steps, 1) == {"a": 1, ("b", 2): 2, "c": 3}
    assert log.events == [("start", "a"), ("end", "a"), ("start", "b"), ("end", "b"), ("start", "c"), ("end", "c")]
    assert log.most == 1


def test_a_step_starts_beside_a_long_one_once_its_own_prerequisite_ends():
    # Table 5 with two slots: two pre-trainings, then a third beside the cells of the first ones.
    log, cell_started = Log(), threading.Event()
    cell = log.step("cell of short", "cell")

    def cell_then_signal():
        result = cell()
        cell_started.set()
        return result

    steps = {"long": (log.step("long", wait_for=cell_started), ()), "short": (log.step("short"), ()),
             "third": (log.step("third"), ()), "cell of long": (log.step("cell of long"), ("long",)),
             "cell of short": (cell_then_signal, ("short",))}
    run_steps(steps, 2)  # "long" only ends after "cell of short" ran: a two-wave run would wait forever
    assert log.events.index(("start", "third")) < log.events.index(("start", "cell of short"))
    assert log.events.index(("end", "long")) < log.events.index(("start", "cell of long"))
    assert log.most == 2


def test_after_a_failure_nothing_starts_and_the_error_is_raised_once_the_running_steps_end():
    log, release = Log(), threading.Event()
    steps = {"running": (log.step("running", wait_for=release), ()),
             "failing": (log.step("failing", error=RuntimeError("step failed")), ()),
             "after": (log.step("after"), ("failing",)), "later": (log.step("later"), ())}
    timer = threading.Timer(0.5, release.set)  # "running" ends long after "failing" failed
    timer.start()
    with pytest.raises(RuntimeError, match="step failed"):
        run_steps(steps, 2)
    assert log.events[-1] == ("end", "running")
    assert {name for kind, name in log.events if kind == "start"} == {"running", "failing"}


def test_unknown_and_circular_prerequisites_are_refused():
    with pytest.raises(ValueError, match="needs \\['nowhere'\\]"):
        run_steps({"a": (lambda: 1, ("nowhere",))}, 1)
    with pytest.raises(ValueError, match="wait for one another"):
        run_steps({"a": (lambda: 1, ("b",)), "b": (lambda: 2, ("a",))}, 2)
