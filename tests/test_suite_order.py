"""The suite's own scheduling (tests/conftest.py): pytest-xdist hands out whole files longest
first, by the recorded durations, so that the long multi-process files do not end the run alone."""

from tests.conftest import recorded_durations


def test_files_are_handed_out_longest_first(request):
    # xdist's default would reorder the files by their number of tests (the option is absent without xdist).
    assert request.config.getoption("loadscopereorder", default=False) is False
    recorded = recorded_durations()
    per_file: dict[str, float] = {}
    for nodeid, seconds in recorded.items():
        per_file[nodeid.split("::")[0]] = per_file.get(nodeid.split("::")[0], 0.0) + seconds
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in request.session.items))
    totals = [per_file.get(file, 0.0) for file in files]
    assert len(files) >= 1 and totals == sorted(totals, reverse=True), list(zip(files, totals))[:10]
