"""Resume a checkpoint on another parallel layout: TP2 x PP2 (4 ranks) -> DP2 -> TP2 x PP2 x DP2 (8 ranks), DP2->DP1->DP2.

Each resumed run must continue exactly like the run on the original layout (dropout off): same
losses to 1e-5 and the same token counts, which only the same examples give. The DP moves keep
DP x loader workers constant (2 x 0 workers <-> 1 x 2 workers), so the data shards map one to one;
tests/test_data_reshard.py covers changing the number of shards.
"""

import pytest

from tests.support.helpers import run_pretrain
from tests.support.layouts import COMMON, _assert_continues, _hf_logits, _run, _tag

@pytest.fixture(scope="module")
def cache(shared_cache):
    """The session's BERT_DS_CACHE (tests/conftest.py): the sample tokenizer is trained once."""
    return shared_cache


def _convert(checkpoint, out):
    import subprocess
    import sys

    from tests.support.helpers import REPO

    command = [sys.executable, "-m", "bert_ds.checkpoint", "portable", checkpoint, str(out)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return str(out)


def _assert_same_export(tmp_path, split_checkpoint, single_checkpoint):
    """A checkpoint of a split layout exports to the same HF model as the same state at TP1/PP1."""
    import torch

    for split, single in zip(_hf_logits(split_checkpoint, tmp_path / "hf-split"), _hf_logits(single_checkpoint, tmp_path / "hf-single")):
        assert torch.allclose(split, single, atol=1e-4), (split - single).abs().max()


def test_tensor_x_pipeline_x_data_parallel_equal_one_process_and_resume_across_layouts(tmp_path, cache):
    """All three parallelisms at once, each layout continuing the same run (dropout off, fp32):
    one process (2 loader workers) -> TP2 x PP2 (4 ranks, 2 workers) to step 4 and an exact resume to
    6 on the same layout; its step-2 checkpoint -> TP1 x PP1 x DP2 (2 ranks, ZeRO-1) to step 4 ->
    TP2 x PP2 x DP2 (8 ranks, ZeRO-1) to step 6. Every step's loss equals the one process's to 1e-5
    with the same tokens; DP x workers stays 2 so the data shards map one to one. TP 2->1->2 and
    PP 2->1->2 are both in the chain, and the 8-rank checkpoint exports to the one process's model."""
    single, _ = _run(tmp_path, cache, "single", ["--num-workers", "2"], nproc=1, steps=6)
    split = ["--tensor-parallel", "2", "--pipeline-parallel", "2"]
    tp2pp2, result = _run(tmp_path, cache, "tp2pp2", [*split, "--num-workers", "2", "--stop-at-step", "4"], nproc=4, steps=6)
    assert "world 4 = TP 2 x PP 2 x DP 1" in result.stdout
    _assert_continues(tp2pp2, single, [1, 2, 3, 4])
    # An exact resume on the same layout: --auto-resume finds step 4 (the metrics file is appended).
    resumed, result = _run(tmp_path, cache, "tp2pp2", [*split, "--num-workers", "2", "--auto-resume"], nproc=4, steps=6)
    assert "resumed from" in result.stdout and sorted(resumed) == [1, 2, 3, 4, 5, 6]
    _assert_continues(resumed, single, [5, 6])
    dp2, result = _run(tmp_path, cache, "dp2", ["--zero-stage", "1", "--stop-at-step", "4", "--load", _tag(tmp_path, "tp2pp2", 2)],
                       nproc=2, steps=6)
    assert "has layout TP 2 x PP 2 x DP 1, 2 loader workers, this run TP 1 x PP 1 x DP 2" in result.stdout
    assert sorted(dp2) == [3, 4]
    _assert_continues(dp2, single, [3, 4])
    full, result = _run(tmp_path, cache, "3d", [*split, "--zero-stage", "1", "--load", _tag(tmp_path, "dp2", 4)], nproc=8, steps=6)
    assert "world 8 = TP 2 x PP 2 x DP 2" in result.stdout and sorted(full) == [5, 6]
    _assert_continues(full, single, [5, 6])
    _assert_same_export(tmp_path, _tag(tmp_path, "3d", 6), _tag(tmp_path, "single", 6))


def test_data_parallel_2_to_1_to_2(tmp_path, cache):
    dp2, _ = _run(tmp_path, cache, "dp2", ["--zero-stage", "2"], nproc=2, steps=6)
    dp1, _ = _run(
        tmp_path, cache, "dp1", ["--zero-stage", "2", "--num-workers", "2", "--load", _tag(tmp_path, "dp2", 2)],
        nproc=1, steps=6,
    )
    _assert_continues(dp1, dp2, [3, 4, 5, 6])
    # Back through an explicit portable folder (the CLI) instead of the automatic conversion.
    portable = _convert(_tag(tmp_path, "dp1", 4), tmp_path / "portable")
    back, _ = _run(tmp_path, cache, "back", ["--zero-stage", "2", "--load", portable], nproc=2, steps=6)
    _assert_continues(back, dp1, [5, 6])


def test_continue_pretraining_an_imported_hugging_face_model(tmp_path, cache):
    """import-hf -> `--load PORTABLE`: training starts at step 0 from the imported weights (also in
    the optimizer's fp32 masters, or the first step would bring the random init back)."""
    import subprocess
    import sys

    import torch
    import transformers
    from safetensors.torch import load_file

    from tests.support.helpers import REPO

    words = sorted({w.lower() for w in "the of and to a in is was he for it with as his on be at by".split()})
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + letters + [f"##{c}" for c in letters]
    hf_dir = tmp_path / "hf"
    config = transformers.BertConfig(
        vocab_size=len(tokens), hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256
    )
    transformers.BertForPreTraining(config).save_pretrained(hf_dir)
    (hf_dir / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
    portable = tmp_path / "imported"
    command = [sys.executable, "-m", "bert_ds.checkpoint", "import-hf", str(hf_dir), str(portable)]
    assert subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300).returncode == 0

    tokenizer = ["--tokenizer", str(portable / "tokenizer" / "vocab.txt"), "--lr", "1e-7", "--warmup-steps", "1"]
    _, result = _run(tmp_path, cache, "tuned", ["--load", str(portable), *tokenizer], nproc=1, steps=2)
    assert "initialised weights from" in result.stdout
    exported = tmp_path / "exported"
    _hf_logits(_tag(tmp_path, "tuned", 2), exported)
    before, after = load_file(hf_dir / "model.safetensors"), load_file(exported / "model.safetensors")
    for name in ("bert.encoder.layer.0.attention.self.query.weight", "bert.embeddings.word_embeddings.weight"):
        assert torch.allclose(before[name], after[name], atol=1e-4), name

    # A model of another shape is refused in one sentence.
    _, other = None, run_pretrain(
        COMMON + ["--train-steps", "2", "--preset", "mini", "--load", str(portable), *tokenizer], cache_dir=cache
    )
    assert other.returncode == 2 and "holds a different model" in other.stderr and "Traceback" not in other.stderr
