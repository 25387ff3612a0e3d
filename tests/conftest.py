import json
import os
from pathlib import Path

# Idle OpenMP threads sleep instead of spinning. The suite runs two pytest workers on two cores, so
# a job's two intra-op threads usually share the cores with another job; libgomp's default spins an
# idle thread for a while (300,000 turns when it has the cores to itself) and takes a core away
# from the other job doing so. Two single-process tiny pre-trainings (30 steps, 2 threads each) at
# once took 21-36 s with the default and 11 s with PASSIVE, one alone 9.2-9.5 s vs 9.6-9.9 s
# (2-core Xeon with AMX, 2026-12-06). Set before torch loads libgomp, which reads it once;
# every subprocess inherits it, Slurm jobs through sbatch's exported environment.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402  (after the OpenMP setting above)
import torch  # noqa: E402

from bert_ds.runtime.cache import exclusive, publish, staging_path
from bert_ds.config import model_preset
from bert_ds.runtime.distributed import init_parallel, teardown_parallel

# `--precision auto` picks bf16 on CPUs with a bf16 matrix instruction and fp32 elsewhere; the
# suite's numerical comparisons (TP/PP/ZeRO equal to one process, to 1e-5) are fp32's, so every
# run here, subprocesses and spawned ranks included, takes fp32 for `auto` on any machine. The
# bf16 tests ask for `--precision bf16`; tests/test_precision.py checks auto's own rule.
os.environ["BERT_DS_CPU_BF16"] = "0"
# No test reaches the hub (this machine has no internet; hub sources are tested against local
# folders laid out as the hub, tests/support/hub_fixtures.py): offline, a hub call fails at once.
os.environ["HF_HUB_OFFLINE"] = "1"
# Every subprocess (a job run by path, `python -c`, `-m bert_ds...`) imports this checkout's
# bert_ds, not whichever checkout the venv's editable install points at.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)


def _shared_dir(tmp_path_factory, name: str) -> Path:
    """A folder shared by this session's pytest workers (pytest-xdist: the workers' temporary
    folders sit in one folder per run), so what a fixture builds there is built once per run,
    under a lock (bert_ds/runtime/cache.py), not once per worker."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return root / name


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One BERT_DS_CACHE for the whole run, the sample corpus's sentencepiece tokenizer trained
    into it here, once (about 35 s on 2 cores), not by the first job that needs it."""
    cache = _shared_dir(tmp_path_factory, "bert_ds_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BERT_DS_CACHE", str(cache))
        from bert_ds.training.plan.tokenizer import sample_tokenizer

        sample_tokenizer()  # locked: one worker trains, the other waits and loads
    return str(cache)


@pytest.fixture(scope="session")
def layout():
    """A world of one (gloo) with megatron's groups at TP=1, for single-process model tests."""
    torch.set_num_threads(2)
    parallel = init_parallel(model_preset("tiny"))
    yield parallel
    teardown_parallel()


@pytest.fixture(scope="session")
def sample_tokenizer(tmp_path_factory):
    """A sentencepiece tokenizer trained on the built-in sample corpus (small vocab: fast)."""
    from bert_ds.data.sources import iter_document_texts
    from bert_ds.data.tokenizer.load import load_tokenizer, train_sentencepiece

    folder = _shared_dir(tmp_path_factory, "tokenizer-2000")
    with exclusive(folder.with_suffix(".lock")):
        if not (folder / "tokenizer.model").exists():
            staging = staging_path(folder)
            train_sentencepiece(iter_document_texts(None), staging, vocab_size=2000)
            publish(staging, folder)
    return load_tokenizer(folder / "tokenizer.model")


@pytest.fixture(scope="session")
def sample_documents(sample_tokenizer):
    """The sample corpus as tokenized documents (sentences of ids), read once per session."""
    from bert_ds.data.sources import iter_document_texts
    from bert_ds.data.text.cleaning import TextStats, split_sentences

    stats = TextStats()
    documents = []
    for text in iter_document_texts(None):
        sentences = split_sentences(text, stats)
        documents.append([ids for ids in sample_tokenizer.encode_batch(sentences) if ids])
    return documents


@pytest.fixture(scope="session")
def pretrained_tiny(tmp_path_factory, shared_cache):
    """A tiny ZeRO pre-training checkpoint (20 steps on the sample corpus, its sentencepiece
    tokenizer stored beside it): the --init of fine-tuning tests."""
    from tests.support.helpers import run_pretrain

    root = _shared_dir(tmp_path_factory, "pretrained_tiny")
    with exclusive(root.with_suffix(".lock")):  # one worker trains it, the other waits
        if not (root / "ckpt" / "latest").exists():
            result = run_pretrain(
                ["--preset", "tiny", "--train-steps", "20", "--log-interval", "10", "--save", str(root / "ckpt")],
                cache_dir=shared_cache,
            )
            assert result.returncode == 0, result.stderr[-3000:]
    return str(root / "ckpt")


# Test order and the fast tier come from recorded durations (tests/durations.json, written by
# `make test-durations`): `--dist loadfile` hands whole files to the workers in collection order,
# so the longest files go first (a long file collected last would keep one worker busy while the
# other has nothing left); a test that took longer than FAST_LIMIT_S is marked `slow`, and
# `make test-fast` runs the rest. A test without a record (a new one) counts as fast until the
# next recording.
DURATIONS_FILE = Path(__file__).with_name("durations.json")
FAST_LIMIT_S = 12.0
_MEASURED: dict[str, float] = {}
_SKIPPED: set[str] = set()


def recorded_durations() -> dict[str, float]:
    return json.loads(DURATIONS_FILE.read_text()) if DURATIONS_FILE.exists() else {}


def pytest_configure(config):
    config.addinivalue_line("markers", f"slow: took over {FAST_LIMIT_S:g} s when durations were recorded (not in make test-fast)")
    # pytest-xdist (3.x) hands out files by their number of tests unless told not to, which undoes
    # the order below: the two-node Slurm file (two tests, 270 s) then ran last while the other
    # worker had nothing left (the suite 1,516 s; the same durations in this order: about 1,405 s).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    recorded = recorded_durations()
    per_file: dict[str, float] = {}
    for nodeid, seconds in recorded.items():
        file = nodeid.split("::")[0]
        per_file[file] = per_file.get(file, 0.0) + seconds
    items.sort(key=lambda item: -per_file.get(item.nodeid.split("::")[0], 0.0))  # stable: order within a file kept
    for item in items:
        if recorded.get(item.nodeid, 0.0) > FAST_LIMIT_S:
            item.add_marker(pytest.mark.slow)


def pytest_runtest_logreport(report):
    # Setup, call and teardown of each test; with xdist every worker's reports reach the controller.
    if os.environ.get("BERT_DS_RECORD_DURATIONS") == "1":
        _MEASURED[report.nodeid] = _MEASURED.get(report.nodeid, 0.0) + report.duration
        if report.skipped:
            _SKIPPED.add(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("BERT_DS_RECORD_DURATIONS") != "1" or hasattr(session.config, "workerinput") or not _MEASURED:
        return
    # A test skipped here (no Slurm on this machine) keeps the record of a run that ran it.
    durations = {k: v for k, v in recorded_durations().items() if k in _SKIPPED}
    durations.update({k: round(v, 2) for k, v in _MEASURED.items() if k not in _SKIPPED})
    DURATIONS_FILE.write_text(json.dumps(dict(sorted(durations.items())), indent=0) + "\n")
