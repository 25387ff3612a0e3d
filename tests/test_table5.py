"""`python -m bert_ds.experiments.table5 --scale smoke` on fixtures: three pre-trainings from one
seed, fifteen cells (five rows x a pair task, SST-2, SQuAD) with two restarts each, the JSON,
Markdown and plot, one row run first (--rows) whose finished work the whole run keeps, and signals."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.support.glue_fixtures import write_all_tasks, write_sst2
from tests.support.helpers import REPO
from tests.support.task_fixtures import write_squad


def _experiment(args, cache):
    env = dict(os.environ, BERT_DS_CACHE=cache, OMP_NUM_THREADS="2")
    return subprocess.run([sys.executable, "-m", "bert_ds.experiments.table5", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=1200)


def test_smoke_scale_fills_table5_and_resumes(tmp_path, shared_cache, capsys):
    glue, squad, out = tmp_path / "glue", tmp_path / "squad", tmp_path / "table5"
    write_all_tasks(glue, n=16)
    write_sst2(glue, random.Random(0))  # a cue a 2-layer model learns (tests/support/glue_fixtures.py)
    write_squad(squad, random.Random(2))
    args = ["--output", str(out), "--glue-dir", str(glue), "--squad-dir", str(squad), "--scale", "smoke", "--restarts", "2", "--jobs", "2"]
    # One row first (as a job of its own would): the floor, and the MLM+NSP pre-training whose
    # tokenizer it borrows (no --tokenizer), nothing else; its report holds that row alone.
    floor_only = _experiment([*args, "--rows", "no_pretraining", "--status-interval", "2"], shared_cache)
    assert floor_only.returncode == 0, floor_only.stdout[-3000:] + floor_only.stderr[-3000:]
    # Lines on the running steps: their time so far and their logs' last progress line.
    assert re.search(r"^\[table5\] running \d+m \d\ds: pre-training mlm_nsp: \S", floor_only.stdout, re.M), floor_only.stdout[:3000]
    partial = json.loads((out / "table5.json").read_text())
    assert list(partial["cells"]) == ["No pre-training"] and list(partial["cells"]["No pre-training"]) == ["mrpc", "sst2", "squad"]
    assert sorted(path.name for path in (out / "pretrain").iterdir()) == ["mlm_nsp"]
    assert "not run yet: MLM+NSP on mrpc" in floor_only.stdout and "| No NSP | – | 86.5 |" in (out / "table5.md").read_text()

    first = _experiment(args, shared_cache)  # every row: what the floor's run finished is kept
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert first.stdout.count("done before, skipped") == 1 + 3 and "not run yet" not in first.stdout
    # Only what was missing ran (a killed cell's missing results.json is rerun the same way).
    started = re.findall(r"^\[table5\] (pre-training \w+|fine-tuning .+ on \w+)(?:, phase \d)? \.\.\.", first.stdout, re.M)
    assert sorted(started) == sorted(["pre-training mlm", "pre-training ltr"] + [
        f"fine-tuning {row} on {column}" for row in ("MLM+NSP", "No NSP", "LTR & No NSP", "+ BiLSTM")
        for column in ("mrpc", "sst2", "squad")]), started
    again = _experiment(args, shared_cache)  # finished: nothing starts
    assert again.returncode == 0 and again.stdout.count("done before, skipped") == 3 + 15, again.stdout[-3000:] + again.stderr[-2000:]
    assert " ..." not in again.stdout

    record = json.loads((out / "table5.json").read_text())
    assert record["columns"] == ["mrpc", "sst2", "squad"] and record["restarts"] == 2
    assert record["budget"]["pretraining_tokens"] == 20 * 16 * 64
    assert list(record["cells"]) == ["MLM+NSP", "No NSP", "LTR & No NSP", "+ BiLSTM", "No pre-training"]
    for row, cells in record["cells"].items():
        for column, cell in cells.items():
            assert len(cell["scores"]) == 2 and cell["best"] == max(cell["scores"]), (row, column)
            assert min(cell["scores"]) <= cell["mean"] <= max(cell["scores"]) and cell["std"] >= 0
            assert 0 <= cell["mean"] <= 100 and cell["metric"] == ("f1" if column == "squad" else "accuracy")
    # One initialisation seed and the same stream: the three models' pre-training runs differ only by objective.
    for objective in ("mlm_nsp", "mlm", "ltr"):
        assert (out / "pretrain" / objective / "done.json").is_file()
    # Every row learns SST-2's cue: the LTR rows too (a [CLS] pooler under the causal mask would
    # sit at chance; the causal model pools its last real token, the BiLSTM reads every token).
    assert all(record["cells"][row]["sst2"]["mean"] >= 90 for row in record["cells"] if row != "No pre-training"), record["cells"]
    # The floor: random weights of the pre-trained models' shape and tokenizer.
    floor = (out / "logs" / "no_pretraining-sst2.log").read_text()
    assert "random weights (preset tiny, post-LN; no --init)" in floor
    assert set(record["step_seconds"]) >= {"pretrain-mlm_nsp", "mlm_nsp-squad", "no_pretraining-mrpc"}
    assert all(seconds > 0 for seconds in record["step_seconds"].values())
    # The scale's --max-train-examples reaches fine-tuning: 160 of the fixture's 240 SST-2 rows.
    assert "--max-train-examples 160: training on the first 160 of 240 features" in (out / "logs" / "ltr-sst2.log").read_text()
    heads = {row: json.loads((out / "finetune" / slug / "sst2" / "results.json").read_text())["head"]
             for row, slug in (("LTR & No NSP", "ltr"), ("+ BiLSTM", "ltr_bilstm"), ("MLM+NSP", "mlm_nsp"))}
    assert heads == {"LTR & No NSP": {"bilstm": False, "pooling": "last real token (causal model)", "unpad": True},
                     "+ BiLSTM": {"bilstm": True, "pooling": None, "unpad": True},
                     "MLM+NSP": {"bilstm": False, "pooling": "[CLS]", "unpad": True}}
    table = (out / "table5.md").read_text()
    assert "| + BiLSTM |" in table and "| 88.5 |" in table  # the paper's MLM+NSP SQuAD F1 beside ours
    # Every ordering the experiment tests, read against the restarts' spread (test_table5_orderings.py).
    assert len(record["orderings"]) == 18 and "| LTR & No NSP vs MLM+NSP | SQuAD v1.1 (F1) |" in table
    assert (out / "table5.png").stat().st_size > 5_000

    # Refusals, in this process (each is refused before any step starts; the main() a subprocess runs).
    from bert_ds.experiments.table5 import main

    capsys.readouterr()
    assert main([*args, "--restarts", "3"]) == 2  # the last --restarts counts
    assert "restarts 3 where it has 2" in capsys.readouterr().err

    assert main(["--output", str(tmp_path / "x"), "--glue-dir", str(tmp_path / "nowhere"), "--squad-dir", str(squad)]) == 2
    assert "--glue-dir" in capsys.readouterr().err
    # Checked before any pre-training: a task folder missing, SQuAD 2.0 data where v1.1 belongs.
    import shutil

    shutil.rmtree(glue / "MRPC")
    assert main([*args, "--output", str(tmp_path / "y")]) == 2  # the last --output counts
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: No mrpc train file")
    assert not (tmp_path / "y").exists()
    dev = json.loads((squad / "dev-v1.1.json").read_text())
    dev["data"][0]["paragraphs"][0]["qas"][0].update(answers=[], is_impossible=True)
    (squad / "dev-v1.1.json").write_text(json.dumps(dev))
    assert main(["--output", str(tmp_path / "z"), "--glue-dir", str(glue), "--squad-dir", str(squad), "--pair-task", "rte"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {squad / 'dev-v1.1.json'}: question dev-0 has no answer: SQuAD 2.0 data, and Table 5 reports SQuAD v1.1 "
        "(train-v1.1.json, dev-v1.1.json)."]


def test_paper_scale_pretrains_in_the_papers_two_phases(tmp_path):
    """The paper scale's pre-training: 90% of 1M steps at 128 tokens, then a second run resuming at
    step 900k for the last 10% at 512 (one schedule). Both commands are valid pretrain.py options, a
    rerun never replays phase 1 over phase 2, and the budget counts both phases' tokens."""
    from bert_ds.experiments.table5 import SCALES, Experiment, parse_args
    from bert_ds.training.config.args import parse_args as pretrain_args

    experiment = Experiment(parse_args(["--output", str(tmp_path), "--glue-dir", "g", "--squad-dir", "s", "--scale", "paper"]))
    steps = []
    experiment._step = lambda what, script, args, log, claim: steps.append((what, script.name, args))
    experiment.pretrain("mlm")
    assert [(what, script) for what, script, _ in steps] == [("pre-training mlm, phase 1", "pretrain.py"),
                                                            ("pre-training mlm, phase 2", "pretrain.py")]
    phase1, phase2 = (pretrain_args(args) for _, _, args in steps)
    assert (phase1.data.seq_length, phase1.checkpoint.stop_at_step, phase1.checkpoint.phase_start_step) == (128, 900_000, None)
    assert (phase2.data.seq_length, phase2.checkpoint.stop_at_step, phase2.checkpoint.phase_start_step) == (512, None, 900_000)
    for run in (phase1, phase2):
        assert (run.optim.train_steps, run.optim.global_batch_size, run.checkpoint.auto_resume) == (1_000_000, 256, True)
        assert run.checkpoint.save == str(tmp_path / "pretrain" / "mlm" / "ckpt")
    # Killed in phase 2 and rerun: phase 2 only (its checkpoints are past 900k); finished: nothing.
    (tmp_path / "pretrain" / "mlm" / "done.json").unlink()
    steps.clear()
    experiment.pretrain("mlm")
    assert [what for what, _, _ in steps] == ["pre-training mlm, phase 2"]
    steps.clear()
    experiment.pretrain("mlm")
    assert steps == []
    assert SCALES["paper"].pretraining_tokens == 256 * (900_000 * 128 + 100_000 * 512)
    assert SCALES["smoke"].pretraining_tokens == 20 * 16 * 64  # one phase


def test_desk_scale_runs_the_desk_recipe_and_a_random_floor(tmp_path):
    """The desk scale's commands are the desk recipe (pre-LN, no dropout, beta2 0.98, 7,400 steps at
    128 tokens then 600 at 256, held-out evaluation), SQuAD's windows fit the trained positions, and
    the "No pre-training" row fine-tunes random pre-LN weights with the pre-trained models' tokenizer
    (the smoke test runs that row's options for real)."""
    from bert_ds.experiments.table5 import SCALES, Experiment, parse_args
    from bert_ds.training.config.args import parse_args as pretrain_args

    experiment = Experiment(parse_args(["--output", str(tmp_path), "--glue-dir", "g", "--squad-dir", "s",
                                        "--eval-data", "held=/data/held", "--data", "books=/data/books"]))
    steps = []
    experiment._step = lambda what, script, args, log, claim: steps.append((what, script.name, args))
    experiment.pretrain("ltr")
    phase1, phase2 = (pretrain_args(args) for _, _, args in steps)
    assert (phase1.data.seq_length, phase1.checkpoint.stop_at_step, phase2.data.seq_length, phase2.checkpoint.phase_start_step) == (
        128, 7_400, 256, 7_400)
    for run in (phase1, phase2):
        assert (run.model.layer_norm_position, run.model.dropout, run.optim.adam_beta2, run.optim.lr) == ("pre", 0.0, 0.98, 2e-3)
        assert (run.eval.eval_data, run.eval.eval_interval, run.data.objective) == (["held=/data/held"], 400, "ltr")
    # The same global batch in every phase and objective; phase 2 in two micro batches (three phase
    # 2s side by side fit 24 GB), the LTR model's in four and eight (its logits cover every position).
    assert (phase1.optim.micro_batch_size, phase2.optim.micro_batch_size) == (32, 16)
    assert phase1.optim.global_batch_size == phase2.optim.global_batch_size == 128
    steps.clear()
    experiment.pretrain("mlm")
    mlm1, mlm2 = (pretrain_args(args) for _, _, args in steps)
    assert (mlm1.optim.micro_batch_size, mlm2.optim.micro_batch_size) == (128, 64) and mlm2.optim.global_batch_size == 128
    desk = SCALES["desk"]
    assert desk.squad_max_seq_length <= desk.phase2_seq_length and desk.max_train_examples is None
    script, args = experiment._finetune_command("No pre-training", "squad", tmp_path / "cell")
    assert script.name == "squad.py" and "--init" not in args
    assert args[args.index("--layer-norm-position") + 1] == "pre" and args[args.index("--dropout") + 1] == "0.1"
    assert args[args.index("--tokenizer") + 1] == str(tmp_path / "pretrain" / "mlm_nsp" / "ckpt" / "tokenizer")


def test_rows_run_only_the_pretrainings_they_need(tmp_path):
    """--rows picks rows; their cells wait only for their own model. The floor borrows the MLM+NSP
    model's tokenizer, unless --tokenizer names it: then it needs no pre-training and can run first."""
    from bert_ds.experiments.table5 import Experiment, parse_args

    def steps(*more):
        experiment = Experiment(parse_args(["--output", str(tmp_path), "--glue-dir", "g", "--squad-dir", "s", *more]))
        return experiment, {key: needs for key, (_, needs) in experiment.steps().items()}

    _, every = steps()
    assert len(every) == 3 + 15 and every["LTR & No NSP", "squad"] == ("ltr",) and every["No pre-training", "mrpc"] == ("mlm_nsp",)
    _, bilstm = steps("--rows", "ltr_bilstm")
    assert bilstm == {"ltr": (), ("+ BiLSTM", "mrpc"): ("ltr",), ("+ BiLSTM", "sst2"): ("ltr",), ("+ BiLSTM", "squad"): ("ltr",)}
    _, floor = steps("--rows", "no_pretraining", "mlm_nsp")
    assert [key for key in floor if isinstance(key, str)] == ["mlm_nsp"] and floor["No pre-training", "squad"] == ("mlm_nsp",)
    experiment, named = steps("--rows", "no_pretraining", "--tokenizer", "bert-base-uncased")
    assert named == {("No pre-training", column): () for column in ("mrpc", "sst2", "squad")}
    _, args = experiment._finetune_command("No pre-training", "sst2", tmp_path / "cell")
    assert args[args.index("--tokenizer") + 1] == "bert-base-uncased"
    with pytest.raises(SystemExit):
        parse_args(["--output", "o", "--glue-dir", "g", "--squad-dir", "s", "--rows", "bilstm"])


def test_a_step_another_job_is_running_is_waited_for_then_found_done(tmp_path, monkeypatch, capsys):
    """Jobs of one --output (--rows) claim each step: a cell another job holds is waited for, then
    skipped once that job has written its results; a stop ends the wait (Stopped, not a hang)."""
    import threading

    from bert_ds.experiments import shared_output
    from bert_ds.experiments.shared_output import claimed
    from bert_ds.experiments.step_pool import Stopped
    from bert_ds.experiments.table5 import Experiment, parse_args

    monkeypatch.setattr(shared_output, "POLL_SECONDS", 0.05)
    experiment = Experiment(parse_args(["--output", str(tmp_path), "--glue-dir", "g", "--squad-dir", "s",
                                        "--tokenizer", "bert-base-uncased"]))
    started = []
    experiment._step = lambda what, script, args, log, claim: started.append(what)
    cell = tmp_path / "finetune" / "no_pretraining" / "sst2"
    holding, release = threading.Event(), threading.Event()

    def other_job(claim, results):
        with claimed(claim, "x", lambda: None, lambda line: None):
            holding.set()
            release.wait(10)
            if results:
                cell.mkdir(parents=True)
                (cell / "results.json").write_text(json.dumps({
                    "all_runs": [{"history": [{"dev": {"sst2": {"accuracy": 0.9}}}]}], "metrics": {"accuracy": 0.9},
                    "selection_budget": {}}))

    other = threading.Thread(target=other_job, args=(cell.parent / ".sst2.claim", True))
    other.start()
    holding.wait(10)
    threading.Timer(0.3, release.set).start()
    summary = experiment.finetune("No pre-training", "sst2")
    other.join(10)
    assert started == [] and summary["scores"] == [90.0]
    out = capsys.readouterr().out
    assert "fine-tuning No pre-training on sst2: another job is running it; waiting" in out and "done before, skipped" in out

    holding.clear(), release.clear()
    other = threading.Thread(target=other_job, args=(tmp_path / "pretrain" / "ltr" / ".claim", False))
    other.start()
    holding.wait(10)
    experiment.processes.stopped_by = signal.SIGTERM  # what the experiment's signal handler sets
    with pytest.raises(Stopped):
        experiment.pretrain("ltr")
    release.set()
    other.join(10)
    assert started == []


def test_report_only_writes_the_report_of_what_is_there_and_starts_nothing(tmp_path, capsys):
    """--report-only (no task folders needed): the finished cells, the running pre-training's curve,
    nothing started; a folder where nothing began, or a job with other result options, refused."""
    from bert_ds.experiments.table5 import main

    out = tmp_path / "t5"
    cell = out / "finetune" / "no_pretraining" / "sst2"
    cell.mkdir(parents=True)
    (cell / "results.json").write_text(json.dumps({
        "all_runs": [{"history": [{"dev": {"sst2": {"accuracy": a}}}]} for a in (0.87, 0.89)],
        "metrics": {"accuracy": 0.89}, "selection_budget": {}}))
    running = out / "pretrain" / "mlm"
    (running / "ckpt").mkdir(parents=True)
    (running / "metrics.jsonl").write_text(json.dumps({"step": 400, "consumed_tokens": 6_000_000, "eval/mlm_accuracy": 0.13,
                                                       "eval/mlm_loss": 6.6}) + "\n")
    finished = out / "pretrain" / "mlm_nsp"
    finished.mkdir(parents=True)
    (finished / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "consumed_tokens": step * 16384, "eval/mlm_loss": 3.0,
                                                                "eval/mlm_accuracy": accuracy, "eval/nsp_accuracy": 0.9}) + "\n"
                                                    for step, accuracy in ((7600, 0.35), (8000, 0.36))))
    (finished / "done.json").write_text("{}")
    options = ["--output", str(out), "--scale", "desk", "--restarts", "2", "--report-only"]
    assert main(options) == 0
    assert not (out / "options.json").exists()  # a report writes no options: it only reads the folder
    record = json.loads((out / "table5.json").read_text())
    assert list(record["cells"]) == ["No pre-training"] and list(record["cells"]["No pre-training"]) == ["sst2"]
    assert record["cells"]["No pre-training"]["sst2"]["scores"] == [87.0, 89.0]
    assert record["pretraining"]["mlm"] == {} and record["curves"]["mlm"]["finished"] is False  # running: a curve only
    assert record["pretraining"]["mlm_nsp"] == {"step": 8000, "held_out_accuracy": 0.36, "held_out_nsp_accuracy": 0.9,
                                                "consumed_tokens": 8000 * 16384}  # finished: its last evaluation
    assert (out / "pretraining.png").is_file() and not (out / "logs").exists()
    assert "not run yet: MLM+NSP on mrpc" in capsys.readouterr().out
    (out / "options.json").write_text(json.dumps({"scale": "desk", "restarts": 2}))  # what the jobs recorded
    assert main([*options[:-2], "3", "--report-only"]) == 2  # other --restarts than the results'
    assert "restarts 3 where it has 2" in capsys.readouterr().err
    assert json.loads((out / "options.json").read_text()) == {"scale": "desk", "restarts": 2}
    (tmp_path / "begun" / "pretrain" / "mlm").mkdir(parents=True)  # begun, no checkpoint yet: its metrics count
    (tmp_path / "begun" / "pretrain" / "mlm" / "metrics.jsonl").write_text('{"step": 50, "loss": 8.0}\n')
    assert main(["--output", str(tmp_path / "begun"), "--report-only"]) == 0
    assert main(["--output", str(tmp_path / "empty"), "--report-only"]) == 2
    assert "nothing to report" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # without --report-only the task folders are required
        main(["--output", str(out)])
    assert "required: --glue-dir" in capsys.readouterr().err


def test_a_finished_pretraining_run_is_adopted_only_when_it_matches_the_scale(tmp_path):
    from bert_ds.errors import ConfigError
    from bert_ds.experiments.table5 import SCALES
    from bert_ds.experiments.table5_adopt import adopt_pretrained

    run = tmp_path / "desk-run"
    tag = run / "step00008000"
    tag.mkdir(parents=True)
    (run / "latest").write_text("step00008000")
    (run / "metrics.jsonl").write_text('{"step": 7950, "loss": 2.5, "train_seconds": 9000.5}\n'
                                       '{"step": 8000, "eval/mlm_loss": 3.1, "eval/mlm_accuracy": 0.36, "eval/nsp_accuracy": 0.95}\n')
    marker = {"step": 8000, "model_config": {"layer_norm_position": "pre"},
              "run": {"preset": "mini", "train_steps": 8000, "global_batch_size": 128}}
    (tag / "complete.json").write_text(json.dumps(marker))
    assert adopt_pretrained(tmp_path / "t5" / "mlm_nsp", run, "mlm_nsp", SCALES["desk"]) == 9000.5  # its training time
    assert (tmp_path / "t5" / "mlm_nsp" / "ckpt").resolve() == run.resolve()
    assert json.loads((tmp_path / "t5" / "mlm_nsp" / "done.json").read_text())["adopted"] == str(run)
    # Adopted by the experiment: its training time is that step's time in table5.json.
    from bert_ds.experiments.table5 import Experiment, parse_args

    experiment = Experiment(parse_args(["--output", str(tmp_path / "t8"), "--glue-dir", "g", "--squad-dir", "s",
                                        "--pretrained", f"mlm_nsp={run}"]))
    experiment.pretrain("mlm_nsp")
    assert json.loads((tmp_path / "t8" / "step_seconds.json").read_text()) == {"pretrain-mlm_nsp (adopted: training loop)": 9000.5}
    marker["run"]["global_batch_size"] = 256
    (tag / "complete.json").write_text(json.dumps(marker))
    with pytest.raises(ConfigError, match="global_batch_size"):
        adopt_pretrained(tmp_path / "t6" / "mlm_nsp", run, "mlm_nsp", SCALES["desk"])
    with pytest.raises(ConfigError, match="no such folder"):
        adopt_pretrained(tmp_path / "t7", tmp_path / "nowhere", "mlm", SCALES["desk"])
    # A pre-training of the experiment's own began in that folder: never silently kept as the adopted model.
    marker["run"]["global_batch_size"] = 128
    (tag / "complete.json").write_text(json.dumps(marker))
    (tmp_path / "t9" / "mlm_nsp" / "ckpt" / "step00000400").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"already holds a pre-training begun in this experiment"):
        adopt_pretrained(tmp_path / "t9" / "mlm_nsp", run, "mlm_nsp", SCALES["desk"])
    assert adopt_pretrained(tmp_path / "t5" / "mlm_nsp", run, "mlm_nsp", SCALES["desk"]) == 9000.5  # adopted before: fine


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_experiment_reaches_its_running_steps(tmp_path, shared_cache, signum, status):
    """SIGTERM (scancel, `kill`) to the experiment is forwarded to the steps it runs (a pre-training
    then saves and ends), as is SIGINT (passed on as SIGTERM); no further step starts, and it ends
    128 + the signal saying how to go on. Before, the experiment died at once and left its
    pre-trainings running as orphans."""
    glue, squad, out = _task_folders(tmp_path)
    starts, stops = tmp_path / "starts", tmp_path / "stops"
    step = tmp_path / "step.sh"  # stands in for every entrypoint: --launch "sh step.sh" runs `sh step.sh SCRIPT ARGS`
    step.write_text(f'echo "$*" >> {starts}\n'
                    f'trap \'echo "$*" >> {stops}; kill $!; exit 143\' TERM\n'
                    'sleep 120 & wait\n')
    experiment = _start(out, glue, squad, step, shared_cache, "--jobs", "2")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(starts.read_text().splitlines() if starts.exists() else []) < 2:
        time.sleep(0.2)
    time.sleep(0.5)  # both shells past their `trap` line
    experiment.send_signal(signum)
    stdout, stderr = experiment.communicate(timeout=60)
    assert experiment.returncode == status, stdout[-2000:] + stderr[-2000:]
    assert f"stopped by {signal.Signals(signum).name}" in stderr and "the same command goes on" in stderr
    assert "Traceback" not in stderr
    objectives = sorted(line.split("--objective ")[1].split()[0] for line in stops.read_text().splitlines())
    assert objectives == ["mlm", "mlm_nsp"]  # both running pre-trainings were told
    assert len(starts.read_text().splitlines()) == 2  # and nothing started after
    assert set(json.loads((out / "step_seconds.json").read_text())) == {"pretrain-mlm", "pretrain-mlm_nsp"}


@pytest.mark.parametrize("signal_name", ["TERM", "KILL"])
def test_a_step_that_a_signal_ended_stops_or_fails_the_experiment(tmp_path, shared_cache, signal_name):
    """scancel signals every process of a job: a step may end by SIGTERM before the experiment's own
    handler runs. That is a stop (143, "goes on"), not a failed step (2, "error:"). SIGKILL, which
    the kernel's OOM killer sends with no word in the step's log, fails it with a line saying where
    to look."""
    glue, squad, out = _task_folders(tmp_path)
    step = tmp_path / "step.sh"
    step.write_text(f"echo started\nkill -{signal_name} $$\n")
    experiment = _start(out, glue, squad, step, shared_cache)
    stdout, stderr = experiment.communicate(timeout=120)
    assert "Traceback" not in stderr
    if signal_name == "TERM":
        assert experiment.returncode == 143, stdout[-2000:] + stderr[-2000:]
        assert "stopped by SIGTERM" in stderr and "error:" not in stderr
        assert stdout.count("[table5] pre-training") == 2  # "mlm_nsp ..." and "mlm_nsp: stopped"; mlm never started
    else:
        assert experiment.returncode == 2, stdout[-2000:] + stderr[-2000:]
        assert "pre-training mlm_nsp failed (killed by SIGKILL: the kernel's out-of-memory killer" in stderr
        assert "started" in stderr  # the log's end


def test_a_step_stays_claimed_when_only_the_experiment_is_killed(tmp_path, shared_cache):
    """`kill -9` of the experiment alone leaves its running step as an orphan. The step holds the
    step's claim too (its descriptor is passed on), so a rerun waits for it instead of starting a
    second pre-training into the same checkpoint folder; once the orphan ends, the rerun runs it."""
    glue, squad, out = _task_folders(tmp_path)
    starts = tmp_path / "starts"
    step = tmp_path / "step.sh"
    step.write_text(f'echo "$*" >> {starts}\nexec sleep 300\n')

    def started():
        return len(starts.read_text().splitlines()) if starts.exists() else 0

    def wait_until(condition, what):
        deadline = time.monotonic() + 120
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)

    first = _start(out, glue, squad, step, shared_cache, start_new_session=True)
    groups = [first.pid]
    try:
        wait_until(lambda: started() == 1, "the first run's pre-training did not start")
        first.kill()  # the experiment only: its step (sleep) runs on
        first.communicate(timeout=30)
        said = tmp_path / "second.out"
        with open(said, "w") as stdout:
            second = subprocess.Popen([sys.executable, "-m", "bert_ds.experiments.table5", "--output", str(out),
                                       "--glue-dir", str(glue), "--squad-dir", str(squad), "--scale", "smoke",
                                       "--launch", f"sh {step}"], cwd=REPO, env=dict(os.environ, BERT_DS_CACHE=shared_cache),
                                      stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)
        groups.append(second.pid)
        wait_until(lambda: "another job is running it; waiting" in said.read_text(), "the rerun did not wait")
        time.sleep(1)
        assert started() == 1  # it waits: no second pre-training into the same folder
        os.killpg(first.pid, signal.SIGKILL)  # the orphan ends
        wait_until(lambda: started() == 2, "the rerun did not start the step once the orphan ended")
    finally:
        for group in groups:  # every process either run left
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _task_folders(tmp_path):
    glue, squad = tmp_path / "glue", tmp_path / "squad"
    write_all_tasks(glue, n=16)
    write_squad(squad, random.Random(2))
    return glue, squad, tmp_path / "table5"


def _start(out, glue, squad, step, cache, *more, **popen):
    return subprocess.Popen([sys.executable, "-m", "bert_ds.experiments.table5", "--output", str(out), "--glue-dir",
                             str(glue), "--squad-dir", str(squad), "--scale", "smoke", "--launch", f"sh {step}", *more],
                            cwd=REPO, env=dict(os.environ, BERT_DS_CACHE=cache), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)
