"""bert_ds.plot: reading metrics files (resume duplicates, eval lines, bad inputs) and the PNG it draws."""

import json
import subprocess
import sys

import matplotlib.image
import pytest

from bert_ds.plot import default_labels, main, read_metrics
from bert_ds.training.loop.metrics import METRIC_KEYS


def train_line(step, mlm_loss, nsp=True):
    values = {
        "step": step, "consumed_samples": 32 * step, "consumed_tokens": 4000 * step,
        "loss": mlm_loss + (0.69 if nsp else 0.0), "mlm_loss": mlm_loss, "nsp_loss": 0.69 if nsp else None,
        "mlm_accuracy": 0.01 * step, "nsp_accuracy": 0.55 if nsp else None, "lr": 1e-4,
        "grad_norm": 1.5, "tokens_per_s": 5000.0 + step, "samples_per_s": 40.0,
        "model_flops_per_s": 1.2e11, "skipped_steps": 0, "some_future_key": "ignored",
    }
    assert set(METRIC_KEYS) <= set(values)  # stays in step with what MetricsLogger writes
    return values


def eval_line(step, mlm_loss, nsp=True):
    return {
        "step": step, "consumed_samples": 32 * step, "consumed_tokens": 4000 * step,
        "eval/mlm_loss": mlm_loss, "eval/mlm_accuracy": 0.2, "eval/nsp_loss": 0.7 if nsp else None,
        "eval/nsp_accuracy": 0.5 if nsp else None, "eval/samples": 256, "eval/seconds": 1.5,
    }


def write_lines(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def resumed_run(tmp_path):
    """Steps 10..30 logged, a crash, then a resume from step 20 that logs 30 and 40 again."""
    records = [train_line(10, 8.0), train_line(20, 7.0), eval_line(20, 7.5), train_line(30, 6.9),
               eval_line(30, 7.4), train_line(30, 6.5), eval_line(30, 7.1), train_line(40, 6.0)]
    path = write_lines(tmp_path / "base" / "metrics.jsonl", records)
    # A blank line and a diverged value (written as null) must not stop the reader.
    diverged = {**train_line(50, 6.0), "loss": None, "mlm_loss": None, "grad_norm": None}
    path.write_text(path.read_text() + "\n" + json.dumps(diverged) + "\n")
    return path


def test_read_metrics_keeps_the_last_line_per_step_and_kind(resumed_run):
    train, evals = read_metrics(resumed_run)
    assert [r["step"] for r in train] == [10, 20, 30, 40, 50]
    assert [r["step"] for r in evals] == [20, 30]
    assert train[2]["mlm_loss"] == 6.5  # the resumed run's line, not the crashed run's 6.9
    assert evals[1]["eval/mlm_loss"] == 7.1
    assert train[4]["mlm_loss"] is None


def test_default_labels_use_the_parent_directory_then_the_stem(tmp_path):
    a, b = tmp_path / "base" / "metrics.jsonl", tmp_path / "large" / "metrics.jsonl"
    assert default_labels([str(a), str(b)]) == ["base", "large"]
    c, d = tmp_path / "runs" / "first.jsonl", tmp_path / "runs" / "second.jsonl"
    assert default_labels([str(c), str(d)]) == ["first", "second"]


def png_shape(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(str(path)).shape


def test_two_runs_draw_a_png(tmp_path, resumed_run, capsys):
    other = write_lines(tmp_path / "large" / "metrics.jsonl",
                        [train_line(s, 9.0 - s / 10, nsp=False) for s in (10, 20, 30)] + [eval_line(30, 7.0, nsp=False)])
    out = tmp_path / "figs" / "curves.png"
    assert main([str(resumed_run), str(other), "-o", str(out), "--title", "base vs large"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    height, width, channels = png_shape(out)
    assert channels in (3, 4) and 600 < height < 1500 and 1500 < width < 3000 and width > height


def test_x_option_and_nsp_panel_change_the_layout(tmp_path, resumed_run):
    both, steps = tmp_path / "both.png", tmp_path / "steps.png"
    assert main([str(resumed_run), "-o", str(both)]) == 0
    assert main([str(resumed_run), "-o", str(steps), "--x", "steps", "--labels", "base"]) == 0
    assert png_shape(steps)[0] < 0.7 * png_shape(both)[0]  # one row of panels instead of two
    no_nsp = write_lines(tmp_path / "mlm_only" / "metrics.jsonl", [train_line(s, 7.0, nsp=False) for s in (1, 2)])
    narrow = tmp_path / "narrow.png"
    assert main([str(no_nsp), "-o", str(narrow)]) == 0
    assert png_shape(narrow)[1] < 0.9 * png_shape(both)[1]  # no NSP loss panel


def test_x_seconds_draws_files_that_record_training_time(tmp_path):
    from bert_ds.plot import _series, read_metrics

    timed = write_lines(tmp_path / "parity" / "metrics.jsonl",
                        [dict(train_line(s, 8.0 - s), train_seconds=0.5 * s) for s in (1, 2, 3)])
    out = tmp_path / "seconds.png"
    assert main([str(timed), "-o", str(out), "--x", "seconds"]) == 0
    assert png_shape(out)[0] > 0
    xs, ys = _series(read_metrics(timed)[0], "train_seconds", "mlm_loss")
    assert list(xs) == [0.5, 1.0, 1.5] and list(ys) == [7.0, 6.0, 5.0]


def bad_inputs(tmp_path):
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    not_jsonl = tmp_path / "log.jsonl"
    not_jsonl.write_text(json.dumps(train_line(1, 7.0)) + "\n\nstep 2 | loss 6.9\n")
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"task": "mnli", "accuracy": 0.84}, indent=2))
    one_line = tmp_path / "other.json"
    one_line.write_text(json.dumps({"step": 3, "accuracy": 0.84}) + "\n" + json.dumps([1, 2]) + "\n")
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\x00\xff\xfe\x80" * 10)
    return {
        "missing": (tmp_path / "nope.jsonl", None), "empty": (tmp_path / "empty.jsonl", None),
        "blank": (blank, None), "not_jsonl": (not_jsonl, 3), "results_json": (results, 1),
        "no_metrics_lines": (one_line, None), "binary": (binary, 1),
    }


@pytest.mark.parametrize("case", ["missing", "empty", "blank", "not_jsonl", "results_json", "no_metrics_lines", "binary"])
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, resumed_run, capsys, case):
    (tmp_path / "empty.jsonl").write_text("")
    path, line = bad_inputs(tmp_path)[case]
    out = tmp_path / "curves.png"
    assert main([str(resumed_run), str(path), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0], captured.err
    if line is not None:
        assert f"{path}:{line}:" in lines[0]
    assert "Traceback" not in captured.err and not out.exists()


def test_labels_must_match_the_files(resumed_run, capsys):
    assert main([str(resumed_run), "--labels", "a", "b"]) == 2
    assert capsys.readouterr().err.startswith("error: --labels")


def test_module_entry_point_exits_2_without_traceback(tmp_path):
    missing = tmp_path / "missing.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bert_ds.plot", str(missing)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: {missing}: cannot read: No such file or directory"]


def test_crossings_interpolate_between_evaluations(tmp_path, capsys):
    # held-out accuracy 0.10, 0.14, 0.20, 0.30 at steps 100..400 (a resumed line for 300 wins)
    evals = [{**eval_line(step, 7.0), "eval/mlm_accuracy": acc} for step, acc in
             ((100, 0.10), (200, 0.14), (300, 0.99), (300, 0.20), (400, 0.30))]
    path = write_lines(tmp_path / "run" / "metrics.jsonl", [train_line(100, 7.0), *evals])
    output = tmp_path / "curves.png"
    assert main([str(path), "-o", str(output), "--crossings", "0.05", "0.17", "0.25", "0.5"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| run (optimizer step at held-out MLM accuracy) | 5.0% | 17.0% | 25.0% | 50.0% |")
    # before the first evaluation: its step; 0.17 halfway from 0.14 to 0.20; 0.25 halfway to 0.30; never 0.5
    assert table[2] == "| run | 100 | 250 | 350 | - |"
    assert table[3] == str(output) and output.exists()
    assert main([str(path), "-o", str(output), "--crossings", "0.17", "--x", "tokens"]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "| run | 1,000,000 |"  # 4,000 tokens a step


def test_crossings_level_out_of_range_is_an_error(resumed_run, capsys):
    assert main([str(resumed_run), "--crossings", "18"]) == 2
    assert capsys.readouterr().err.strip() == "error: --crossings: an accuracy level lies in (0, 1], got 18"
