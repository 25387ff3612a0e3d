"""`bert_ds/pretrain.py` end to end: real jobs (1 or 2 processes, gloo), tiny preset, sample corpus."""

from pathlib import Path
import statistics

import pytest

from tests.support.golden import assert_golden
from tests.support.helpers import TWO_RANK_LAYOUTS, assert_checkpoint_matches_estimate, read_metrics, run_pretrain


@pytest.fixture(scope="module")
def cache(shared_cache):
    """The session's BERT_DS_CACHE (tests/conftest.py): the sample tokenizer is trained once."""
    return shared_cache


def _train(tmp_path, cache, extra, nproc=1, steps=30, name="run"):
    metrics = tmp_path / f"{name}.jsonl"
    result = run_pretrain(
        ["--preset", "tiny", "--train-steps", str(steps), "--log-interval", "1", "--metrics-file", str(metrics), *extra],
        nproc=nproc, cache_dir=cache,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [m for m in read_metrics(metrics) if "loss" in m], result


def _evals(tmp_path, name="run") -> dict:
    """The held-out evaluations a run logged (`eval/` lines of its metrics file), by step."""
    return {m["step"]: m for m in read_metrics(tmp_path / f"{name}.jsonl") if "eval/mlm_loss" in m}


def _falls(losses, points=0.3):
    return statistics.mean(losses[-5:]) < statistics.mean(losses[:5]) - points


@pytest.mark.parametrize("name", TWO_RANK_LAYOUTS)
def test_two_rank_layouts_train(tmp_path, cache, name):
    """Every layout trains, and evaluates on the held-out articles (ZeRO 0-3, TP, PP); with
    dropout on, its per-step losses and evaluations are the golden ones (tests/support/golden.py)."""
    metrics, _ = _train(tmp_path, cache, TWO_RANK_LAYOUTS[name] + ["--eval-interval", "15", "--eval-samples", "24"], nproc=2)
    assert [m["step"] for m in metrics] == list(range(1, 31))
    losses = [m["loss"] for m in metrics]
    assert _falls(losses), losses
    evals = _evals(tmp_path)
    assert_golden(f"pretrain-{name}-dropout", losses + [evals[s]["eval/mlm_loss"] for s in sorted(evals)])
    evals = _evals(tmp_path)
    assert sorted(evals) == [15, 30] and all(e["eval/samples"] == 24 for e in evals.values())
    assert evals[30]["eval/mlm_loss"] < evals[15]["eval/mlm_loss"], evals
    assert all(0 <= e["eval/nsp_accuracy"] <= 1 for e in evals.values())
    assert metrics[-1]["consumed_samples"] == 30 * 16
    assert all(m["tokens_per_s"] > 0 and m["model_flops_per_s"] > 0 for m in metrics)
    assert all(m["grad_norm"] is not None and m["grad_norm"] > 0 for m in metrics), [m["grad_norm"] for m in metrics]


def test_tp2_and_pp2_match_one_process(tmp_path, cache):
    """Without dropout TP and PP compute one process's losses; those and DP=2 ZeRO-2's (which
    reads other shards of the data, so other batches) are golden too (tests/support/golden.py)."""
    common = ["--dropout", "0", "--global-batch-size", "8", "--micro-batch-size", "4"]
    single, _ = _train(tmp_path, cache, common, steps=4, name="single")
    assert_golden("pretrain-single-no-dropout", [m["loss"] for m in single])
    for name, extra in {"tp2": ["--tensor-parallel", "2"], "pp2": ["--pipeline-parallel", "2"]}.items():
        split, _ = _train(tmp_path, cache, common + extra, nproc=2, steps=4, name=name)
        assert_golden(f"pretrain-{name}-no-dropout", [m["loss"] for m in split])
        for one, two in zip(single, split, strict=True):
            assert one["loss"] == pytest.approx(two["loss"], abs=2e-5), (extra, one["step"])
            assert one["mlm_accuracy"] == pytest.approx(two["mlm_accuracy"], abs=1e-6)
    data_parallel, _ = _train(tmp_path, cache, common + ["--zero-stage", "2"], nproc=2, steps=4, name="dp2-zero2")
    assert_golden("pretrain-dp2-zero2-no-dropout", [m["loss"] for m in data_parallel])


@pytest.mark.parametrize("extra", [["--zero-stage", "2"], ["--pipeline-parallel", "2"]], ids=["dp2-zero2", "pp2"])
def test_resume_is_exact(tmp_path, cache, extra):
    """A run resumed from its step-4 checkpoint continues its losses and held-out evaluations
    bitwise. The uninterrupted run is the one that wrote the checkpoint (saving must not change
    what it trains); stopping with --stop-at-step is covered by the auto-resume, Slurm and
    reliability tests."""
    extra = extra + ["--eval-interval", "2", "--eval-samples", "16"]
    save = str(tmp_path / "ckpt")
    straight, _ = _train(tmp_path, cache, extra + ["--save", save, "--save-interval", "4"], nproc=2, steps=8, name="straight")
    assert_checkpoint_matches_estimate(save)  # the launch plan's estimate, at DP=2 ZeRO-2 and PP=2 ZeRO-1
    second, result = _train(tmp_path, cache, extra + ["--load", f"{save}/step00000004"], nproc=2, steps=8, name="resumed")
    assert "resumed from" in result.stdout and "step 4" in result.stdout
    assert [m["step"] for m in second] == [5, 6, 7, 8]
    evals, straight_evals = _evals(tmp_path, "resumed"), _evals(tmp_path, "straight")
    assert sorted(straight_evals) == [2, 4, 6, 8] and sorted(evals) == [6, 8]
    for step in (6, 8):
        assert evals[step]["eval/mlm_loss"] == straight_evals[step]["eval/mlm_loss"], step
    for resumed, uninterrupted in zip(second, straight[4:]):
        assert resumed["loss"] == uninterrupted["loss"], resumed["step"]  # bitwise
        assert resumed["consumed_tokens"] == uninterrupted["consumed_tokens"]


@pytest.mark.parametrize("objective", ["mlm", "ltr"])
def test_other_objectives_train(tmp_path, cache, objective):
    metrics, _ = _train(tmp_path, cache, ["--objective", objective, "--lr", "2e-3", "--eval-interval", "25",
                                          "--eval-samples", "16"], steps=25)
    assert _falls([m["loss"] for m in metrics])
    assert all(m["nsp_loss"] is None and m["nsp_accuracy"] is None for m in metrics)
    held_out = _evals(tmp_path)[25]  # without NSP: no nsp metrics; for ltr the next-token ones
    assert held_out["eval/nsp_loss"] is None and held_out["eval/nsp_accuracy"] is None
    assert 0 < held_out["eval/mlm_loss"] < metrics[0]["mlm_loss"] and 0 < held_out["eval/mlm_accuracy"] < 1


def test_auto_resume_starts_fresh_then_continues(tmp_path, cache):
    save = str(tmp_path / "auto")
    _, first = _train(tmp_path, cache, ["--save", save, "--auto-resume", "--stop-at-step", "2"], steps=4, name="a1")
    assert "starting from step 0" in first.stdout
    metrics, second = _train(tmp_path, cache, ["--save", save, "--auto-resume", "--keep-last", "1"], steps=4, name="a2")
    assert [m["step"] for m in metrics] == [3, 4]
    assert sorted(p.name for p in (tmp_path / "auto").glob("step*")) == ["step00000004"]
    assert (tmp_path / "auto" / "latest").read_text() == "step00000004"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tensor-parallel", "3"], "4 attention heads are not divisible by tensor parallel size 3"),
        (["--global-batch-size", "12", "--micro-batch-size", "8"],
         "global batch size 12 is not divisible by micro batch size x data parallel = 8 x 1 = 8"),
        (["--data", "missing/books.txt"], "--tokenizer is required"),
        (["--load", "{tmp}/empty"], "no complete checkpoint in this folder (it is empty)"),
        (["--load", "{tmp}/partial"], "no complete checkpoint in this folder (incomplete: step00000004)"),
        (["--load", "{tmp}/nowhere"], "no such folder"),
        (["--deepspeed-config", "zero9"], "neither a file nor one of ds_configs/"),
        (["--lr", "-1"], "--lr must be positive"),
    ],
)
def test_misconfiguration_is_one_clear_sentence(tmp_path, cache, extra, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "partial" / "step00000004").mkdir(parents=True)
    args = ["--preset", "tiny", "--train-steps", "2", *[a.format(tmp=tmp_path) for a in extra]]
    result = run_pretrain(args, cache_dir=cache)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")


def test_missing_data_file_is_named(tmp_path, cache):
    from bert_ds.training.plan.tokenizer import sample_tokenizer_dir

    tokenizer = str(Path(cache) / sample_tokenizer_dir().name / "tokenizer.model")  # trained by the fixture
    result = run_pretrain(
        ["--preset", "tiny", "--train-steps", "2", "--tokenizer", tokenizer, "--data", "books=missing/books.txt"],
        cache_dir=cache,
    )
    assert result.returncode == 2
    assert "error: Data source 'books': file not found: missing/books.txt" in result.stderr


def test_unknown_preset_is_refused():
    result = run_pretrain(["--preset", "huge"])
    assert result.returncode == 2 and "invalid choice: 'huge'" in result.stderr


@pytest.mark.parametrize(
    "extra",
    [["--deepspeed-config", "zero2_offload"], ["--deepspeed-config", "zero2_fp16"], ["--optimizer", "lamb", "--lr", "1e-1"]],
    ids=["zero2_offload", "zero2_fp16-on-cpu", "lamb"],
)
def test_ready_configs_and_lamb_train(tmp_path, cache, extra):
    metrics, result = _train(tmp_path, cache, ["--lr", "2e-3", *extra], nproc=2, steps=12)
    losses = [m["loss"] for m in metrics]
    assert statistics.mean(losses[-3:]) < statistics.mean(losses[:3]) - 0.1, losses
    if "zero2_fp16" in extra:
        assert "zero2_fp16.json enables fp16; --precision auto trains in fp32 (" in result.stdout


def test_schedule_logging_and_phase_two(tmp_path, cache):
    """Warm-up then linear decay as logged; TensorBoard events; resuming at 512 tokens (phase 2)."""
    save, board = str(tmp_path / "ckpt"), tmp_path / "tb"
    metrics, _ = _train(
        tmp_path, cache,
        ["--lr", "1e-3", "--warmup-steps", "4", "--save", save, "--stop-at-step", "6", "--tensorboard-dir", str(board)],
        steps=10, name="phase1",
    )
    expected = [1e-3 * k / 4 if k < 4 else 1e-3 * (10 - k) / 6 for k in range(6)]  # the first step at lr 0
    assert [m["lr"] for m in metrics] == pytest.approx(expected)
    assert list(board.glob("events.out.tfevents.*"))
    phase2, result = _train(tmp_path, cache, ["--lr", "1e-3", "--warmup-steps", "4", "--load", save, "--seq-length", "512"], steps=8, name="phase2")
    assert "sequence length 128 -> 512" in result.stdout
    assert [m["step"] for m in phase2] == [7, 8]
    tokens_per_sample = [(b["consumed_tokens"] - a["consumed_tokens"]) / 16 for a, b in zip([metrics[-1]] + phase2, phase2)]
    assert min(tokens_per_sample) > 128  # longer sequences after the switch


@pytest.mark.parametrize("name, code", [("SIGUSR1", 99), ("SIGTERM", 143)])
def test_signal_saves_at_the_step_boundary_and_exits(tmp_path, cache, name, code):
    """Slurm's time-limit warning (SIGUSR1: exit 99, the batch script requeues) and scancel or
    preemption (SIGTERM: exit 143): a checkpoint at the next step boundary, then a clean exit."""
    import signal
    import subprocess
    import sys
    import time

    from tests.support.helpers import REPO

    save, metrics = tmp_path / "ckpt", tmp_path / "m.jsonl"
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    job = subprocess.Popen(
        [sys.executable, "bert_ds/pretrain.py", "--preset", "tiny", "--train-steps", "5000", "--log-interval", "1",
         "--save", str(save), "--metrics-file", str(metrics)],
        cwd=REPO, env={**env, "BERT_DS_CACHE": cache}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 240
    while not (metrics.exists() and len(read_metrics(metrics)) >= 2):
        assert job.poll() is None and time.time() < deadline, job.communicate()[1][-2000:]
        time.sleep(0.5)
    job.send_signal(getattr(signal, name))
    out, err = job.communicate(timeout=240)
    assert job.returncode == code, err[-2000:]
    step = read_metrics(metrics)[-1]["step"]
    assert f"received {name}: saving and stopping at step {step}" in out
    assert (save / "latest").read_text() == f"step{step:08d}"
