"""Pre-train BERT: `deepspeed bert_ds/pretrain.py ...` (also torchrun, or plain python for one process).

main(): options (training/config/args.py) -> the job's phases (training/job.py: tokenizer -> launch plan
-> held-out data -> parallel layout -> model and engine -> data -> Trainer: resume -> train ->
save). `python bert_ds/pretrain.py --help` lists the options. `--dry-run` stops after the plan
(training/plan/resolve.py): no process group, no model, no GPU touched, and torch is never imported.
"""

from __future__ import annotations

import os
import sys


from bert_ds.errors import USER_ERRORS, PeerLost, first_line, lost_peer, report
from bert_ds.training.config.args import RunConfig, parse_args
from bert_ds.training.loop.health import TrainingDiverged

EXIT_DIVERGED = 3  # non-finite steps: stopped without saving, the last checkpoint is the good state
EXIT_PEER_LOST = 4  # another rank or node died mid-run: the latest complete checkpoint is intact


def dry_run(run: RunConfig) -> int:
    """Print the launch plan for `--dry-run`'s device kind and exit 0 (a user error raises)."""
    # `datasets` (which reads the sources' first documents) would import torch for its torch
    # formatter; this process never trains, and without it a plan takes about a second.
    os.environ.setdefault("USE_TORCH", "0")
    from bert_ds.training.plan.resolve import resolve_plan
    from bert_ds.training.plan.report import format_pretrain_plan, pretrain_plan_json, write_plan_json

    plan = resolve_plan(run, target=run.plan.dry_run)
    print(format_pretrain_plan(plan), flush=True)
    if run.plan.plan_json:
        write_plan_json(run.plan.plan_json, pretrain_plan_json(plan))
    return 0


def peer_lost(run: RunConfig, error: BaseException) -> PeerLost:
    """The one-line error of a rank whose collective failed because another process is gone."""
    where = "nothing is saved (no --save)"
    if run.checkpoint.save:
        from bert_ds.checkpoint.zero import latest_complete_tag

        tag = latest_complete_tag(run.checkpoint.save)
        where = (f"the latest complete checkpoint is {os.path.join(run.checkpoint.save, tag)}: resubmit with the same "
                 "--save and --auto-resume to continue from it" if tag else f"{run.checkpoint.save} holds no complete "
                 "checkpoint yet")
    cause = first_line(error).split(". ")[0]  # gloo's first sentence names the peer; the rest is advice
    return PeerLost(f"lost contact with another process of this job ({cause}); a rank or its node died or "
                    f"the network failed, and the other ranks stop rather than wait; {where}.")


def main(argv=None) -> int:
    run = None
    try:
        run = parse_args(argv)
        if run.plan.dry_run:
            return dry_run(run)  # without torch for --dry-run gpu/cpu: seconds on a login node
        from bert_ds.training.plan.prepare import prepare

        prepared = prepare(run)  # tokenizer and plan: a user error ends the run here, before DeepSpeed loads
        from bert_ds.runtime.distributed import teardown_parallel
        from bert_ds.training.job import run_pretraining

        finished = run_pretraining(run, prepared)
        teardown_parallel()
        return finished.exit_code
    except USER_ERRORS as error:
        return report(error, 2)
    except TrainingDiverged as error:
        return report(error, EXIT_DIVERGED)
    except RuntimeError as error:
        if run is None or not lost_peer(error):
            raise
        return report(peer_lost(run, error), EXIT_PEER_LOST)


if __name__ == "__main__":
    sys.exit(main())
