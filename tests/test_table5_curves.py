"""The pre-training curves of Table 5 (bert_ds/experiments/table5_curves.py): every held-out
evaluation of each model against its consumed tokens, resumed runs' repeated steps kept once, a
model still pre-training marked, and the figure and table5.md's pointer to it."""

import json

from bert_ds.experiments.table5_curves import finished_summary, plot_curves, pretraining_curves
from bert_ds.experiments.table5_report import crossings_markdown, pretraining_markdown


def _metrics(folder, lines):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _evaluation(step, accuracy, nsp=None):
    line = {"step": step, "consumed_tokens": step * 1000, "eval/mlm_accuracy": accuracy, "eval/mlm_loss": 7 - 10 * accuracy}
    return {**line, "eval/nsp_accuracy": nsp} if nsp is not None else line


def test_curves_hold_every_evaluation_once_and_mark_running_models(tmp_path):
    _metrics(tmp_path / "pretrain" / "mlm_nsp", [
        {"step": 100, "loss": 7.0}, _evaluation(200, 0.14, 0.8), _evaluation(400, 0.16, 0.85),
        _evaluation(400, 0.17, 0.86),  # resumed from step 200's checkpoint... and evaluated again at 400
        _evaluation(600, 0.30, 0.9)])
    (tmp_path / "pretrain" / "mlm_nsp" / "done.json").write_text("{}")
    _metrics(tmp_path / "pretrain" / "ltr", [_evaluation(200, 0.10)])
    _metrics(tmp_path / "pretrain" / "mlm", [{"step": 50, "loss": 8.0}])  # no evaluation yet: no curve
    curves = pretraining_curves(tmp_path, ("mlm_nsp", "mlm", "ltr"))
    assert list(curves) == ["mlm_nsp", "ltr"]
    assert curves["mlm_nsp"]["finished"] and not curves["ltr"]["finished"]
    points = curves["mlm_nsp"]["points"]
    assert [p["step"] for p in points] == [200, 400, 600] and points[1]["accuracy"] == 0.17  # the last of step 400's
    assert points[2] == {"step": 600, "tokens": 600_000, "accuracy": 0.30, "loss": 4.0, "nsp_accuracy": 0.9}
    assert curves["ltr"]["points"][0]["nsp_accuracy"] is None
    # table5.json's `pretraining`: a finished model's last evaluation; nothing for one still training.
    assert finished_summary(curves["mlm_nsp"]) == {"step": 600, "held_out_accuracy": 0.30, "held_out_nsp_accuracy": 0.9,
                                                   "consumed_tokens": 600_000}
    assert finished_summary(curves["ltr"]) == {} and finished_summary(curves.get("mlm")) == {}

    # --pretrained names a run not adopted yet (still training): its own metrics give the curve.
    run = tmp_path / "desk-run"
    _metrics(run, [_evaluation(200, 0.1, 0.7), _evaluation(400, 0.12, 0.8)])
    adopting = pretraining_curves(tmp_path / "other", ("mlm_nsp",), {"mlm_nsp": str(run)})
    assert [p["step"] for p in adopting["mlm_nsp"]["points"]] == [200, 400] and not adopting["mlm_nsp"]["finished"]
    own = pretraining_curves(tmp_path, ("mlm_nsp",), {"mlm_nsp": str(run)})
    assert own["mlm_nsp"] == curves["mlm_nsp"]  # adopted (its metrics linked in): the folder's own

    plot_curves(curves, tmp_path / "pretraining.png")
    assert (tmp_path / "pretraining.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "pretraining.png").stat().st_size > 5_000
    assert "pretraining.png" in pretraining_markdown({"pretraining": {}, "curves": curves})
    assert pretraining_markdown({"pretraining": {}, "curves": {}}) == ""


def test_a_line_being_written_is_left_out_and_a_damaged_one_named(tmp_path, capsys):
    """A running pre-training may be half-way through writing its last metrics line when the report
    reads it (--report-only while jobs run): left out. A damaged line before it (torn by a kill, the
    next run's first line glued to it) is left out with a warning naming it: never a failed report."""
    folder = tmp_path / "pretrain" / "mlm"
    _metrics(folder, [_evaluation(400, 0.13)])
    with open(folder / "metrics.jsonl", "a") as metrics:
        metrics.write('{"step": 800, "consumed_tok')
    assert [p["step"] for p in pretraining_curves(tmp_path, ("mlm",))["mlm"]["points"]] == [400]
    assert capsys.readouterr().err == ""  # the line being written: no warning
    with open(folder / "metrics.jsonl", "a") as metrics:
        metrics.write(json.dumps(_evaluation(1200, 0.2)) + '\n' + '[1, 2]\n' + '{"step": 1400, "eval/ml\x00\n'
                      + json.dumps(_evaluation(1600, 0.25)) + '\n')
    assert [p["step"] for p in pretraining_curves(tmp_path, ("mlm",))["mlm"]["points"]] == [400, 1600]
    err = capsys.readouterr().err
    assert "metrics.jsonl, line 2: not JSON, left out" in err and "line 3: not a JSON object, left out" in err
    assert "line 4: not JSON, left out" in err
    # Nothing there yet (a model not started, an empty file just created): no curve, no warning.
    (tmp_path / "pretrain" / "ltr").mkdir()
    (tmp_path / "pretrain" / "ltr" / "metrics.jsonl").write_text("")
    assert pretraining_curves(tmp_path, ("ltr", "mlm_nsp")) == {} and capsys.readouterr().err == ""


def test_table5_md_lists_when_each_model_left_the_plateau(tmp_path):
    """The tokens at which each model's held-out accuracy first reached 15/20/25/30%, linear between
    the evaluations around each level: models at different steps compare by when they left the
    frequent-token plateau. A level not reached yet is a dash; an unfinished model is marked."""
    _metrics(tmp_path / "pretrain" / "mlm_nsp", [_evaluation(1000, 0.12, 0.8), _evaluation(2000, 0.18, 0.9),
                                                 _evaluation(3000, 0.22, 0.9)])
    _metrics(tmp_path / "pretrain" / "mlm", [_evaluation(1000, 0.30), _evaluation(2000, 0.35)])
    (tmp_path / "pretrain" / "mlm" / "done.json").write_text("{}")
    table = crossings_markdown(pretraining_curves(tmp_path, ("mlm_nsp", "mlm", "ltr")))
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in table.splitlines() if line.startswith("| ")}
    # 15%: halfway from 12% (1.0M tokens) to 18% (2.0M); 20%: halfway from 18% to 22% (2.0M to 3.0M).
    assert rows["MLM+NSP (unfinished)"] == ["1.5", "2.5", "–", "–", "22.0% at 3.0M (step 3,000) |"]
    # Its first evaluation is already past every level: at most that evaluation's tokens.
    assert rows["No NSP"] == ["≤ 1.0", "≤ 1.0", "≤ 1.0", "≤ 1.0", "35.0% at 2.0M (step 2,000) |"]
    assert "LTR & No NSP" not in rows and crossings_markdown({}) == ""
    # A curve without token counts (an old metrics file) has no row rather than a wrong one.
    untimed = {"ltr": {"finished": False, "points": [{"step": 400, "tokens": None, "accuracy": 0.2, "loss": 5.0}]}}
    assert crossings_markdown(untimed) == ""
