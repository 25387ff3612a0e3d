"""MetricsLogger and the FLOP count: console, JSON Lines and TensorBoard agree with what was logged."""

import io
import json

import pytest

from bert_ds.training.loop.metrics import (
    EVAL_KEYS,
    METRIC_KEYS,
    MetricsLogger,
    bert_flops_per_sequence,
    format_duration,
    format_flops,
)


def _values(step, loss, nsp=True, **extra):
    values = {
        "step": step, "consumed_samples": step * 256, "consumed_tokens": step * 256 * 128,
        "loss": loss, "mlm_loss": loss - 0.711 if nsp else loss, "nsp_loss": 0.711 if nsp else None,
        "mlm_accuracy": 0.112, "nsp_accuracy": 0.531 if nsp else None, "lr": 9.6e-5,
        "grad_norm": 1.24, "tokens_per_s": 41200.0, "samples_per_s": 321.9, "model_flops_per_s": 2.1e12,
    }
    values.update(extra)
    return values


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# --- FLOPs -----------------------------------------------------------------------------------

def test_bert_base_flops_match_hand_computation():
    # BERT-base, s=128, h=768, V=30522, L=12, 20 predicted tokens; h² = 589,824, s·h² = 75,497,472.
    #   QKV        6·s·h²  = 452,984,832
    #   attention  4·s²·h  =  50,331,648    (4 · 16,384 · 768)
    #   out proj   2·s·h²  = 150,994,944
    #   FFN       16·s·h²  = 1,207,959,552
    #   per layer          = 1,862,270,976;  × 12 layers = 22,347,251,712
    #   MLM head per token: 2·h² + 2·h·V = 1,179,648 + 46,881,792 = 48,061,440;  × 20 = 961,228,800
    #   pooler + NSP: 2·h² + 2·h·2 = 1,179,648 + 3,072 = 1,182,720
    forward = 22_347_251_712 + 961_228_800 + 1_182_720
    assert forward == 23_309_663_232
    assert bert_flops_per_sequence(12, 768, 30522, 128, 20, training=False) == forward
    assert bert_flops_per_sequence(12, 768, 30522, 128, 20) == 69_928_989_696  # 3 × forward
    assert bert_flops_per_sequence(12, 768, 30522, 128, 20, with_nsp=False, training=False) == forward - 1_182_720


def test_mlm_head_scales_with_predicted_tokens_not_sequence_length():
    per_token = 2 * 768 * 768 + 2 * 768 * 30522  # 48,061,440
    for s in (128, 512):
        more = bert_flops_per_sequence(12, 768, 30522, s, 40, training=False)
        fewer = bert_flops_per_sequence(12, 768, 30522, s, 20, training=False)
        assert more - fewer == 20 * per_token
    # Fractional averages (0.15 · s) are allowed.
    half = bert_flops_per_sequence(2, 64, 100, 16, 2.5, training=False)
    assert half - bert_flops_per_sequence(2, 64, 100, 16, 2.0, training=False) == 0.5 * (2 * 64 * 64 + 2 * 64 * 100)


# --- formatting --------------------------------------------------------------------------------

@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (42.4, "42s"), (192, "3m12s"), (3600, "1h00m"), (2 * 3600 + 5 * 60 + 30, "2h05m"),
    (86400 + 3 * 3600, "1d03h"), (-1, "?"), (float("inf"), "?"), (float("nan"), "?"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("flops, text", [
    (2.5e6, "2.5 MFLOP/s"), (3.0e5, "0.3 MFLOP/s"), (7.25e9, "7.2 GFLOP/s"),
    (2.1e12, "2.1 TFLOP/s"), (999e9, "999.0 GFLOP/s"), (1.5e15, "1.5 PFLOP/s"),
])
def test_format_flops(flops, text):
    assert format_flops(flops) == text


# --- JSON Lines -----------------------------------------------------------------------------------

def test_jsonl_lines_key_order_nulls_and_flush(tmp_path):
    path = tmp_path / "runs" / "a" / "metrics.jsonl"  # parents are created
    logger = MetricsLogger(total_steps=1000, metrics_file=str(path), stream=io.StringIO())
    logger.log(_values(10, 7.5, nsp=False, loss_scale=1024.0))
    logger.log(_values(20, 7.0))
    # Read while still open: each line is flushed when logged.
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert list(first) == [*METRIC_KEYS, "loss_scale"]
    assert list(second) == list(METRIC_KEYS)
    assert first["nsp_loss"] is None and first["nsp_accuracy"] is None
    assert '"nsp_loss": null' in lines[0]
    assert first["step"] == 10 and first["loss"] == 7.5 and first["lr"] == 9.6e-5
    assert second["nsp_loss"] == 0.711 and second["loss"] == 7.0
    logger.close()


def test_jsonl_appends_to_existing_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(total_steps=100, metrics_file=str(path), stream=io.StringIO()) as logger:
        logger.log(_values(1, 9.0))
    with MetricsLogger(total_steps=100, metrics_file=str(path), start_step=1, stream=io.StringIO()) as logger:
        logger.log(_values(2, 8.0))
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2]


def test_a_resumed_run_drops_the_lines_its_predecessor_logged_after_the_checkpoint(tmp_path):
    """Killed at step 5 after the step-3 checkpoint (its last line cut short): the run resuming at
    step 3 keeps steps 1-3 and the evaluation at 2, drops 4, 5 and the partial line, and says so."""
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(total_steps=100, metrics_file=str(path), stream=io.StringIO()) as logger:
        for step in range(1, 6):
            logger.log(_values(step, 9.0 - step))
        logger.log_eval(dict(step=2, consumed_samples=8, consumed_tokens=800, **{key: 1.0 for key in EVAL_KEYS}))
    with path.open("a") as file:
        file.write('{"step": 6, "loss"')  # the kill
    console = io.StringIO()
    with MetricsLogger(total_steps=100, metrics_file=str(path), start_step=3, stream=console) as logger:
        logger.log(_values(4, 4.5))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["step"], "loss" in r) for r in records] == [(1, True), (2, True), (3, True), (2, False), (4, True)]
    assert records[-1]["loss"] == 4.5
    assert "dropped 3 line(s) logged after step 3" in console.getvalue()


def test_an_auto_resumed_fresh_start_drops_an_attempt_that_left_no_checkpoint(tmp_path):
    """Killed (the OOM killer, say) before its first checkpoint and started again with --auto-resume:
    the new run starts at step 0, so the dead attempt's lines go (they are redone) instead of the
    file listing steps 1-2 twice. Without --auto-resume a fresh run still appends."""
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(total_steps=100, metrics_file=str(path), stream=io.StringIO()) as logger:
        for step in (1, 2):
            logger.log(_values(step, 9.0))
    console = io.StringIO()
    with MetricsLogger(total_steps=100, metrics_file=str(path), stream=console, restarting=True) as logger:
        logger.log(_values(1, 8.0))
    assert [(json.loads(line)["step"], json.loads(line)["loss"]) for line in path.read_text().splitlines()] == [(1, 8.0)]
    assert "dropped 2 line(s) logged after step 0 by an earlier attempt that left no checkpoint" in console.getvalue()
    with MetricsLogger(total_steps=100, metrics_file=str(path), stream=io.StringIO()) as logger:  # a new run: appended
        logger.log(_values(1, 7.0))
    assert [json.loads(line)["loss"] for line in path.read_text().splitlines()] == [8.0, 7.0]


def test_non_finite_values_are_strict_json_null(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(total_steps=100, metrics_file=str(path), stream=io.StringIO()) as logger:
        logger.log(_values(1, float("nan")))
    line = path.read_text()
    assert "NaN" not in line and json.loads(line)["loss"] is None


# --- console ----------------------------------------------------------------------------------

def test_console_line_has_progress_eta_and_losses():
    clock, stream = FakeClock(), io.StringIO()
    # Resumed at step 100: the rate is 10 steps in 10 s, not 110 steps, so ETA = 890 s.
    logger = MetricsLogger(total_steps=1000, start_step=100, stream=stream, clock=clock)
    clock.now += 10.0
    logger.log(_values(110, 6.812, mlm_accuracy=0.1117))
    line = stream.getvalue().strip()
    assert line.startswith("step 110/1000 (11.0%) | ")
    for part in ("loss 6.812", "mlm_loss 6.101", "nsp_loss 0.711", "mlm_acc 0.112", "nsp_acc 0.531",
                 "lr 9.6e-05", "grad_norm 1.24", "41,200 tok/s", "2.1 TFLOP/s", "ETA 14m50s"):
        assert part in line, (part, line)
    assert "\n" not in line
    logger.message("saved checkpoint step 110")
    assert stream.getvalue().splitlines()[-1] == "saved checkpoint step 110"


def test_console_without_nsp_shows_dash():
    stream = io.StringIO()
    MetricsLogger(total_steps=10, stream=stream).log(_values(1, 5.0, nsp=False))
    assert "nsp_loss - |" in stream.getvalue() and "nsp_acc - |" in stream.getvalue()


def test_disabled_logger_writes_nothing(tmp_path):
    stream = io.StringIO()
    path, tb_dir = tmp_path / "sub" / "metrics.jsonl", tmp_path / "tb"
    logger = MetricsLogger(total_steps=10, metrics_file=str(path), tensorboard_dir=str(tb_dir),
                           enabled=False, stream=stream)
    logger.log(_values(1, 5.0))
    logger.log({"step": 2})  # not even validated: a no-op
    logger.message("hello")
    logger.close()
    assert stream.getvalue() == ""
    assert list(tmp_path.iterdir()) == []


def test_missing_key_is_named():
    values = _values(1, 5.0)
    del values["grad_norm"], values["lr"]
    with pytest.raises(ValueError, match="lr, grad_norm"):
        MetricsLogger(total_steps=10, stream=io.StringIO()).log(values)


# --- TensorBoard -----------------------------------------------------------------------------------

def test_tensorboard_scalars_at_logged_steps(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = tmp_path / "tb"
    logger = MetricsLogger(total_steps=100, tensorboard_dir=str(tb_dir), stream=io.StringIO())
    assert not tb_dir.exists()  # created lazily, on the first log
    logger.log(_values(10, 7.5, nsp=False))
    logger.log(_values(20, 7.0, nsp=False))
    # Read back before close: each log call flushes, so a killed run keeps its curves.
    assert any(p.name.startswith("events.out.tfevents") for p in tb_dir.iterdir())

    events = EventAccumulator(str(tb_dir))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {f"train/{key}" for key in METRIC_KEYS if key not in ("step", "nsp_loss", "nsp_accuracy")} <= set(tags)
    assert "train/nsp_loss" not in tags and "train/step" not in tags
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [10, 20]
    assert [e.value for e in loss] == pytest.approx([7.5, 7.0])
    assert [e.value for e in events.Scalars("train/lr")] == pytest.approx([9.6e-5, 9.6e-5])
    logger.close()


def test_resumed_run_replaces_redone_steps_in_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = str(tmp_path / "tb")
    with MetricsLogger(total_steps=100, tensorboard_dir=tb_dir, stream=io.StringIO()) as logger:
        for step, loss in ((10, 7.5), (20, 7.0), (30, 6.5)):  # crashed after 30, checkpoint at 20
            logger.log(_values(step, loss))
    with MetricsLogger(total_steps=100, tensorboard_dir=tb_dir, start_step=20, stream=io.StringIO()) as logger:
        logger.log(_values(30, 6.4))
    events = EventAccumulator(tb_dir)
    events.Reload()
    assert [(e.step, round(e.value, 3)) for e in events.Scalars("train/loss")] == [(10, 7.5), (20, 7.0), (30, 6.4)]


def test_tensor_values_become_plain_numbers(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(total_steps=10, metrics_file=str(path), stream=io.StringIO()) as logger:
        logger.log(_values(1, torch.tensor(5.25), grad_norm=torch.tensor(1.5, dtype=torch.float64)))
    record = json.loads(path.read_text())
    assert record["loss"] == 5.25 and record["grad_norm"] == 1.5


def test_default_stream_is_stdout(capsys):
    MetricsLogger(total_steps=4).log(_values(2, 5.0))
    assert capsys.readouterr().out.startswith("step 2/4 (50.0%) | loss 5.000 |")


def _eval_values(step, mlm_loss, nsp=True):
    return {"step": step, "consumed_samples": step * 16, "consumed_tokens": step * 2000,
            "eval/mlm_loss": mlm_loss, "eval/mlm_accuracy": 0.25, "eval/nsp_loss": 0.69 if nsp else None,
            "eval/nsp_accuracy": 0.5 if nsp else None, "eval/samples": 37, "eval/seconds": 0.4,
            "eval/interval_share": 0.02}


def test_evaluation_lines_in_the_file_the_console_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from bert_ds.training.loop.metrics import EVAL_KEYS

    console, path, tb_dir = io.StringIO(), tmp_path / "m.jsonl", tmp_path / "tb"
    logger = MetricsLogger(total_steps=100, metrics_file=str(path), tensorboard_dir=str(tb_dir), stream=console)
    logger.log(_values(10, 7.5))
    logger.log_eval(_eval_values(10, 7.25))
    logger.log_eval(_eval_values(20, 7.0, nsp=False))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert "loss" in lines[0] and "eval/mlm_loss" not in lines[0]
    assert list(lines[1])[:9] == ["step", "consumed_samples", "consumed_tokens", *EVAL_KEYS]
    assert lines[1]["eval/mlm_loss"] == 7.25 and lines[2]["eval/nsp_loss"] is None
    assert "eval at step 10 | mlm_loss 7.250 | mlm_acc 0.2500 | nsp_loss 0.690" in console.getvalue()
    assert "eval at step 20 | mlm_loss 7.000 | mlm_acc 0.2500 | nsp_loss -" in console.getvalue()
    events = EventAccumulator(str(tb_dir))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval/mlm_loss")] == [(10, 7.25), (20, 7.0)]
    assert "train/eval/mlm_loss" not in events.Tags()["scalars"]
    with pytest.raises(ValueError, match="missing metric keys: eval/mlm_accuracy"):
        logger.log_eval({k: v for k, v in _eval_values(30, 7.0).items() if k != "eval/mlm_accuracy"})
    logger.close()
