"""A fine-tuning task's definition, and the one `main()` every task's entrypoint runs.

A task file (glue.py, squad.py, swag.py, ner.py) defines a `FinetuneTask`: its own options, how
its data becomes features and is scored (its `TaskData`: data, head and metric), and how the dry
run describes that data. Everything else exists once, here and in the modules it calls: the
options every task shares (finetune/args.py), the process group, starting point and layout, the
launch plan (finetune/plan.py), the grid and restarts (finetune/core.py), one output folder per
task when a command runs several, and user errors as one `error:` line (exit 2). With `--dry-run`
it stops after the plan: no process group, no weights.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from bert_ds.errors import USER_ERRORS, report
from bert_ds.finetune.data.tasks import FinetuneDataError
from bert_ds.options import HelpFormatter, refuse_empty_values


def _one_task(args) -> list[Optional[str]]:
    return [None]


def _default_restarts(args, name) -> Optional[int]:
    return None


@dataclass(frozen=True)
class FinetuneTask:
    """What one entrypoint fine-tunes."""

    script: str
    """The entrypoint's path from the repository root (its --help's program name)."""
    description: str
    default_seq_length: int
    add_arguments: Callable[[argparse.ArgumentParser], None]
    """The task's own options (its data source first)."""
    build: Callable
    """build(args, name, tokenizer, max_length, say) -> finetune.core.TaskData: features, scoring, outputs."""
    plan: Callable
    """plan(args, name) -> finetune.plan.TaskPlan: the dry run's view of the data (local files read
    and checked as the job reads them; hub data is counted at start)."""
    task_names: Callable = _one_task
    """task_names(args) -> the tasks this command runs, in order ([None]: the file's one task)."""
    restarts: Callable = _default_restarts
    """restarts(args, name) -> this task's restarts, or None for --restarts."""
    summarize: Optional[Callable] = None
    """summarize(job, summaries) on rank 0 when a command ran several tasks (GLUE's average)."""

    def main(self, argv=None) -> int:
        from bert_ds.finetune.args import add_common_arguments, config_from_args

        parser = argparse.ArgumentParser(prog=self.script, description=self.description, formatter_class=HelpFormatter)
        self.add_arguments(parser)
        add_common_arguments(parser)
        refuse_empty_values(parser, argv)
        args = parser.parse_args(argv)
        try:
            job = config_from_args(args, self.default_seq_length)
            if job.plan.dry_run:
                return _dry_run(job, self.plan_data(args))
        except USER_ERRORS as error:
            return report(error)
        try:
            _watched_run(job, lambda start, layout: self.run(args, job, start, layout))
        except USER_ERRORS as error:
            return report(error)
        finally:
            from bert_ds.runtime.distributed import teardown_parallel

            teardown_parallel()
        return 0

    def plan_data(self, args) -> list:
        """Every task's TaskPlan, with its restarts."""
        plans = []
        for name in self.task_names(args):
            plan, restarts = self.plan(args, name), self.restarts(args, name)
            plans.append(plan if restarts is None else dataclasses.replace(plan, restarts=restarts))
        return plans

    def run(self, args, job, start, layout) -> dict:
        """Fine-tune every task of the command (each with its grid and restarts); their summaries."""
        from bert_ds.finetune.core import run_job

        names = self.task_names(args)
        summaries = {}
        for name in names:
            task_job = job.with_restarts(self.restarts(args, name) or job.grid.restarts)
            if len(names) > 1:  # one folder per task
                start_options = dataclasses.replace(job.start, output=str(Path(job.start.output) / name))
                task_job = dataclasses.replace(task_job, start=start_options)
            Path(task_job.start.output).mkdir(parents=True, exist_ok=True)
            task = self.build(args, name, start.tokenizer, job.recipe.max_seq_length, layout.say)
            summaries[task.name] = run_job(task_job, task, start, layout)
        if len(names) > 1 and layout.rank == 0 and self.summarize is not None:
            self.summarize(job, summaries)
        return summaries


TASK_FILES = {
    "glue": "bert_ds.finetune.glue",
    "squad": "bert_ds.finetune.squad",
    "swag": "bert_ds.finetune.swag",
    "ner": "bert_ds.finetune.ner",
}
"""Every fine-tuning task: its name -> the module that defines its `TASK` (and runs it as a script)."""


def finetune_task(name: str) -> FinetuneTask:
    """The FinetuneTask called `name` (a key of TASK_FILES)."""
    return importlib.import_module(TASK_FILES[name]).TASK


def folder_or_hub(args, folder: str, dataset: str) -> str:
    """The data spec of --data-dir or --dataset ("hf:ID"); one error naming both when neither is given."""
    if args.dataset:
        return f"hf:{args.dataset}"
    if args.data_dir:
        return args.data_dir
    raise FinetuneDataError(f"Give --data-dir ({folder}) or --dataset ({dataset}).")


def data_option(args, folder: str, file_options: tuple[str, ...] = ("--train-file", "--dev-file")) -> str:
    """Which one data source the command gave: "--data-dir", "--dataset" or "--train-file" (the
    file options together); one error naming what was given otherwise."""
    values = {option: getattr(args, option[2:].replace("-", "_")) for option in ("--data-dir", "--dataset", *file_options)}
    given = [option for option, value in values.items() if value is not None]
    sources = {"--train-file" if option in file_options else option for option in given}
    if len(sources) != 1:
        raise FinetuneDataError(
            f"Give one data source: --data-dir ({folder}), --dataset [HUB_ID], "
            f"or --train-file with --dev-file{'; got ' + ', '.join(given) if given else ''}.")
    source = sources.pop()
    if source == "--train-file" and (args.train_file is None or args.dev_file is None):
        raise FinetuneDataError("--train-file and --dev-file go together: give both.")
    return source


def _dry_run(job, tasks) -> int:
    from bert_ds.finetune.plan import resolve_finetune_plan
    from bert_ds.training.plan.report import finetune_plan_json, format_finetune_plan, write_plan_json

    plan = resolve_finetune_plan(job, tasks, target=job.plan.dry_run)
    print(format_finetune_plan(plan), flush=True)
    if job.plan.plan_json:
        write_plan_json(job.plan.plan_json, finetune_plan_json(plan))
    return 0


def _watched_run(job, run) -> None:
    """Join the job, then set up and `run(start, layout)` under the step watchdog
    (training/loop/watchdog.py; its hang reports go to OUTPUT/hang/)."""
    import torch.distributed as dist

    from bert_ds.runtime.distributed import join_process_group
    from bert_ds.training.loop.watchdog import Watchdog, watch

    join_process_group(job.parallel.collective_timeout)
    watchdog = Watchdog(job.parallel.watchdog_limits(), dist.get_rank(), dist.get_world_size(),
                        os.path.join(job.start.output, "hang"), after_exit="(fine-tuning: rerun the job)")
    with watch(watchdog):
        start, layout = _setup(job)
        with watchdog.phase("step", "fine-tuning"):
            run(start, layout)


def _setup(job):
    import torch.distributed as dist

    from bert_ds.finetune.starting_point import resolve
    from bert_ds.runtime.distributed import init_parallel

    start = resolve(job, dist.get_rank())
    job.validate(dist.get_world_size(), start.model_config)  # the dry run's rules: no grid setting fails late
    layout = init_parallel(start.model_config, job.parallel.tensor_parallel, 1, seed=job.recipe.seed,
                           timeout_s=job.parallel.collective_timeout)
    return start, layout
