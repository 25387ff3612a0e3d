"""The `main()` every fine-tuning entrypoint shares: options, process group, starting point,
parallel layout, the task's runs, and user errors as one `error:` line (exit 2). With
`--dry-run` it stops after the launch plan (finetune/plan.py): no process group, no weights."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable


def user_errors() -> tuple:
    from bert_ds.checkpoint.zero import CheckpointError
    from bert_ds.config import ConfigError
    from bert_ds.data.sources import DataError
    from bert_ds.data.tokenizer import TokenizerError

    return (ConfigError, DataError, TokenizerError, CheckpointError)


def main(
    argv,
    prog: str,
    description: str,
    add_task_arguments: Callable[[argparse.ArgumentParser], None],
    run_tasks: Callable,
    default_seq_length: int,
    plan_data: Callable,
) -> int:
    """`run_tasks(args, job, start, layout)` fine-tunes and returns its summary dict;
    `plan_data(args, job)` describes the task's data for the plan (a list of finetune.plan.TaskPlan)."""
    from bert_ds.finetune.args import add_common_arguments, config_from_args

    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_task_arguments(parser)
    add_common_arguments(parser)
    from bert_ds.training.args import refuse_empty_values

    refuse_empty_values(parser, argv)
    args = parser.parse_args(argv)
    try:
        job = config_from_args(args, default_seq_length)
        if job.dry_run:
            return _dry_run(job, plan_data(args, job))
    except user_errors() as error:
        return _report(error)
    try:
        run_tasks(args, job, *_setup(job))
    except user_errors() as error:
        return _report(error)
    finally:
        from bert_ds.distributed import teardown_parallel

        teardown_parallel()
    return 0


def _report(error: Exception) -> int:
    rank = os.environ.get("RANK", "0")
    prefix = f"[rank {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
    print(f"{prefix}error: {error}", file=sys.stderr)
    return 2


def _dry_run(job, tasks) -> int:
    from bert_ds.finetune.plan import resolve_finetune_plan
    from bert_ds.training.plan_report import finetune_plan_json, format_finetune_plan, write_plan_json

    plan = resolve_finetune_plan(job, tasks, target=job.dry_run)
    print(format_finetune_plan(plan), flush=True)
    if job.plan_json:
        write_plan_json(job.plan_json, finetune_plan_json(plan))
    return 0


def _setup(job):
    import torch.distributed as dist

    from bert_ds.distributed import init_parallel, join_process_group
    from bert_ds.finetune.starting_point import resolve

    join_process_group()
    start = resolve(job, dist.get_rank())
    layout = init_parallel(start.model_config, job.tensor_parallel, 1, seed=job.seed)
    return start, layout
