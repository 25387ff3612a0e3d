"""Table 5 of the BERT paper in miniature: the effect of the pre-training tasks.

`python -m bert_ds.experiments.table5 --output DIR --glue-dir D --squad-dir D [--scale smoke|desk|paper]
[--restarts N] [--data ...] [--eval-data ...] [--pretrained mlm_nsp=DIR] [--rows ROW ...]`. From one initialisation seed, the same pre-training stream and the same token
budget it pre-trains three models: MLM+NSP, No NSP (`--objective mlm`: the same sentence pairs
without the NSP loss) and LTR & No NSP (`--objective ltr`); it fine-tunes each on a sentence-pair
task (MRPC, or `--pair-task`), a single-sentence task (SST-2) and span extraction (SQuAD v1.1),
and the LTR model once more with a BiLSTM under the head (`--bilstm`, the "+ BiLSTM" row), and
random weights of the same shape as a floor ("No pre-training", not in the paper). Every
cell runs `--restarts` seeds with the same hyper-parameters for every objective (the protocol is
never tuned per objective). Results: table5.json, table5.md (shaped like the paper's table, its
numbers beside ours) and table5.png (bars with error bars), in --output.

Every step runs the project's own entrypoints as subprocesses (`bert_ds/pretrain.py`,
`bert_ds/finetune/glue.py`, `squad.py`, with --launch's prefix, e.g. `torchrun --nproc_per_node
8` on a node), each step's output in OUTPUT/logs/. It resumes: a rerun with the same --output skips
every finished pre-training (done.json) and cell (its results.json), and a killed pre-training
continues from its last checkpoint (--auto-resume). `--rows` runs some rows and the pre-trainings
they need (a job each); the report holds every cell finished so far. `--report-only` starts
nothing and writes the report from what the folder holds (while other jobs run, say).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from bert_ds.errors import USER_ERRORS, ConfigError, report
from bert_ds.experiments.progress import StepProgress, say
from bert_ds.experiments.step_pool import StepProcesses, Stopped, run_steps
from bert_ds.experiments.shared_output import check_options, claimed, locked, update_json
from bert_ds.experiments.table5_adopt import adopt_pretrained
from bert_ds.experiments.table5_curves import finished_summary, pretraining_curves
from bert_ds.experiments.table5_report import ROWS, results_cell, write_report
from bert_ds.experiments.table5_scales import SCALES

PACKAGE = Path(__file__).resolve().parents[1]

ROW_RUNS = {  # row -> (the objective of the model it fine-tunes, its folder under OUTPUT/finetune)
    "MLM+NSP": ("mlm_nsp", "mlm_nsp"),
    "No NSP": ("mlm", "no_nsp"),
    "LTR & No NSP": ("ltr", "ltr"),
    "+ BiLSTM": ("ltr", "ltr_bilstm"),  # the LTR model again, a BiLSTM under its heads
    "No pre-training": (None, "no_pretraining"),  # random weights: the floor every other row must clear
}
OBJECTIVES = ("mlm_nsp", "mlm", "ltr")
ROW_SLUGS = {slug: row for row, (_, slug) in ROW_RUNS.items()}
"""--rows' names for the rows: their folders under OUTPUT/finetune."""


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bert_ds.experiments.table5", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--output", required=True, help="experiment folder (rerun with the same one to resume)")
    parser.add_argument("--glue-dir", help="glue_data folder with SST-2 and the pair task's folder (required unless --report-only)")
    parser.add_argument("--squad-dir", help="folder with train-v1.1.json and dev-v1.1.json (required unless --report-only)")
    parser.add_argument("--scale", choices=sorted(SCALES), default="desk",
                        help="smoke (fixtures), desk (2 CPU cores, about 26 hours) or paper (a cluster)")
    parser.add_argument("--restarts", type=int, default=3, help="fine-tuning seeds per cell")
    parser.add_argument("--pair-task", default="mrpc", choices=["mrpc", "rte", "qnli", "mnli"],
                        help="the sentence-pair task (the paper reports MNLI, QNLI and MRPC)")
    parser.add_argument("--data", nargs="+", default=["sample"], help="pre-training sources (pretrain.py's --data)")
    parser.add_argument("--eval-data", nargs="+", default=None,
                        help="held-out sources (pretrain.py's --eval-data): each model's held-out accuracy in the table")
    parser.add_argument("--tokenizer", default=None, help="pre-training tokenizer (pretrain.py's --tokenizer)")
    parser.add_argument("--pretrained", action="append", default=[], metavar="OBJECTIVE=DIR",
                        help="use a finished pre-training run of this recipe, seed and stream (its --save folder) "
                             "for OBJECTIVE (mlm_nsp, mlm or ltr) instead of pre-training it again")
    parser.add_argument("--seed", type=int, default=1234, help="the one initialisation and data seed")
    parser.add_argument("--launch", default=None,
                        help="command prefix for every step, e.g. 'torchrun --nproc_per_node 8' (default: this python)")
    parser.add_argument("--status-interval", type=float, default=600,
                        help="seconds between lines on the running steps (each one's last progress line); 0: none")
    parser.add_argument("--rows", nargs="+", choices=list(ROW_SLUGS), default=list(ROW_SLUGS), metavar="ROW",
                        help="run only these rows (" + ", ".join(ROW_SLUGS) + ") and the pre-trainings they need; "
                             "the report holds every cell finished so far, so rows can run in separate jobs")
    parser.add_argument("--report-only", action="store_true",
                        help="start nothing: write the report (table5.json/md/png, pretraining.png) from what --output "
                             "holds now, running pre-trainings' curves included, e.g. while other jobs run")
    parser.add_argument("--jobs", type=int, default=1,
                        help="steps run at once, each with its share of the cores: the pre-trainings first, and each "
                             "model's cells as soon as it is pre-trained")
    args = parser.parse_args(argv)
    for name in ("glue_dir", "squad_dir"):
        if getattr(args, name) is None and not args.report_only:
            parser.error(f"the following arguments are required: --{name.replace('_', '-')}")
    for name in ("restarts", "jobs"):
        if getattr(args, name) < 1:
            parser.error(f"argument --{name}: must be at least 1, got {getattr(args, name)}")
    if args.status_interval < 0:
        parser.error(f"argument --status-interval: must be 0 (no lines) or more seconds, got {args.status_interval:g}")
    pretrained = {}
    for item in args.pretrained:
        objective, _, folder = item.partition("=")
        if objective not in OBJECTIVES or not folder:
            parser.error(f"argument --pretrained: expected OBJECTIVE=DIR with OBJECTIVE one of {', '.join(OBJECTIVES)}, got {item!r}")
        pretrained[objective] = folder
    args.pretrained = pretrained
    return args


class Experiment:
    def __init__(self, args: argparse.Namespace):
        self.args, self.scale = args, SCALES[args.scale]
        self.output = Path(args.output)
        self.launch = shlex.split(args.launch) if args.launch else [sys.executable]
        self.columns = [args.pair_task, "sst2", "squad"]
        self.processes = StepProcesses()
        self.progress = StepProgress(args.status_interval)

    @property
    def rows(self) -> list[str]:
        """The rows --rows asks for, in the paper's order."""
        return [row for row in ROWS if ROW_RUNS[row][1] in self.args.rows]

    def needs(self, row: str) -> tuple:
        """The pre-training a row's cells wait for. "No pre-training" needs none when --tokenizer
        names the tokenizer; otherwise it borrows the one the MLM+NSP pre-training saves."""
        objective = ROW_RUNS[row][0]
        if objective is None:
            return () if self.args.tokenizer else ("mlm_nsp",)
        return (objective,)

    def steps(self) -> dict:
        """The steps of the rows asked for: the pre-trainings they need, then their cells."""
        needed = {objective for row in self.rows for objective in self.needs(row)}
        steps = {objective: (functools.partial(self.pretrain, objective), ()) for objective in OBJECTIVES if objective in needed}
        for row in self.rows:
            steps.update({(row, column): (functools.partial(self.finetune, row, column), self.needs(row))
                          for column in self.columns})
        return steps

    def run(self) -> dict:
        if self.args.report_only:
            if not self._anything_made():
                raise ConfigError(f"--output {self.output}: no pre-training or cell has begun there, so nothing to report.")
            check_options(self.output, self.result_options(), True, record=False)  # the results' options, if recorded
            summaries = {}
        else:
            self.check_data()
            (self.output / "logs").mkdir(parents=True, exist_ok=True)
            check_options(self.output, self.result_options(), self._anything_made())
            with self.progress:
                summaries = run_steps(self.steps(), self.args.jobs)
        with locked(self.output / ".report.lock"):  # another job's report, written before, is older than this one
            return self._report(summaries)

    def _report(self, summaries: dict) -> dict:
        cells = {}
        for row in ROWS:  # this run's cells, and those an earlier run of other rows finished
            done = {column: summaries.get((row, column)) or self._finished_cell(row, column) for column in self.columns}
            if any(done.values()):
                cells[row] = {column: cell for column, cell in done.items() if cell}
        curves = pretraining_curves(self.output, OBJECTIVES, self.args.pretrained)
        record = dict(scale=self.args.scale, settings=asdict(self.scale), restarts=self.args.restarts,
                      columns=self.columns, seed=self.args.seed, data=self.args.data, eval_data=self.args.eval_data,
                      tokenizer=self.args.tokenizer,
                      budget=dict(pretraining_tokens=self.scale.pretraining_tokens, finetuning_runs_per_cell=self.args.restarts
                                  * (18 if self.scale.grid else 1)),
                      pretraining={objective: finished_summary(curves.get(objective)) for objective in OBJECTIVES},
                      curves=curves, step_seconds=self._times(), cells=cells)
        write_report(self.output, record)
        missing = [f"{row} on {column}" for row in ROWS for column in self.columns if column not in cells.get(row, {})]
        self._say(f"done: {self.output / 'table5.md'}" + (f" (not run yet: {', '.join(missing)})" if missing else ""))
        return record

    def result_options(self) -> dict:
        """The options that decide a cell's result: every job of one --output must share them."""
        a = self.args
        return dict(scale=a.scale, restarts=a.restarts, seed=a.seed, pair_task=a.pair_task, data=a.data,
                    eval_data=a.eval_data, tokenizer=a.tokenizer)

    def _anything_made(self) -> bool:
        """Whether a pre-training or a cell has begun in --output (so its options are those of a result)."""
        return any(any(self.output.glob(pattern)) for pattern in ("pretrain/*/ckpt", "pretrain/*/metrics.jsonl",
                                                                  "finetune/*/*/results.json"))

    def check_data(self) -> None:
        """Every fine-tuning file read as its task reads it, before hours of pre-training: a missing
        folder or file, a malformed row, or SQuAD 2.0 data is one error naming the file."""
        from bert_ds.finetune.data.glue import load_glue
        from bert_ds.finetune.data.squad import load_squad

        for name, path in (("--glue-dir", self.args.glue_dir), ("--squad-dir", self.args.squad_dir)):
            if not Path(path).is_dir():
                raise ConfigError(f"{name} {path}: no such folder.")
        for task in self.columns[:2]:
            for split in ("train", "dev"):
                load_glue(task, split, self.args.glue_dir)
        for split in ("train", "dev"):
            examples, report = load_squad(split, self.args.squad_dir, "1.1")
            unanswerable = next((e.qid for e in examples if e.is_impossible), None)
            if unanswerable is not None:
                raise ConfigError(f"{report.source}: question {unanswerable} has no answer: SQuAD 2.0 data, and "
                                  "Table 5 reports SQuAD v1.1 (train-v1.1.json, dev-v1.1.json).")

    def pretrain(self, objective: str) -> None:
        folder = self.output / "pretrain" / objective
        with claimed(folder / ".claim", f"pre-training {objective}", self.processes.check, self._say) as claim:
            self._pretrain(objective, folder, claim)

    def _pretrain(self, objective: str, folder: Path, claim: int) -> None:
        if (folder / "done.json").is_file():
            self._say(f"pre-training {objective}: done before, skipped")
            return
        if objective in self.args.pretrained:
            seconds = adopt_pretrained(folder, Path(self.args.pretrained[objective]), objective, self.scale)
            if seconds:  # its training loop's time (no start-up), so that table5.json has every step's
                update_json(self.output / "step_seconds.json",
                            lambda times: times.update({f"pretrain-{objective} (adopted: training loop)": seconds}))
            self._say(f"pre-training {objective}: the finished run in {self.args.pretrained[objective]}")
            return
        s = self.scale
        args = ["--preset", s.preset, "--objective", objective, "--data", *self.args.data, "--seed", str(self.args.seed),
                "--train-steps", str(s.pretrain_steps), "--global-batch-size", str(s.global_batch_size),
                "--lr", str(s.lr), "--warmup-steps", str(s.warmup_steps), "--layer-norm-position", s.layer_norm_position,
                *s.pretrain_options,
                "--save", str(folder / "ckpt"), "--save-interval", str(s.save_interval), "--keep-last", "2",
                "--auto-resume", "--metrics-file", str(folder / "metrics.jsonl"), "--log-interval", "50"]
        if self.args.tokenizer:
            args += ["--tokenizer", self.args.tokenizer]
        if s.eval_interval and self.args.eval_data:
            args += ["--eval-data", *self.args.eval_data, "--eval-interval", str(s.eval_interval)]
        micro = [(), ()]  # each phase's extra options
        if objective == "ltr" and s.ltr_micro_batch_sizes:
            micro = [("--micro-batch-size", str(size)) for size in s.ltr_micro_batch_sizes]
        what, log = f"pre-training {objective}", f"pretrain-{objective}"
        folder.mkdir(parents=True, exist_ok=True)
        if not s.phase2_steps:
            self._step(what, PACKAGE / "pretrain.py", [*args, "--seq-length", str(s.seq_length), *micro[0]], log, claim)
        else:  # one schedule, two runs: phase 2 resumes phase 1's last checkpoint at longer sequences
            phase1_end = s.pretrain_steps - s.phase2_steps
            if not (folder / "phase1_done.json").is_file():  # a rerun must not replay phase 1 over phase 2
                self._step(f"{what}, phase 1", PACKAGE / "pretrain.py",
                           [*args, "--seq-length", str(s.seq_length), "--stop-at-step", str(phase1_end), *micro[0]], log,
                           claim)
                (folder / "phase1_done.json").write_text(json.dumps(dict(objective=objective, steps=phase1_end)))
            self._step(f"{what}, phase 2", PACKAGE / "pretrain.py",
                       [*args, "--seq-length", str(s.phase2_seq_length), "--phase-start-step", str(phase1_end),
                        *s.phase2_options, *micro[1]], log, claim)
        (folder / "done.json").write_text(json.dumps(dict(objective=objective, steps=s.pretrain_steps)))

    def _cell_folder(self, row: str, column: str) -> Path:
        return self.output / "finetune" / ROW_RUNS[row][1] / column

    def _finished_cell(self, row: str, column: str) -> Optional[dict]:
        results = self._cell_folder(row, column) / "results.json"
        return results_cell(json.loads(results.read_text()), column) if results.is_file() else None

    def finetune(self, row: str, column: str) -> dict:
        folder = self._cell_folder(row, column)
        what = f"fine-tuning {row} on {column}"
        with claimed(folder.parent / f".{column}.claim", what, self.processes.check, self._say) as claim:
            if not (folder / "results.json").is_file():
                self._step(what, *self._finetune_command(row, column, folder), f"{ROW_RUNS[row][1]}-{column}", claim)
            else:
                self._say(f"{what}: done before, skipped")
        return self._finished_cell(row, column)

    @staticmethod
    def _say(line: str) -> None:
        say(f"[table5] {line}")

    def _finetune_command(self, row: str, column: str, folder: Path) -> tuple[Path, list[str]]:
        s = self.scale
        objective = ROW_RUNS[row][0]
        if objective is None:  # random weights of the same shape, with the pre-trained models' tokenizer
            tokenizer = self.args.tokenizer or str(self.output / "pretrain" / "mlm_nsp" / "ckpt" / "tokenizer")
            start = ["--preset", s.preset, "--layer-norm-position", s.layer_norm_position, "--tokenizer", tokenizer]
        else:
            start = ["--init", str(self.output / "pretrain" / objective / "ckpt")]
        common = [*start, "--output", str(folder), "--restarts", str(self.args.restarts),
                  "--seed", str(self.args.seed), "--no-save-model"]
        common += ["--dropout", str(s.finetune_dropout)] if s.finetune_dropout is not None else []
        common += ["--grid"] if s.grid else ["--epochs", str(s.finetune_epochs), "--batch-size", str(s.finetune_batch_size),
                                             "--lr", str(s.finetune_lr)]
        common += ["--bilstm"] if row == "+ BiLSTM" else []
        common += ["--max-train-examples", str(s.max_train_examples)] if s.max_train_examples else []
        if column == "squad":
            return PACKAGE / "finetune" / "squad.py", ["--version", "1.1", "--data-dir", self.args.squad_dir,
                                                       "--max-seq-length", str(s.squad_max_seq_length),
                                                       "--doc-stride", str(s.doc_stride), *common]
        return PACKAGE / "finetune" / "glue.py", ["--task", column, "--data-dir", self.args.glue_dir,
                                                  "--max-seq-length", str(s.max_seq_length), *common]

    def _step(self, what: str, script: Path, args: list[str], log_name: str, claim: int) -> None:
        """Run one step's entrypoint; `claim` is the step's lock descriptor, which its process holds
        too (shared_output.py: a job killed alone leaves its running step claimed)."""
        log = self.output / "logs" / f"{log_name}.log"
        self.processes.check()
        self._say(f"{what} ... (log: {log})")
        began = time.monotonic()
        env = None
        if self.args.jobs > 1:  # share the cores between the steps that run at once
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            threads = max(1, cores // self.args.jobs)  # of the cores this process may use
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        self.progress.started(what, log)
        try:
            with open(log, "a") as out:
                returncode = self.processes.run([*self.launch, str(script), *args], stdout=out, stderr=subprocess.STDOUT,
                                                env=env, pass_fds=(claim,))
        except Stopped:  # a pre-training saved and resumes from there; a cell starts again
            self._record_time(log_name, time.monotonic() - began)
            self._say(f"{what}: stopped")
            raise
        finally:
            self.progress.ended(what)
        if returncode != 0:
            lines = log.read_text(errors="replace").splitlines()
            said = next((line for line in reversed(lines) if line.startswith("error: ")), None)
            if said is not None:  # the step's own one-line user error
                raise StepFailed(f"{what} failed: {said[len('error: '):]} (log: {log})")
            tail = "\n".join(lines[-15:])
            how = f"exit {returncode}"
            if returncode == -signal.SIGKILL:  # what the kernel's out-of-memory killer sends, and says nothing else
                how = "killed by SIGKILL: the kernel's out-of-memory killer does this; `dmesg | grep -i oom` tells"
            raise StepFailed(f"{what} failed ({how}); the end of {log}:\n{tail}")
        seconds = time.monotonic() - began
        self._record_time(log_name, seconds)
        self._say(f"{what}: {seconds:,.0f}s")

    def _times(self) -> dict:
        """Seconds spent on every step, summed over its runs (a stopped one included): OUTPUT/step_seconds.json."""
        path = self.output / "step_seconds.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def _record_time(self, log_name: str, seconds: float) -> None:
        def add(times: dict) -> None:
            times[log_name] = round(times.get(log_name, 0.0) + seconds, 1)

        update_json(self.output / "step_seconds.json", add)  # its lock excludes this job's other steps and other jobs


class StepFailed(RuntimeError):
    """A step's entrypoint exited non-zero (its log is named)."""


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    experiment = Experiment(args)
    experiment.processes.forward_signals()
    try:
        experiment.run()
    except Stopped as stop:
        print(f"[table5] stopped by {stop}: the running steps were told too; the same command goes on from "
              f"there (finished steps are kept, a pre-training resumes from its last checkpoint)", file=sys.stderr, flush=True)
        return 128 + stop.signum
    except USER_ERRORS as error:
        return report(error)
    except StepFailed as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    finally:
        experiment.processes.restore_signals()
    return 0


if __name__ == "__main__":
    sys.exit(main())
