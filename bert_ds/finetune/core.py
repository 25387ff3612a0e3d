"""The fine-tuning core every task shares: model from the starting point, DeepSpeed engine, epochs
with a progress bar, evaluation after each epoch, and selection over grid runs and restarts.

A task file (glue.py, squad.py, swag.py) turns its data into `TaskData`: features (token ids and
targets), how to score dev outputs, how to write predictions. Everything else lives here.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch
import torch.distributed as dist

from bert_ds.finetune.args import FinetuneConfig, HeadOptions, RunSettings, batch_plan
from bert_ds.finetune.batches import collate, outputs_per_feature
from bert_ds.model.heads import TaskKind, finetuning_loss
from bert_ds.training.loop.watchdog import watching


@dataclass
class TaskData:
    """A task's features and its task-specific pieces, built by the task file."""

    name: str
    kind: TaskKind
    train: list[dict]
    dev: dict[str, list[dict]]
    """Dev set name -> features with targets (MNLI has two)."""
    evaluate: Callable[[str, list], tuple[dict, object]]
    """(dev set name, one output per feature) -> (metrics, predictions to write)."""
    select: Callable[[dict], float]
    """{dev set name: metrics} -> the score the best run maximises."""
    flatten: Callable[[dict], dict]
    """{dev set name: metrics} -> results.json "metrics" (official metric names)."""
    write_outputs: Callable[..., None]
    """(output folder, {dev set: predictions}, {test set: outputs}) -> prediction files."""
    num_labels: int = 2
    regression: bool = False
    test: dict[str, list[dict]] = field(default_factory=dict)
    export_task: dict = field(default_factory=dict)
    """The `task` entry of the saved model's manifest (see checkpoint/hf_export.py)."""
    score_test: Optional[Callable[[str, list], Optional[dict]]] = None
    """(test set name, outputs) -> its metrics where the test set has gold targets (CoNLL-2003),
    else None; results.json reports the selected run's under "test_metrics"."""


@dataclass
class RunResult:
    settings: RunSettings
    dev_metrics: dict
    history: list[dict]
    dev_predictions: dict
    test_outputs: dict
    score: float


def build_model(start, task: TaskData, layout, seed: int, head: HeadOptions, deepspeed_config: dict | None = None):
    """The encoder with --init's weights (or BERT's init) and a fresh head (with `head.bilstm`, a
    BiLSTM under it) drawn from `seed`, unpadded unless `head.unpad` is off; built partitioned
    when `deepspeed_config` enables ZeRO-3."""
    from bert_ds.checkpoint.portable_load import load_portable_weights
    from bert_ds.model import build_model as build_layout_model
    from bert_ds.training.engine.build import model_construction

    model = build_layout_model(start.model_config, layout, task.kind, num_labels=task.num_labels, seed=seed, bilstm=head.bilstm,
                               unpad=head.unpad,
                               construction=model_construction(deepspeed_config, layout))
    if start.checkpoint is not None:
        load_portable_weights(
            model, start.checkpoint, layout.tp_rank, layout.tensor_parallel,
            allow_missing=("classifier.", "qa_outputs.", "bert.pooler.", "bilstm."),
        )
    return model


def sequences_per_example(task: TaskData) -> int:
    """Sequences one training example becomes (multiple choice: one per choice)."""
    return len(task.train[0]["input_ids"]) if task.kind == "multiple_choice" and task.train else 1


def _model_and_engine(job: FinetuneConfig, settings: RunSettings, start, task: TaskData, layout, total_steps: int):
    """The model for this run and its DeepSpeed engine, with the batch plan and the config's notes."""
    from bert_ds.runtime.host_memory import tune_malloc_for_partitioning
    from bert_ds.training.engine.build import build_engine

    plan = batch_plan(job, settings, layout.data_parallel, start.model_config, sequences_per_example(task))
    deepspeed_setup = job.parallel.deepspeed_setup(plan, layout.device.type, job.recipe.clip_grad)
    tune_malloc_for_partitioning(layout.device.type, deepspeed_setup.zero_stage, layout.data_parallel)
    model = build_model(start, task, layout, settings.seed, job.head, deepspeed_setup.config)
    optimizer = job.recipe.optimizer_settings(settings.lr, max(1, int(job.recipe.warmup_proportion * total_steps)), total_steps)
    return model, build_engine(model, layout, deepspeed_setup, optimizer), plan, deepspeed_setup.notes


def _epoch_order(n: int, steps: int, batch: int, seed: int, epoch: int) -> list[int]:
    """A seeded permutation, wrapped around so every step has a full global batch."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1009 + epoch)).tolist()
    return (order * math.ceil(steps * batch / n))[: steps * batch]


def train_micro_batch(engine, features: list[dict], kind: TaskKind, regression: bool, pad_id: int, device) -> float:
    """One micro batch: padded to its longest feature (collate), forward, loss, backward, and the
    engine's step (an optimizer step at the accumulation boundary); returns the loss."""
    batch = {k: v.to(device) for k, v in collate(features, kind, pad_id).items()}
    with watching().phase("step", "fine-tuning: forward, backward and the optimizer step (the gradient all-reduce)"):
        logits = engine(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        loss = finetuning_loss(kind, logits, batch, regression)
        engine.backward(loss)
        engine.step()
        return float(loss.detach())


def train_epoch(engine, plan, task: TaskData, layout, pad_id: int, order: list[int], progress) -> float:
    per_rank = plan.global_batch_size // layout.data_parallel
    losses = []
    engine.train()
    for start in range(0, len(order), plan.global_batch_size):
        began = time.perf_counter()
        mine = order[start + layout.dp_rank * per_rank: start + (layout.dp_rank + 1) * per_rank]
        for first in range(0, per_rank, plan.micro_batch_size):
            features = [task.train[i] for i in mine[first: first + plan.micro_batch_size]]
            losses.append(train_micro_batch(engine, features, task.kind, task.regression, pad_id, layout.device))
        watching().step_done(None, time.perf_counter() - began)  # counted over epochs and runs
        progress.update(1)
        # refresh=False: the bar is redrawn at its own interval (every 30 s into a log file), not per step.
        progress.set_postfix(loss=f"{np.mean(losses[-10:]):.4f}", refresh=False)
    # Every rank saw its own part of each batch: report the mean over all of them.
    total = torch.tensor([sum(losses), len(losses)], dtype=torch.float64, device=layout.device)
    dist.all_reduce(total, group=layout.dp_group)
    return float(total[0] / total[1])


@torch.no_grad()
def predict(engine, features: list[dict], task: TaskData, layout, pad_id: int, batch_size: int) -> list:
    """One output per feature (logits as numpy), computed by the DP ranks in turn and gathered.

    Every rank runs the same number of forwards (a ZeRO-3 forward gathers each layer's weights
    from all of them): one left without features of its own repeats the first and drops it."""
    engine.eval()
    watchdog = watching()
    mine = list(range(layout.dp_rank, len(features), layout.data_parallel))
    most = math.ceil(len(features) / layout.data_parallel)
    outputs = []
    for first in range(0, most, batch_size):
        chunk = [features[i] for i in mine[first: first + batch_size]]
        batch = {k: v.to(layout.device) for k, v in collate(chunk or features[:1], task.kind, pad_id).items()}
        with watchdog.phase("evaluation", "fine-tuning: the dev/test predictions"):
            logits = engine(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        if chunk:
            outputs += outputs_per_feature(task.kind, logits, batch["attention_mask"])
    gathered = [None] * layout.world_size
    dist.all_gather_object(gathered, (layout.dp_rank, layout.tp_rank, outputs))
    by_dp = {dp: out for dp, tp, out in gathered if tp == 0}
    merged = [None] * len(features)
    for dp, out in by_dp.items():
        merged[dp::layout.data_parallel] = out
    return merged


def run_once(job: FinetuneConfig, task: TaskData, start, layout, settings: RunSettings, keep) -> RunResult:
    """Train one setting with one seed; evaluate after every epoch."""
    from tqdm import tqdm

    from bert_ds.runtime.distributed import reseed

    reseed(layout, settings.seed, 0)  # dropout streams of this run
    steps = math.ceil(len(task.train) / settings.batch_size)
    with watching().phase("startup", "fine-tuning: building the model and its DeepSpeed engine"):
        model, engine, plan, notes = _model_and_engine(job, settings, start, task, layout, steps * settings.epochs)
    for note in notes:
        layout.say(note)
    pad_id = start.tokenizer.pad_id
    history = []
    for epoch in range(settings.epochs):
        began = time.perf_counter()
        order = _epoch_order(len(task.train), steps, settings.batch_size, settings.seed, epoch)
        # In a log file (not a terminal) a bar redrawn every 0.1 s would flood it: every 30 s there.
        interval = 0.1 if sys.stderr.isatty() else 30.0
        with tqdm(total=steps, desc=f"epoch {epoch + 1}/{settings.epochs}", disable=layout.rank != 0, leave=False,
                  mininterval=interval) as bar:
            train_loss = train_epoch(engine, plan, task, layout, pad_id, order, bar)
        dev_metrics, dev_predictions = {}, {}
        for name, features in task.dev.items():
            outputs = predict(engine, features, task, layout, pad_id, job.outputs.eval_batch_size)
            dev_metrics[name], dev_predictions[name] = task.evaluate(name, outputs)
        history.append(dict(epoch=epoch + 1, train_loss=train_loss, dev=dev_metrics, seconds=time.perf_counter() - began))
        shown = "; ".join(f"{n} " + ", ".join(f"{k} {v:.4f}" for k, v in m.items() if isinstance(v, float)) for n, m in dev_metrics.items())
        layout.say(f"epoch {epoch + 1}/{settings.epochs} | train loss {train_loss:.4f} | dev {shown} | {history[-1]['seconds']:.0f}s")
    test_outputs = {name: predict(engine, features, task, layout, pad_id, job.outputs.eval_batch_size) for name, features in task.test.items()}
    result = RunResult(settings, dev_metrics, history, dev_predictions, test_outputs, task.select(dev_metrics))
    keep(result, engine, model)
    del engine, model
    gc.collect()
    return result


def run_job(job: FinetuneConfig, task: TaskData, start, layout) -> dict:
    """Every setting x restart; the best on dev is kept (results, predictions, model)."""
    from bert_ds.finetune.outputs import ModelKeeper, precision_record, write_results

    settings = job.settings()
    limit = job.recipe.max_train_examples
    if limit is not None and limit < len(task.train):
        layout.say(f"{task.name}: --max-train-examples {limit}: training on the first {limit} of {len(task.train)} features")
        task = dataclasses.replace(task, train=task.train[:limit])
    layout.say(f"{task.name}: {len(task.train)} training features, "
        + ", ".join(f"{n} {len(f)}" for n, f in {**task.dev, **task.test}.items())
        + f"; {len(settings)} run(s); starting from {start.description}")
    precision = precision_record(job, layout)
    # A slow choice's warning comes with each run's engine notes.
    layout.say(f"precision: {precision['name']} on {'CPU' if layout.device.type == 'cpu' else 'GPU'}: {precision['reason']}")
    keeper = ModelKeeper(job, task, start, layout)
    results = []
    for index, run in enumerate(settings):
        layout.say(f"run {index + 1}/{len(settings)}: batch {run.batch_size}, lr {run.lr:g}, epochs {run.epochs}, seed {run.seed}")
        results.append(run_once(job, task, start, layout, run, keeper.offer))
    best = max(results, key=lambda r: r.score)
    summary = write_results(job, task, results, best, layout, precision, start.model_config.causal)
    if layout.rank == 0:
        task.write_outputs(job.start.output, best.dev_predictions, best.test_outputs)
    dist.barrier()
    return summary

