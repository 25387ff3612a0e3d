"""The first phases of a pre-training job, before DeepSpeed and megatron are imported: the tokenizer
and the launch plan (rank 0 prints it, writes --plan-json and checks the tokenizer against the first
documents of every source). torch alone is imported, to find the device. A wrong option, layout,
batch or data file ends the job here, in a few seconds, instead of after DeepSpeed and megatron
have loaded; training/job.py runs the rest.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from bert_ds.runtime.launcher import discover
from bert_ds.training.config.args import RunConfig
from bert_ds.training.plan.resolve import resolve_plan, sample_sources
from bert_ds.training.plan.report import format_pretrain_plan, pretrain_plan_json, write_plan_json
from bert_ds.training.plan.tokenizer import resolve_tokenizer


@dataclass
class Prepared:
    """What the torch-free phases hand to the rest of the job."""

    tokenizer: object
    plan: object
    """training/plan/resolve.py LaunchPlan: its `run` has every `auto` resolved."""


def plan_launch(run: RunConfig, tokenizer):
    """The launch plan with the run's own tokenizer; rank 0 prints it (and writes --plan-json) and
    checks the tokenizer against the first documents of every source."""
    plan = resolve_plan(run, tokenizer=tokenizer, sample_data=False)
    if discover(os.environ).rank == 0:
        print(format_pretrain_plan(plan), flush=True)
        if run.plan.plan_json:
            write_plan_json(run.plan.plan_json, pretrain_plan_json(plan))
        for sample in sample_sources(plan.run, tokenizer, include_hub=True):
            print(f"data check: {sample.describe()}", flush=True)
            if sample.warning():
                print("\n" + "!" * 100 + f"\n{sample.warning()}\n" + "!" * 100 + "\n", file=sys.stderr, flush=True)
    return plan


def prepare(run: RunConfig) -> Prepared:
    """Tokenizer, then launch plan: every user error a run can have before it starts."""
    tokenizer = resolve_tokenizer(run)
    return Prepared(tokenizer, plan_launch(run, tokenizer))
