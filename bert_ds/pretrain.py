"""Pre-train BERT: `deepspeed bert_ds/pretrain.py ...` (also torchrun, or plain python for one process).

main() reads top to bottom: options -> tokenizer -> launch plan -> held-out data -> parallel layout
-> DeepSpeed engine -> data -> resume -> train (training/loop.py) -> save. Each phase is a function below; `python
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

from bert_ds.checkpoint import zero as checkpoints  # noqa: E402
from bert_ds.config import ConfigError  # noqa: E402
from bert_ds.data.sources import DataError  # noqa: E402
from bert_ds.data.tokenizer import TokenizerError  # noqa: E402
from bert_ds.launcher import discover  # noqa: E402
from bert_ds.training.args import RunConfig, parse_args  # noqa: E402

from bert_ds.training.health import TrainingDiverged  # noqa: E402
from bert_ds.training.loop import EXIT_CODE_FOR_SIGNAL, TrainState, train  # noqa: E402

USER_ERRORS = (ConfigError, DataError, TokenizerError, checkpoints.CheckpointError)
EXIT_DIVERGED = 3  # non-finite steps: stopped without saving, the last checkpoint is the good state


def setup_tokenizer(run: RunConfig):
    from bert_ds.training.tokenizer_setup import resolve_tokenizer

    return resolve_tokenizer(run)


def setup_parallel(run: RunConfig, tokenizer):
    """Model config (vocab from the tokenizer, padded) and the process layout."""
    import deepspeed

    from bert_ds.config import padded_vocab_size
    from bert_ds.distributed import backend, init_parallel

    vocab = padded_vocab_size(tokenizer.vocab_size)
    model_config = run.model_config(vocab)
    layout = init_parallel(model_config, run.tensor_parallel, run.pipeline_parallel, seed=run.seed)
    deepspeed.init_distributed(dist_backend=backend())  # adopts the process group just made
    return model_config, layout


def setup_engine(run: RunConfig, model_config, layout, ds_config: dict | None = None):
    """The model (plain or pipelined), optimizer, LR schedule and DeepSpeed engine; `ds_config`
    is the launch plan's (built here when a caller has no plan: tests, benchmarks)."""
    import deepspeed

    from bert_ds.distributed import DeepSpeedMPU
    from bert_ds.host_memory import tune_malloc_for_training
    from bert_ds.training.ds_config import optimizer_offloaded, pretraining_deepspeed_config, skip_single_replica_allreduce, zero_stage
    from bert_ds.training.optim import build_optimizer, build_scheduler, share_clip_norm

    notes = []
    if ds_config is None:
        from bert_ds.training.plan import pretraining_batch_plan

        batch = pretraining_batch_plan(run, model_config, layout.data_parallel)
        ds_config, notes, _ = pretraining_deepspeed_config(run, batch, layout.device.type)
    with_nsp = run.objective == "mlm_nsp"
    if layout.pipeline_parallel > 1:
        from bert_ds.model.pipeline import build_pipeline_model

        model, mpu = build_pipeline_model(model_config, layout, with_nsp=with_nsp), None
    else:
        from bert_ds.model import build_pretraining_model

        model, mpu = build_pretraining_model(model_config, layout, with_nsp=with_nsp), DeepSpeedMPU(layout)
        if zero_stage(ds_config) == 3:
            # The MLM decoder reads the word-embedding matrix outside the embedding's own forward.
            deepspeed.zero.register_external_parameter(model.lm_head, model.bert.embeddings.word_embeddings.weight)
    optimizer = build_optimizer(run, model, layout.device.type, optimizer_offloaded(ds_config), zero_stage(ds_config))
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=build_scheduler(run), config=ds_config, mpu=mpu
    )
    skip_single_replica_allreduce(engine, layout.data_parallel)
    share_clip_norm(engine)
    # CPU steps stop page-faulting big buffers
    tune_malloc_for_training(layout.device.type, zero_stage(ds_config), layout.data_parallel)
    return engine, model, notes


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


def evaluate_once(run: RunConfig, engine, model, layout, state: TrainState, eval_set, logger) -> None:
    """--eval-only: score the loaded weights once and log it at the checkpoint's step."""
    from bert_ds.training.evaluation import evaluate

    result = evaluate(engine, model, eval_set, layout)
    logger.log_eval(result.record(state))


def say(layout, text: str) -> None:
    """A console line from rank 0 only."""
    if layout.rank == 0:
        print(text, flush=True)


def resume(run: RunConfig, engine, model, loader, layout, model_config) -> TrainState:
    """Restore everything from the latest complete checkpoint (any layout), or start fresh."""
    from bert_ds.training import checkpointing

    resumed = checkpointing.resume(run, engine, model, loader, layout, model_config)
    if resumed.message:
        say(layout, resumed.message)
    return TrainState(**resumed.progress) if resumed.progress else TrainState()


@dataclasses.dataclass
class PretrainingRun:
    """What a finished run leaves for in-process callers (the demo, evaluation)."""

    engine: object
    model: object
    tokenizer: object
    layout: object
    model_config: object
    state: TrainState


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
    from bert_ds.training.metrics import MetricsLogger

    tokenizer = setup_tokenizer(run)
    plan = plan_launch(run, tokenizer)
    run = plan.run  # every `auto` resolved
    eval_examples = read_evaluation_data(run, tokenizer)
    model_config, layout = setup_parallel(run, tokenizer)
    engine, model, _ = setup_engine(run, model_config, layout, plan.ds_config)
    loader = setup_data(run, tokenizer, layout)
    eval_set = setup_evaluation(run, tokenizer, layout, eval_examples)
    if run.save and not run.eval_only:
        checkpoints.prepare_save_dir(run.save, tokenizer)  # an unwritable --save fails here, not hours later
    state = resume(run, engine, model, loader, layout, model_config)
    logger = MetricsLogger(
        total_steps=run.train_steps, metrics_file=run.metrics_file, tensorboard_dir=run.tensorboard_dir,
        enabled=layout.rank == 0, start_step=state.step,
    )
    try:
        if run.eval_only:
            evaluate_once(run, engine, model, layout, state, eval_set, logger)
        else:
            evaluation = None
            if eval_set is not None:
                from bert_ds.training.eval_loop import HeldOutEvaluation

                evaluation = HeldOutEvaluation(run, eval_set, logger)
            train(run, engine, model, loader, layout, model_config, state, logger, evaluation)
    finally:
        logger.close()
    return PretrainingRun(engine, model, tokenizer, layout, model_config, state)


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
        return EXIT_CODE_FOR_SIGNAL.get(finished.state.stopped_by, 0)
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
