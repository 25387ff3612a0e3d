"""The suite's own scheduling (tests/conftest.py): pytest-xdist hands out whole files longest
first, by the recorded durations, so that the long multi-process files do not end the run alone."""

import types

import pytest

from tests.conftest import recorded_durations


class _Worker:
    """What xdist's scheduler needs of a worker: it records the tests it is sent."""

    def __init__(self, name: str):
        self.gateway, self.shutting_down, self.sent = types.SimpleNamespace(id=name), False, []

    def send_runtest_some(self, indexes):
        self.sent.extend(indexes)

    def shutdown(self):
        self.shutting_down = True


def test_xdist_hands_out_files_in_collection_order(request, monkeypatch):
    """xdist's own file scheduler, under this suite's configuration: a file of one test collected
    first goes out first (xdist's default would send the file of three tests first)."""
    if not request.config.pluginmanager.hasplugin("xdist"):
        pytest.skip("runs under pytest-xdist (make test)")
    from xdist.scheduler import LoadFileScheduling
    from xdist.scheduler import loadscope

    assert request.config.option.loadscopereorder is False
    monkeypatch.setattr(loadscope, "parse_tx_spec_config", lambda config: ["popen"] * 2)
    scheduler = LoadFileScheduling(request.config)
    workers = [_Worker("gw0"), _Worker("gw1")]
    collection = ["long.py::only", "short.py::a", "short.py::b", "short.py::c"]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    assert [collection[i] for i in workers[0].sent] == ["long.py::only"]


def test_the_collection_is_sorted_longest_file_first(request):
    recorded = recorded_durations()
    per_file: dict[str, float] = {}
    for nodeid, seconds in recorded.items():
        per_file[nodeid.split("::")[0]] = per_file.get(nodeid.split("::")[0], 0.0) + seconds
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in request.session.items))
    totals = [per_file.get(file, 0.0) for file in files]
    assert len(files) >= 1 and totals == sorted(totals, reverse=True), list(zip(files, totals))[:10]
