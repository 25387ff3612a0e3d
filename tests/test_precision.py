"""`--precision`: the choice (bert_ds/runtime/precision.py), its DeepSpeed config, and bf16 training end to end.

bf16 runs are real jobs (1 or 2 processes, gloo, tiny preset) under every layout the suite trains:
ZeRO 0-3, TP with activation recomputation, PP; exact resume is bitwise as in fp32; a checkpoint
moved to another layout and its Hugging Face export carry the fp32 master weights. These run on
any CPU: correctness does not need a bf16 matrix unit (without one they are only slower).
"""

import json
import random
import statistics
import subprocess
import sys

import pytest
import torch

from bert_ds.runtime import precision
from bert_ds.config import ConfigError
from bert_ds.runtime.precision import choose_precision
from bert_ds.training.config.batch_plan import BatchPlan
from bert_ds.training.engine.ds_config import build_deepspeed_config
from tests.support.glue_fixtures import write_sst2
from tests.support.helpers import (REPO, TWO_RANK_LAYOUTS, needs_fast_bf16, read_metrics, run_entrypoint, run_pretrain,
                           run_pretrain_together)


@pytest.fixture(scope="module")
def cache(shared_cache):
    """The session's BERT_DS_CACHE (tests/conftest.py): the sample tokenizer is trained once."""
    return shared_cache


# --- the choice ---------------------------------------------------------------------------------

@pytest.mark.parametrize("unit, expected", [("AMX", "bf16"), ("AVX512-BF16", "bf16"), (None, "fp32")])
def test_auto_on_a_cpu_follows_its_bf16_instruction(monkeypatch, unit, expected):
    monkeypatch.delenv("BERT_DS_CPU_BF16", raising=False)
    monkeypatch.setattr(precision, "cpu_bf16_instructions", lambda: unit)
    choice = choose_precision("auto", "cpu")
    assert choice.name == expected and choice.warning is None
    assert (unit or "no bf16 matrix instruction") in choice.reason


def test_auto_on_this_cpu_reads_torchs_capability_query(monkeypatch):
    monkeypatch.delenv("BERT_DS_CPU_BF16", raising=False)
    fast = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    assert choose_precision("auto", "cpu").name == ("bf16" if fast else "fp32")


@pytest.mark.parametrize("forced, expected", [("0", "fp32"), ("1", "bf16")])
def test_the_environment_variable_overrides_auto_only(monkeypatch, forced, expected):
    monkeypatch.setenv("BERT_DS_CPU_BF16", forced)
    assert choose_precision("auto", "cpu").name == expected
    assert "BERT_DS_CPU_BF16=" + forced in choose_precision("auto", "cpu").reason
    assert choose_precision("fp32", "cpu").name == "fp32" and choose_precision("bf16", "cpu").name == "bf16"


def test_bad_environment_value_is_named(monkeypatch):
    monkeypatch.setenv("BERT_DS_CPU_BF16", "yes")
    with pytest.raises(ConfigError, match="BERT_DS_CPU_BF16='yes'"):
        choose_precision("auto", "cpu")


def test_explicit_bf16_on_a_cpu_without_the_instruction_runs_with_a_warning(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_instructions", lambda: None)
    choice = choose_precision("bf16", "cpu")
    assert choice.name == "bf16" and "slower than fp32" in choice.warning
    _config, notes, _choice = build_deepspeed_config("zero1", BatchPlan(16, 8, 1), "cpu", precision="bf16")
    assert f"--precision bf16: {choice.warning}" in notes  # every plan and engine says it


def test_fp16_on_a_cpu_is_refused():
    with pytest.raises(ConfigError, match="fp16 needs a GPU"):
        choose_precision("fp16", "cpu")


def test_gpu_choices(monkeypatch):
    assert choose_precision("auto", "gpu").name == "bf16"  # a plan made without a GPU here
    assert choose_precision("auto", "gpu", "fp16").name == "fp16"  # zero2_fp16 asks for fp16
    monkeypatch.setattr(precision, "gpu_supports_bf16", lambda: False)
    assert choose_precision("auto", "cuda").name == "fp16"  # a V100: fp16 with loss scaling
    monkeypatch.setattr(precision, "gpu_supports_bf16", lambda: True)
    assert choose_precision("auto", "cuda").describe() == "bf16 (this GPU supports bf16)"
    assert choose_precision("fp32", "cuda").name == "fp32"


@pytest.mark.parametrize("name, requested, device, enabled", [
    ("zero1", "fp32", "cuda", None),
    ("zero1", "bf16", "cpu", "bf16"),
    ("zero2_fp16", "bf16", "cuda", "bf16"),
    ("zero1", "fp16", "cuda", "fp16"),
    ("zero2_fp16", "auto", "cuda", "fp16"),
])
def test_the_deepspeed_config_enables_exactly_the_choice(name, requested, device, enabled):
    # Two replicas: one keeps bf16's masters itself (tests/test_master_weights.py).
    config, _notes, choice = build_deepspeed_config(name, BatchPlan(32, 8, 2), device, precision=requested)
    on = [p for p in ("bf16", "fp16") if config.get(p, {}).get("enabled")]
    assert on == ([enabled] if enabled else []) and choice.name == (enabled or "fp32")
    if enabled == "fp16":
        assert config["fp16"]["loss_scale"] == 0  # dynamic loss scaling
    if enabled == "bf16":
        assert config["bf16"]["check_grad_overflow"] is True
        assert config["zero_optimization"]["stage"] > 0  # ZeRO holds the fp32 masters


def test_plans_print_the_choice_and_fp16_on_cpu_is_one_error_line(tmp_path, cache):
    result = run_pretrain(["--dry-run", "cpu", "--precision", "bf16", "--plan-json", str(tmp_path / "p.json")], cache_dir=cache)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "bf16 on CPU: asked for with --precision" in result.stdout
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["precision"] == "bf16" and plan["precision_reason"] == "asked for with --precision"
    (tmp_path / "books.txt").write_text("One sentence here. Another one follows.\n\nA second document.\n")
    gpu = run_pretrain(["--dry-run", "gpu", "--preset", "large", "--world-size", "32", "--data", str(tmp_path / "books.txt")],
                       cache_dir=cache)
    assert "bf16 on GPU" in gpu.stdout, gpu.stdout[-2000:]
    write_sst2(tmp_path / "glue", random.Random(0), train=16, dev=8, test=4)
    for script in ("bert_ds/pretrain.py", "bert_ds/finetune/glue.py"):
        extra = [] if script.endswith("pretrain.py") else ["--task", "sst2", "--data-dir", str(tmp_path / "glue"),
                                                           "--preset", "tiny", "--tokenizer", "bert-base-uncased", "--output", str(tmp_path / "o")]
        refused = run_entrypoint(script, ["--precision", "fp16", "--dry-run", "cpu", *extra], cache_dir=cache)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert refused.stderr.strip().splitlines() == [
            "error: --precision fp16 needs a GPU (loss-scaled fp16 kernels); on a CPU use bf16, fp32 or auto."
        ], refused.stderr[-2000:]


# --- bf16 training ------------------------------------------------------------------------------

def _train(tmp_path, cache, extra, nproc=1, steps=20, name="run", preset="tiny"):
    metrics = tmp_path / f"{name}.jsonl"
    result = run_pretrain(
        ["--preset", preset, "--train-steps", str(steps), "--log-interval", "1", "--metrics-file", str(metrics), *extra],
        nproc=nproc, cache_dir=cache, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return read_metrics(metrics), result


# DP=2 under ZeRO-2 and PP=2 train in the bitwise-resume test below; these are the other layouts;
# ZeRO-1 under bf16 runs in the pipeline, layout-move and fine-tuning tests.
TRAINED_HERE = {name: TWO_RANK_LAYOUTS[name] for name in ("dp2-zero0", "dp2-zero3", "tp2-recompute")}


def _falls(losses, points):
    return statistics.mean(losses[-3:]) < statistics.mean(losses[:3]) - points


@needs_fast_bf16
@pytest.mark.parametrize("extra", TRAINED_HERE.values(), ids=TRAINED_HERE.keys())
def test_bf16_trains_under_every_layout(tmp_path, cache, extra):
    metrics, result = _train(tmp_path, cache, ["--precision", "bf16", "--warmup-steps", "2", *extra], nproc=2, steps=12)
    assert "bf16 on CPU" in result.stdout
    losses = [m["loss"] for m in metrics]
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert _falls(losses, 0.2), losses
    assert all(m["grad_norm"] and m["grad_norm"] > 0 for m in metrics) and metrics[-1]["skipped_steps"] == 0


# The three ways DeepSpeed holds bf16 masters: its FP16_UnfusedOptimizer without ZeRO, ZeRO's
# partitions (DP=2, ZeRO-2), and ZeRO-1 under the pipeline engine.
@pytest.mark.parametrize("extra, nproc", [pytest.param(["--zero-stage", "0"], 1, marks=needs_fast_bf16),
                                          (["--zero-stage", "2"], 2),
                                          pytest.param(["--pipeline-parallel", "2"], 2, marks=needs_fast_bf16)],
                         ids=["zero0", "dp2-zero2", "pp2"])
def test_bf16_resume_is_bitwise(tmp_path, cache, extra, nproc):
    # The first step runs at lr 0 (the warm-up's convention) and the schedule decays to 0 over 8
    # steps: a peak of 3e-3 makes the fall clear of the batches' noise (about 0.05).
    extra = ["--precision", "bf16", "--warmup-steps", "1", "--lr", "3e-3", *extra]
    save = str(tmp_path / "ckpt")  # the uninterrupted run writes the checkpoint the second resumes from
    straight, _ = _train(tmp_path, cache, extra + ["--save", save, "--save-interval", "4"], nproc=nproc, steps=8, name="straight")
    assert _falls([m["loss"] for m in straight], 0.1), str([m["loss"] for m in straight])
    complete = json.loads((tmp_path / "ckpt" / "step00000004" / "complete.json").read_text())
    assert complete["precision"] == "bf16" and complete["precision_requested"] == "bf16"
    assert complete["precision_reason"] == "asked for with --precision"
    second, result = _train(tmp_path, cache, extra + ["--load", f"{save}/step00000004"], nproc=nproc, steps=8, name="second")
    assert "resumed from" in result.stdout
    assert [m["loss"] for m in second] == [m["loss"] for m in straight[4:]]  # bitwise


def test_bf16_moves_layout_and_exports_its_fp32_master_weights(tmp_path, cache):
    """TP2 -> TP1 continues the run; the export holds the fp32 masters, not bf16-rounded weights."""
    from safetensors.torch import load_file

    common = ["--precision", "bf16", "--dropout", "0", "--global-batch-size", "8", "--micro-batch-size", "4",
              "--save-interval", "2", "--lr", "3e-3", "--warmup-steps", "1"]
    tp2, _ = _train(tmp_path, cache, common + ["--tensor-parallel", "2", "--save", str(tmp_path / "tp2")],
                    nproc=2, steps=4, name="tp2")
    tp1, result = _train(tmp_path, cache, common + ["--load", str(tmp_path / "tp2" / "step00000002"),
                                                    "--save", str(tmp_path / "tp1")], steps=4, name="tp1")
    assert "on a new layout" in result.stdout
    for moved, original in zip(tp1, tp2[2:]):
        # bf16 rounds differently once the matrices are split differently: close, not equal.
        assert moved["loss"] == pytest.approx(original["loss"], rel=1e-2), moved["step"]
        assert moved["consumed_tokens"] == original["consumed_tokens"]
    out = tmp_path / "hf"
    command = [sys.executable, "-m", "bert_ds.checkpoint", "export-hf", str(tmp_path / "tp2"), str(out)]
    exported = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert exported.returncode == 0, exported.stderr[-2000:]
    weights = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in weights.values())
    big = weights["bert.encoder.layer.0.intermediate.dense.weight"]
    assert (big != big.to(torch.bfloat16).float()).float().mean() > 0.5  # fp32 values, not bf16 ones


@needs_fast_bf16
@pytest.mark.parametrize("preset, steps, lr, extra", [
    ("tiny", 100, "1e-3", []),
    ("mini", 60, "5e-4", ["--seq-length", "64", "--global-batch-size", "16"]),
])
def test_bf16_and_fp32_loss_curves_agree(tmp_path, cache, preset, steps, lr, extra):
    """Same seed, data and schedule: every 20-step mean of bf16's loss is within 1% of fp32's.

    bf16 keeps 8 significant bits: the logits differ from fp32's by about 0.6% (relative norm,
    tiny at initialisation), but the loss averages over every predicted token and the updates are
    applied to fp32 masters, so the rounding does not accumulate in the weights. Measured on this
    suite's machine (2026-12-01): the 20-step means differ by at most 0.005% (tiny, 300 steps) and
    0.02% (mini, 150 steps) while the loss falls by over 20%; on 2026-12-03, at the lengths run
    here (tiny 100, mini 60 steps), by at most 0.016% and 0.02%, the loss falling by 22% and 20%.
    1% leaves a 50x margin for other CPUs' kernels (a different oneDNN path, AMX's accumulation
    order) and is still 20 times smaller than what the runs learn, so a bf16 run that stops
    learning, or learns measurably slower, fails. The two runs train at the same time.
    """
    names = ("fp32", "bf16")
    jobs = [["--preset", preset, "--train-steps", str(steps), "--log-interval", "1",
             "--metrics-file", str(tmp_path / f"{name}.jsonl"), "--precision", name, "--lr", lr,
             "--warmup-steps", "20", *extra] for name in names]
    runs = {}
    for name, result in zip(names, run_pretrain_together(jobs, cache_dir=cache, timeout=600)):
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = [m["loss"] for m in read_metrics(tmp_path / f"{name}.jsonl")]
    fp32, bf16 = runs["fp32"], runs["bf16"]
    assert len(fp32) == len(bf16) == steps
    assert statistics.mean(fp32[-20:]) < 0.88 * statistics.mean(fp32[:20])  # it learned something
    for start in range(0, steps, 20):
        window = slice(start, start + 20)
        a, b = statistics.mean(fp32[window]), statistics.mean(bf16[window])
        assert abs(a - b) / a < 0.01, (start, a, b)


@pytest.mark.parametrize("zero_stage", [pytest.param("0", marks=needs_fast_bf16), "1"])
def test_bf16_fine_tuning_learns_and_keeps_fp32_weights(tmp_path, pretrained_tiny, zero_stage):
    """GLUE in bf16 from a (fp32) pre-training checkpoint: it learns the fixture's sentiment cue,
    results.json says what it trained in, and the kept model holds fp32 masters."""
    from safetensors.torch import load_file

    write_sst2(tmp_path / "glue", random.Random(0))
    out = tmp_path / "out"
    result = run_entrypoint("bert_ds/finetune/glue.py", [
        "--task", "sst2", "--data-dir", str(tmp_path / "glue"), "--init", pretrained_tiny, "--output", str(out),
        "--max-seq-length", "48", "--batch-size", "16", "--lr", "2e-3", "--epochs", "5",
        "--precision", "bf16", "--zero-stage", zero_stage,
    ])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bf16 on CPU" in result.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["precision"]["name"] == "bf16" and results["precision"]["reason"] == "asked for with --precision"
    assert results["metrics"]["accuracy"] >= 0.9, results["metrics"]
    classifier = load_file(str(out / "model" / "model.safetensors"))["classifier.weight"]
    assert classifier.dtype == torch.float32 and (classifier != classifier.to(torch.bfloat16).float()).any()


def test_gpus_allocated_but_unusable_end_in_one_line_and_tf32_is_on_for_gpus(tmp_path, monkeypatch):
    """Slurm gave the job GPUs that torch cannot use (here: a CPU machine, a CPU build): one
    `error:` line instead of training on the CPU over gloo. On a GPU, fp32 multiplies use TF32."""
    import subprocess
    import sys

    import torch

    from bert_ds.runtime import device as device_module

    env = dict(__import__("os").environ, SLURM_JOB_GPUS="0,1")
    result = subprocess.run([sys.executable, "bert_ds/pretrain.py", "--preset", "tiny", "--train-steps", "1"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Slurm allocated GPUs to this job (SLURM_JOB_GPUS=0,1) but torch") and "cannot use them" in last

    # A process that sees GPUs: the local rank modulo the GPUs it sees, and TF32 on.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("LOCAL_RANK", "5")
    assert device_module.device() == torch.device("cuda", 1)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        device_module.prepare_device({})
        assert torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    from bert_ds.runtime.precision import choose_precision

    assert "TF32" in choose_precision("fp32", "gpu").reason
