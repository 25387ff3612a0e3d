"""benchmarks/desk_pretrain.sh, the calibrated CPU recipe, runs as shipped: from folders that
`python -m bert_ds.data.prepare` made of WikiExtractor and Gutenberg files, phase 1 at 128 tokens
to its stop step, then phase 2 at 256 tokens to the end; run again, it does nothing more. The
recipe's sizes are shrunk through its environment (tiny preset, small batches, few steps)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bert_ds.data.prepare.command import main as prepare_main

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_desk_recipe_runs_both_phases_from_prepared_folders(tmp_path, shared_cache, monkeypatch):
    monkeypatch.setenv("BERT_DS_CACHE", shared_cache)
    prepared = tmp_path / "prepared"
    for name, source in (("books", "gutenberg"), ("wiki", "wikiextractor")):
        for folder in (name, f"{name}-held-out"):
            assert prepare_main([f"{folder}={FIXTURES / source}", "--output", str(prepared / folder)]) == 0
    out = tmp_path / "desk"
    env = dict(os.environ, PRESET="tiny", GLOBAL_BATCH="4", EVAL_SAMPLES="4", EVAL_INTERVAL="2", PHASE1_STEPS="2",
               TRAIN_STEPS="3", PRECISION="fp32", BERT_DS_CACHE=shared_cache, OMP_NUM_THREADS="2")
    command = ["bash", str(REPO / "benchmarks" / "desk_pretrain.sh"), str(prepared), str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "desk recipe, phase 1: 128 tokens to step 2" in run.stdout
    assert "desk recipe, phase 2: 256 tokens, steps 2 to 3" in run.stdout
    assert "layout wikiextractor" not in run.stdout and "layout article" in run.stdout  # read from the prepared folders
    assert (out / "latest").read_text() == "step00000003"
    marker = json.loads((out / "step00000003" / "complete.json").read_text())
    assert marker["run"]["seq_length"] == 256 and marker["model_config"]["layer_norm_position"] == "pre"
    evaluations = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "eval/mlm_loss" in line]
    assert [e["step"] for e in evaluations] == [2, 3]
    again = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert again.returncode == 0 and "phase" not in again.stdout and "desk recipe done" in again.stdout
