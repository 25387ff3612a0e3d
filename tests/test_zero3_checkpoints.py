"""A ZeRO-3 checkpoint (model built partitioned, TP=2 x DP=2) moves to other layouts and exports to
Hugging Face through DeepSpeed's own consolidation of its shards (checkpoint/zero3_consolidate.py).

Dropout off, fp32: a run continued from the ZeRO-3 checkpoint on another layout must take exactly
the steps the ZeRO-3 run took (losses to 1e-5, same tokens). DP x loader workers stays 2, so the
data shards map one to one (tests/test_data_reshard.py covers changing their number).
"""

import subprocess
import sys

import pytest

from tests.support.helpers import REPO
from tests.support.layouts import _assert_continues, _hf_logits, _run, _tag

ZERO3 = ["--zero-stage", "3", "--deepspeed-config", "zero3"]


@pytest.fixture(scope="module")
def cache(shared_cache):
    return shared_cache


def test_zero3_checkpoint_resumes_at_dp1_and_dp2_and_exports_to_hugging_face(tmp_path, cache):
    import torch

    zero3, result = _run(tmp_path, cache, "zero3", [*ZERO3, "--tensor-parallel", "2"], nproc=4, steps=4)
    assert "world 4 = TP 2 x PP 1 x DP 2" in result.stdout and sorted(zero3) == [1, 2, 3, 4]
    # One process (ZeRO-0, two loader workers) continues the ZeRO-3 run from its step 2.
    dp1, result = _run(tmp_path, cache, "dp1", ["--num-workers", "2", "--load", _tag(tmp_path, "zero3", 2)], nproc=1, steps=4)
    assert "has layout TP 2 x PP 1 x DP 2" in result.stdout and sorted(dp1) == [3, 4]
    _assert_continues(dp1, zero3, [3, 4])
    # ZeRO-3 at TP=1 x DP=2: the consolidated weights and Adam moments are partitioned afresh.
    dp2, _ = _run(tmp_path, cache, "dp2-zero3", [*ZERO3, "--load", _tag(tmp_path, "zero3", 2)], nproc=2, steps=4)
    _assert_continues(dp2, zero3, [3, 4])
    # The ZeRO-3 checkpoint's HF export is the model the one process holds at the same step.
    exported = _hf_logits(_tag(tmp_path, "zero3", 4), tmp_path / "hf-zero3")
    for ours, single in zip(exported, _hf_logits(_tag(tmp_path, "dp1", 4), tmp_path / "hf-dp1")):
        assert torch.allclose(ours, single, atol=1e-4), (ours - single).abs().max()

    # A damaged shard is one sentence naming the checkpoint, not DeepSpeed's traceback.
    shard = next((tmp_path / "zero3" / "step00000004").glob("**/*optim_states.pt"))
    shard.write_bytes(shard.read_bytes()[:1000])
    command = [sys.executable, "-m", "bert_ds.checkpoint", "portable", _tag(tmp_path, "zero3", 4), str(tmp_path / "out")]
    broken = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert broken.returncode != 0 and "Traceback" not in broken.stderr, broken.stderr[-2000:]
    assert "step00000004" in broken.stderr, broken.stderr[-2000:]
