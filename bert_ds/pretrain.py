"""Pre-train BERT: `deepspeed bert_ds/pretrain.py ...` (also torchrun, or plain python for one process).

main() reads top to bottom: options -> tokenizer -> launch plan -> held-out data -> parallel layout
-> DeepSpeed engine -> data -> Trainer (training/trainer.py): resume -> train -> save. Each phase is a function below; `python
bert_ds/pretrain.py --help` lists the options. `--dry-run` stops after the plan (training/plan.py):
no process group, no model, no GPU touched.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script (the deepspeed launcher's way): import bert_ds as a package, never its
    # modules as top-level names from this folder.
    _here = Path(__file__).resolve().parent
    sys.path = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from bert_ds.checkpoint import zero  # noqa: E402
from bert_ds.config import ConfigError  # noqa: E402
from bert_ds.data.sources import DataError  # noqa: E402
from bert_ds.data.tokenizer import TokenizerError  # noqa: E402
from bert_ds.launcher import discover  # noqa: E402
from bert_ds.training.args import RunConfig, parse_args  # noqa: E402

from bert_ds.training.health import TrainingDiverged  # noqa: E402
from bert_ds.training.trainer import EXIT_CODE_FOR_SIGNAL, Trainer  # noqa: E402

USER_ERRORS = (ConfigError, DataError, TokenizerError, zero.CheckpointError)
EXIT_DIVERGED = 3  # non-finite steps: stopped without saving, the last checkpoint is the good state


def setup_tokenizer(run: RunConfig):
    from bert_ds.training.tokenizer_setup import resolve_tokenizer

    return resolve_tokenizer(run)


def setup_parallel(run: RunConfig, tokenizer):
    """Model config (vocab from the tokenizer, padded) and the process layout."""
    from bert_ds.config import padded_vocab_size
    from bert_ds.distributed import init_parallel

    model_config = run.model_config(padded_vocab_size(tokenizer.vocab_size))
    layout = init_parallel(model_config, run.tensor_parallel, run.pipeline_parallel, seed=run.seed)
    return model_config, layout


def setup_engine(run: RunConfig, model_config, layout, deepspeed_setup=None):
    """The model (plain or pipelined), its DeepSpeed engine and the DeepSpeedSetup they follow:
    the launch plan's, or built here when a caller has no plan (tests, benchmarks)."""
    from bert_ds.model import build_model
    from bert_ds.training.engine import build_engine

    if deepspeed_setup is None:
        from bert_ds.training.ds_config import pretraining_deepspeed_config
        from bert_ds.training.plan import pretraining_batch_plan

        batch = pretraining_batch_plan(run, model_config, layout.data_parallel)
        deepspeed_setup = pretraining_deepspeed_config(run, batch, layout.device.type)
    pipeline_loss = None
    if layout.pipeline_parallel > 1:
        from bert_ds.training.pipeline_loss import PretrainingLossFn

        pipeline_loss = PretrainingLossFn(layout.tp_group)
    model = build_model(model_config, layout, with_nsp=run.objective == "mlm_nsp", pipeline_loss=pipeline_loss)
    engine = build_engine(model, layout, deepspeed_setup, run.optimizer_settings())
    return engine, model, deepspeed_setup


def setup_data(run: RunConfig, tokenizer, layout):
    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import parse_sources

    return PretrainingLoader(parse_sources(run.data), tokenizer, run.data_config(), layout.dp_rank, layout.data_parallel)


def read_evaluation_data(run: RunConfig, tokenizer):
    """The held-out examples (training/evaluation.py), read before the model is built; None without."""
    if run.eval_data is None:
        return None
    from bert_ds.training.evaluation import load_eval_examples

    start = time.perf_counter()
    examples, note = load_eval_examples(run, tokenizer)
    if discover(os.environ).rank == 0:
        print(f"held-out evaluation set: {len(examples):,} examples of {run.seq_length} tokens from "
              f"{' '.join(run.eval_data)}, built in {time.perf_counter() - start:.1f}s" + (f"; {note}" if note else ""),
              flush=True)
    return examples


def setup_evaluation(run: RunConfig, tokenizer, layout, examples):
    """This rank's micro-batches of the held-out set; None without one."""
    from bert_ds.training.evaluation import build_eval_set

    return None if examples is None else build_eval_set(run, tokenizer, layout, examples)


@dataclasses.dataclass
class PretrainingRun:
    """What a finished run leaves for in-process callers (the demo, evaluation)."""

    trainer: Trainer
    tokenizer: object


def plan_launch(run: RunConfig, tokenizer):
    """The launch plan with the run's own tokenizer; rank 0 prints it (and writes --plan-json) and
    checks the tokenizer against the first documents of every source."""
    from bert_ds.training.plan import resolve_plan, sample_sources
    from bert_ds.training.plan_report import format_pretrain_plan, pretrain_plan_json, write_plan_json

    plan = resolve_plan(run, tokenizer=tokenizer, sample_data=False)
    if discover(os.environ).rank == 0:
        print(format_pretrain_plan(plan), flush=True)
        if run.plan_json:
            write_plan_json(run.plan_json, pretrain_plan_json(plan))
        for sample in sample_sources(plan.run, tokenizer, include_hub=True):
            print(f"data check: {sample.describe()}", flush=True)
            if sample.warning():
                print("\n" + "!" * 100 + f"\n{sample.warning()}\n" + "!" * 100 + "\n", file=sys.stderr, flush=True)
    return plan


def run_pretraining(run: RunConfig) -> PretrainingRun:
    """Every phase of a run, in order; the process group stays up for the caller."""
    tokenizer = setup_tokenizer(run)
    plan = plan_launch(run, tokenizer)
    run = plan.run  # every `auto` resolved
    eval_examples = read_evaluation_data(run, tokenizer)
    model_config, layout = setup_parallel(run, tokenizer)
    engine, model, _ = setup_engine(run, model_config, layout, plan.deepspeed)
    loader = setup_data(run, tokenizer, layout)
    eval_set = setup_evaluation(run, tokenizer, layout, eval_examples)
    if run.save and not run.eval_only:
        zero.prepare_save_dir(run.save, tokenizer)  # an unwritable --save fails here, not hours later
    trainer = Trainer(run, engine, model, loader, layout, model_config, plan.deepspeed.precision)
    trainer.resume()
    with trainer.logging():
        if run.eval_only:
            trainer.evaluate(eval_set)
        else:
            trainer.train(eval_set)
    return PretrainingRun(trainer, tokenizer)


def dry_run(run: RunConfig) -> int:
    """Print the launch plan for `--dry-run`'s device kind and exit 0 (a user error raises)."""
    # `datasets` (which reads the sources' first documents) would import torch for its torch
    # formatter; this process never trains, and without it a plan takes about a second.
    os.environ.setdefault("USE_TORCH", "0")
    from bert_ds.training.plan import resolve_plan
    from bert_ds.training.plan_report import format_pretrain_plan, pretrain_plan_json, write_plan_json

    plan = resolve_plan(run, target=run.dry_run)
    print(format_pretrain_plan(plan), flush=True)
    if run.plan_json:
        write_plan_json(run.plan_json, pretrain_plan_json(plan))
    return 0


def main(argv=None) -> int:
    try:
        run = parse_args(argv)
        if run.dry_run:
            return dry_run(run)  # without torch for --dry-run gpu/cpu: seconds on a login node
        from bert_ds.distributed import teardown_parallel

        finished = run_pretraining(run)
        teardown_parallel()
        return EXIT_CODE_FOR_SIGNAL.get(finished.trainer.state.stopped_by, 0)
    except USER_ERRORS as error:
        return _report(error, 2)
    except TrainingDiverged as error:
        return _report(error, EXIT_DIVERGED)


def _report(error: Exception, code: int) -> int:
    rank = os.environ.get("RANK", "0")
    prefix = f"[rank {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
    print(f"{prefix}error: {error}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
