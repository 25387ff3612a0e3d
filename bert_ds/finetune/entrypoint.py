"""The `main()` every fine-tuning entrypoint shares: options, process group, starting point,
parallel layout, the task's runs, and user errors as one `error:` line (exit 2). With
`--dry-run` it stops after the launch plan (finetune/plan.py): no process group, no weights."""

from __future__ import annotations

import argparse
from typing import Callable

from bert_ds.errors import USER_ERRORS, report
from bert_ds.options import HelpFormatter, refuse_empty_values


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

    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=HelpFormatter)
    add_task_arguments(parser)
    add_common_arguments(parser)
    refuse_empty_values(parser, argv)
    args = parser.parse_args(argv)
    try:
        job = config_from_args(args, default_seq_length)
        if job.plan.dry_run:
            return _dry_run(job, plan_data(args, job))
    except USER_ERRORS as error:
        return report(error)
    try:
        run_tasks(args, job, *_setup(job))
    except USER_ERRORS as error:
        return report(error)
    finally:
        from bert_ds.distributed import teardown_parallel

        teardown_parallel()
    return 0


def _dry_run(job, tasks) -> int:
    from bert_ds.finetune.plan import resolve_finetune_plan
    from bert_ds.training.plan_report import finetune_plan_json, format_finetune_plan, write_plan_json

    plan = resolve_finetune_plan(job, tasks, target=job.plan.dry_run)
    print(format_finetune_plan(plan), flush=True)
    if job.plan.plan_json:
        write_plan_json(job.plan.plan_json, finetune_plan_json(plan))
    return 0


def _setup(job):
    import torch.distributed as dist

    from bert_ds.distributed import init_parallel, join_process_group
    from bert_ds.finetune.starting_point import resolve

    join_process_group()
    start = resolve(job, dist.get_rank())
    job.validate(dist.get_world_size(), start.model_config)  # the dry run's rules: no grid setting fails late
    layout = init_parallel(start.model_config, job.parallel.tensor_parallel, 1, seed=job.recipe.seed)
    return start, layout
