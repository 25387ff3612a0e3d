"""Real pre-training jobs moved between parallel layouts: the run, and the checks that a resumed
run continues the original (tests/test_resume_layouts.py, tests/test_zero3_checkpoints.py)."""

import pytest

from tests.support.helpers import read_metrics, run_pretrain

COMMON = [
    "--preset", "tiny", "--log-interval", "1", "--dropout", "0", "--global-batch-size", "8",
    "--micro-batch-size", "4", "--save-interval", "2", "--lr", "3e-3", "--warmup-steps", "1",
]



def _run(tmp_path, cache, name, extra, nproc, steps):
    metrics = tmp_path / f"{name}.jsonl"
    result = run_pretrain(
        COMMON + ["--train-steps", str(steps), "--save", str(tmp_path / name), "--metrics-file", str(metrics), *extra],
        nproc=nproc, cache_dir=cache,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {m["step"]: m for m in read_metrics(metrics)}, result


def _assert_continues(resumed: dict, original: dict, steps):
    for step in steps:
        assert resumed[step]["loss"] == pytest.approx(original[step]["loss"], abs=1e-5), step
        assert resumed[step]["consumed_tokens"] == original[step]["consumed_tokens"], step


def _tag(tmp_path, name, step):
    return str(tmp_path / name / f"step{step:08d}")


def _hf_logits(checkpoint, out):
    """Export `checkpoint` with the CLI, load it in transformers, run a fixed batch."""
    import subprocess
    import sys

    import torch
    import transformers

    from tests.support.helpers import REPO

    command = [sys.executable, "-m", "bert_ds.checkpoint", "export-hf", checkpoint, str(out)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    model, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids = torch.randint(5, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        output = model.eval()(input_ids=ids, token_type_ids=(torch.arange(24) >= 12).long().expand(2, 24))
    return output.prediction_logits, output.seq_relationship_logits
