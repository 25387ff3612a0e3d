"""benchmarks/learning_parity.py stops and goes on (benchmarks/parity_state.py): a pair stopped at
step 4 and run again ends with the per-step losses and held-out scores of a pair that never
stopped, on both sides (same batches, dropout masks, AdamW moments and schedules); a saved pair
is refused, with the setting named, when the command's settings differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

COMMAND = [sys.executable, str(REPO / "benchmarks" / "learning_parity.py"), "--modes", "recipe", "--presets", "tiny",
           "--seeds", "1", "--precisions", "fp32", "--recipe-steps", "6", "--batch", "4", "--eval-interval", "3",
           "--eval-samples", "8", "--threads", "1"]


def _run(shared_cache, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *extra], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BERT_DS_CACHE": shared_cache, "OMP_NUM_THREADS": "1"})


def _curves(output) -> dict:
    """Per side: every step's losses and every evaluation's scores (not the seconds, which vary)."""
    kept = ("step", "mlm_loss", "nsp_loss", "lr", "eval/mlm_accuracy", "eval/nsp_accuracy", "eval/mlm_loss")
    return {side: [{k: v for k, v in json.loads(line).items() if k in kept}
                   for line in (output / f"recipe-tiny-fp32-seed0-{side}.jsonl").read_text().splitlines()]
            for side in ("bert_ds", "hf") if (output / f"recipe-tiny-fp32-seed0-{side}.jsonl").exists()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, shared_cache):
    output = tmp_path_factory.mktemp("parity") / "whole"
    done = _run(shared_cache, "--output", str(output))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return _curves(output)


def test_a_pair_stopped_and_run_again_ends_like_one_that_never_stopped(uninterrupted, shared_cache, tmp_path):
    output = tmp_path / "stopped"
    first = _run(shared_cache, "--output", str(output), "--stop-at-step", "4")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "stopped at step 4" in first.stdout and not (output / "recipe-tiny-fp32-seed0-hf.jsonl").exists()
    second = _run(shared_cache, "--output", str(output))
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"resumed from {output / 'state-recipe-tiny-fp32-seed0'} at step 4" in second.stdout
    resumed = _curves(output)
    for side in ("bert_ds", "hf"):
        assert [r["step"] for r in resumed[side] if "mlm_loss" in r] == list(range(1, 7))
        assert resumed[side] == uninterrupted[side], side
    # The losses moved over the six steps: equal curves are not equal constants.
    assert len({r["mlm_loss"] for r in resumed["hf"] if "mlm_loss" in r}) == 6


def test_a_saved_pair_refuses_other_settings(shared_cache, tmp_path):
    output = tmp_path / "saved"
    assert _run(shared_cache, "--output", str(output), "--stop-at-step", "2").returncode == 0
    refused = _run(shared_cache, "--output", str(output), "--lr", "1e-3")
    assert refused.returncode != 0
    assert "was saved with lr = 0.0003, this run has 0.001" in refused.stderr, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr


def test_a_pair_that_ended_is_saved_where_it_ended_and_not_trained_again(shared_cache, tmp_path):
    output = tmp_path / "ended"
    # A target of 0 ends this pair at its first evaluation (step 3 of 6).
    first = _run(shared_cache, "--output", str(output), "--save-interval", "100", "--until-accuracy", "0")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert f"saved {output / 'state-recipe-tiny-fp32-seed0' / 'step00000003'}" in first.stdout, first.stdout[-2000:]
    curves = _curves(output)
    assert [r["step"] for r in curves["hf"] if "mlm_loss" in r] == [1, 2, 3]
    again = _run(shared_cache, "--output", str(output), "--save-interval", "100", "--until-accuracy", "0")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "ended at step 3" in again.stdout and "saved" not in again.stdout, again.stdout[-2000:]
    assert _curves(output) == curves


def _chase(shared_cache, output, *extra: str) -> subprocess.CompletedProcess:
    # A target of 0 ends the pair at step 3; bert_ds then chases an accuracy it cannot reach, alone, to step 6.
    return _run(shared_cache, "--output", str(output), "--save-interval", "100", "--until-accuracy", "0",
                "--chase", "1.0", *extra)


def test_bert_ds_chases_alone_after_the_pair_and_resumes_mid_chase(shared_cache, tmp_path):
    whole = _chase(shared_cache, tmp_path / "whole")
    assert whole.returncode == 0, whole.stdout[-2000:] + whole.stderr[-2000:]
    assert "the pair ended at step 3; bert_ds goes on alone until 100.00% held out" in whole.stdout
    curves = _curves(tmp_path / "whole")
    assert [r["step"] for r in curves["hf"] if "mlm_loss" in r] == [1, 2, 3]
    assert [r["step"] for r in curves["bert_ds"] if "mlm_loss" in r] == list(range(1, 7))
    assert [r["step"] for r in curves["bert_ds"] if "eval/mlm_accuracy" in r] == [3, 6]
    stopped = _chase(shared_cache, tmp_path / "stopped", "--stop-at-step", "5")
    assert stopped.returncode == 0 and "stopped at step 5" in stopped.stdout, stopped.stdout[-2000:]
    resumed = _chase(shared_cache, tmp_path / "stopped")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "at step 5" in resumed.stdout and "the pair ended" not in resumed.stdout, resumed.stdout[-2000:]
    assert _curves(tmp_path / "stopped") == curves
    summary = subprocess.run([*COMMAND, "--output", str(tmp_path / "whole"), "--summarize", "--json",
                              str(tmp_path / "summary.json")], capture_output=True, text=True, timeout=120)
    assert "seed 0: bert_ds went on alone from step 3 to 6" in summary.stdout, summary.stdout[-2000:] + summary.stderr[-2000:]
    row = json.loads((tmp_path / "summary.json").read_text())["recipe"][0]
    hf_final = [r for r in curves["hf"] if "eval/mlm_accuracy" in r][-1]["eval/mlm_accuracy"]
    assert row["bert_ds_alone_after_the_pair"][0]["target"] == hf_final and row["steps"] == 3
    # The table compares both sides at the pair's end (step 3), not bert_ds's chase.
    at_end = [r for r in curves["bert_ds"] if "eval/mlm_accuracy" in r][0]["eval/mlm_accuracy"]
    assert row["mlm_accuracy"]["bert_ds"]["values"] == [at_end]


def test_chase_without_until_accuracy_is_refused(shared_cache, tmp_path):
    refused = _run(shared_cache, "--output", str(tmp_path), "--chase")
    assert refused.returncode == 2 and "give --until-accuracy too" in refused.stderr, refused.stderr[-2000:]


def _mlm_losses(output, precision: str) -> dict:
    return {side: [json.loads(line)["mlm_loss"] for line in path.read_text().splitlines() if "mlm_loss" in json.loads(line)]
            for side in ("bert_ds", "hf") if (path := output / f"recipe-tiny-{precision}-seed0-{side}.jsonl").exists()}


@pytest.fixture(scope="module")
def draws(tmp_path_factory, shared_cache):
    """Three-step pairs with dropout 0: bert_ds from its own draw (bf16), and from Hugging Face's
    (--init hf) in bf16 and fp32; {(precision, init): output folder}."""
    outputs = {}
    for precision, init in (("bf16", "own"), ("bf16", "hf"), ("fp32", "hf")):
        output = outputs[precision, init] = tmp_path_factory.mktemp(f"draw-{precision}-{init}")
        done = _run(shared_cache, "--output", str(output), "--precisions", precision, "--recipe-steps", "3",
                    "--recipe-dropout", "0", "--init", init)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return outputs


def test_init_hf_starts_bert_ds_from_hugging_faces_draw_in_bf16_and_fp32(draws):
    """--init hf holds the initial draw equal: with dropout 0 the two sides' steps then agree as in
    strict mode (in bf16 through its fp32 masters too, or step 2 would go back to bert_ds's own
    draw), where each side's own draw puts them apart."""
    gaps = {}
    for key, output in draws.items():
        losses = _mlm_losses(output, key[0])
        gaps[key] = [abs(a - b) for a, b in zip(losses["bert_ds"], losses["hf"])]
    assert max(gaps["fp32", "hf"]) < 1e-4, gaps
    assert max(gaps["bf16", "hf"]) < 2e-3, gaps
    assert max(gaps["bf16", "own"]) > 10 * max(gaps["bf16", "hf"]), gaps


def test_alone_trains_bert_ds_on_the_pairs_batches(draws, shared_cache, tmp_path):
    alone = _run(shared_cache, "--output", str(tmp_path), "--recipe-steps", "3", "--recipe-dropout", "0",
                 "--init", "hf", "--alone")
    assert alone.returncode == 0, alone.stdout[-2000:] + alone.stderr[-2000:]
    assert "seed 0, bert_ds alone:" in alone.stdout, alone.stdout[-2000:]
    assert not (tmp_path / "recipe-tiny-fp32-seed0-hf.jsonl").exists()
    assert _curves(tmp_path)["bert_ds"] == _curves(draws["fp32", "hf"])["bert_ds"]
    refused = _run(shared_cache, "--output", str(tmp_path / "x"), "--alone", "--until-accuracy", "0", "--chase")
    assert refused.returncode == 2 and "--alone trains bert_ds's side" in refused.stderr, refused.stderr[-2000:]
    # A pair's folder: --alone would overwrite its bert_ds curve.
    refused = _run(shared_cache, "--output", str(draws["fp32", "hf"]), "--alone", "--init", "hf", "--recipe-steps", "3")
    assert refused.returncode == 2 and "holds a pair's curves" in refused.stderr, refused.stderr[-2000:]
