"""The phases of one pre-training job, in order (bert_ds/pretrain.py runs them; the demo and the
benchmarks call them in-process): tokenizer -> launch plan (training/plan/prepare.py, before DeepSpeed) ->
held-out data -> parallel layout -> model and DeepSpeed engine -> data -> Trainer
(training/loop/trainer.py): resume -> train -> save.

pretrain.py imports this module only once the plan stands: it brings torch, DeepSpeed and
megatron, and a `--dry-run` on a login node, or a run with a wrong option, stays free of them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Optional

from bert_ds.checkpoint import zero
from bert_ds.data.loader import PretrainingLoader
from bert_ds.data.sources import parse_sources
from bert_ds.runtime.distributed import init_parallel
from bert_ds.runtime.launcher import discover
from bert_ds.runtime.host_memory import tune_malloc_for_partitioning
from bert_ds.model import build_model
from bert_ds.training.config.args import RunConfig
from bert_ds.training.engine.build import build_engine, model_construction
from bert_ds.training.evaluation import build_eval_set, load_eval_examples
from bert_ds.training.engine.pipeline_loss import PretrainingLossFn
from bert_ds.training.plan.resolve import pretraining_batch_plan
from bert_ds.training.plan.prepare import Prepared, prepare
from bert_ds.training.loop.trainer import EXIT_CODE_FOR_SIGNAL, Trainer
from bert_ds.training.loop.watchdog import Watchdog, watch


def setup_parallel(run: RunConfig, model_config):
    """The process layout for `model_config` (the plan's, or plan/resolve.py run_model_config's)."""
    return init_parallel(model_config, run.parallel.tensor_parallel, run.parallel.pipeline_parallel, seed=run.data.seed,
                         timeout_s=run.parallel.collective_timeout)


def setup_engine(run: RunConfig, model_config, layout, deepspeed_setup=None):
    """The model (plain or pipelined), its DeepSpeed engine and the DeepSpeedSetup they follow:
    the launch plan's, or built here when a caller has no plan (tests, benchmarks)."""
    if deepspeed_setup is None:
        batch = pretraining_batch_plan(run, model_config, layout.data_parallel)
        deepspeed_setup = run.deepspeed_setup(batch, layout.device.type)
    pipeline_loss = None
    if layout.pipeline_parallel > 1:
        pipeline_loss = PretrainingLossFn(layout.tp_group)
    tune_malloc_for_partitioning(layout.device.type, deepspeed_setup.zero_stage, layout.data_parallel)
    model = build_model(model_config, layout, with_nsp=run.data.objective == "mlm_nsp", pipeline_loss=pipeline_loss,
                        construction=model_construction(deepspeed_setup.config, layout))
    engine = build_engine(model, layout, deepspeed_setup, run.optim.settings())
    return engine, model, deepspeed_setup


def setup_data(run: RunConfig, tokenizer, layout):
    """This rank's shard of the pre-training stream (data/loader.py). --num-workers is the plan's;
    a caller without a plan (benchmarks) gets `auto`'s choice for a fresh start."""
    from bert_ds.runtime.device import is_gpu, pins_host_memory
    from bert_ds.training.plan.resolve import loader_workers

    if run.data.num_workers is None:
        run = run.with_num_workers(loader_workers(None, "gpu" if is_gpu(layout.device.type) else "cpu", layout.data_parallel)[0])
    return PretrainingLoader(parse_sources(run.data.sources), tokenizer, run.data_config(), layout.dp_rank, layout.data_parallel,
                             pin_memory=pins_host_memory(layout.device))


def read_evaluation_data(run: RunConfig, tokenizer):
    """The held-out examples (training/evaluation.py), read before the model is built; None without."""
    if run.eval.eval_data is None:
        return None
    start = time.perf_counter()
    examples, note = load_eval_examples(run, tokenizer)
    if discover(os.environ).rank == 0:
        print(f"held-out evaluation set: {len(examples):,} examples of {run.data.seq_length} tokens from "
              f"{' '.join(run.eval.eval_data)}, built in {time.perf_counter() - start:.1f}s" + (f"; {note}" if note else ""),
              flush=True)
    return examples


def setup_evaluation(run: RunConfig, tokenizer, layout, examples):
    """This rank's micro-batches of the held-out set; None without one."""
    return None if examples is None else build_eval_set(run, tokenizer, layout, examples)


@dataclasses.dataclass
class PretrainingRun:
    """What a finished run leaves for in-process callers (the demo, evaluation)."""

    trainer: Trainer
    tokenizer: object

    @property
    def exit_code(self) -> int:
        """0, or the code of the signal that stopped it after its checkpoint (training/loop/trainer.py)."""
        return EXIT_CODE_FOR_SIGNAL.get(self.trainer.state.stopped_by, 0)


def run_pretraining(run: RunConfig, prepared: Optional[Prepared] = None) -> PretrainingRun:
    """Every phase of a run, in order, after training/plan/prepare.py's (run here unless `prepared`);
    the process group stays up for the caller."""
    prepared = prepared or prepare(run)
    tokenizer, plan = prepared.tokenizer, prepared.plan
    run = plan.run  # every `auto` resolved
    eval_examples = read_evaluation_data(run, tokenizer)
    model_config = plan.model_config
    layout = setup_parallel(run, model_config)
    with watch(start_watchdog(run, layout)) as watchdog:
        with watchdog.phase("startup", "start-up: building the model and its DeepSpeed engine"):
            engine, model, _ = setup_engine(run, model_config, layout, plan.deepspeed)
        with watchdog.phase("startup", "start-up: opening the training and held-out data"):
            loader = setup_data(run, tokenizer, layout)
            eval_set = setup_evaluation(run, tokenizer, layout, eval_examples)
        if run.checkpoint.save and not run.eval.eval_only:
            zero.prepare_save_dir(run.checkpoint.save, tokenizer)  # an unwritable --save fails here, not hours later
        trainer = Trainer(run, engine, model, loader, layout, model_config, plan.deepspeed.precision)
        with watchdog.phase("startup", "start-up: loading the checkpoint"):
            trainer.resume()
        with trainer.logging():
            if run.eval.eval_only:
                trainer.evaluate(eval_set)
            else:
                with watchdog.phase("step", "the training loop: logging and bookkeeping between steps"):
                    trainer.train(eval_set)
    return PretrainingRun(trainer, tokenizer)


def start_watchdog(run: RunConfig, layout) -> Watchdog:
    """This rank's watchdog (training/loop/watchdog.py); its hang reports go to SAVE/hang/."""
    hang_dir = os.path.join(run.checkpoint.save, "hang") if run.checkpoint.save else None
    return Watchdog(run.parallel.watchdog_limits(), layout.rank, layout.world_size, hang_dir)
