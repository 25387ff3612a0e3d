"""What a fine-tuning job leaves in --output: results.json and the selected model.

results.json:
    task       the task name
    metrics    official metric name -> dev value of the selected run
    selected   its hyper-parameters (batch_size, lr, epochs) and seed
    runs       how many runs the selection looked at (grid settings x restarts)
    selection_budget   the same as numbers: settings, restarts per setting, runs
    restarts   the selected setting over its restarts: scores, mean, std
    all_runs   every run: settings, dev score, per-epoch history
    test_metrics  the selected run on a test set with gold targets (NER), if the task scores one
The selected model (OUTPUT/model, portable; `python -m bert_ds.checkpoint export-hf` turns it
into the matching Hugging Face task class) is replaced whenever a run beats the best so far.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from bert_ds.config import POOLED_KINDS

MODEL_SUBDIR = "model"
RESULTS = "results.json"


def _finite(value):
    """JSON has no NaN/inf: write them as strings so they stay visible (null would hide them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json(path: Path, value) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(_finite(value), indent=1))
    temporary.replace(path)


class ModelKeeper:
    """Keeps the weights of the best run so far (the runs' dev scores decide)."""

    def __init__(self, job, task, start, layout):
        self.job, self.task, self.start, self.layout = job, task, start, layout
        self.best = -math.inf

    def offer(self, result, engine, model) -> None:
        if not self.job.outputs.save_model or not result.score > self.best:
            return
        self.best = result.score
        weights = full_fp32_weights(model, self.layout, engine)
        if self.layout.rank == 0:
            from bert_ds.checkpoint.portable import write_portable

            out = Path(self.job.start.output) / MODEL_SUBDIR
            write_portable(
                out, self.start.model_config, weights, tokenizer=self.start.tokenizer,
                source=f"finetuned:{self.task.name}",
                task=dict(self.task.export_task, bilstm=True) if self.job.head.bilstm else self.task.export_task,
                training=dict(settings=result.settings.hyperparameters(), seed=result.settings.seed, dev=result.dev_metrics),
            )
        dist.barrier()


def full_fp32_weights(model, layout, engine=None) -> dict[str, torch.Tensor]:
    """Full-size fp32 weights, on every rank: a bf16/fp16 run's fp32 masters (ZeRO's, or without
    ZeRO the 16-bit optimizer wrapper's), else the parameters themselves."""
    from deepspeed.utils import safe_get_full_fp32_param

    from bert_ds.model.sharding import gather_full_tensors
    from bert_ds.checkpoint.engine_state import fp32_masters

    local, unfused = {}, fp32_masters(engine) if engine is not None else {}
    for name, param in model.named_parameters():
        master = unfused.get(id(param)) if id(param) in unfused else safe_get_full_fp32_param(param)
        local[name] = (master if master is not None else param.detach()).float().cpu()
    # gather_full_tensors moves tensors through the process group, which wants them on its device.
    on_device = {name: tensor.to(layout.device) for name, tensor in local.items()}
    return {name: t.cpu() for name, t in gather_full_tensors(model, on_device, layout.tp_group).items()}


def precision_record(job, layout) -> dict:
    """What the runs trained in and why (bert_ds/runtime/precision.py; the deterministic choice the plan printed)."""
    from bert_ds.training.engine.ds_config import configured_precision

    choice = configured_precision(job.parallel.precision, job.parallel.deepspeed_config, layout.device.type)
    return dict(name=choice.name, requested=choice.requested, reason=choice.reason, warning=choice.warning)


def write_results(job, task, results: list, best, layout, precision: dict, causal: bool = False) -> dict:
    """results.json: the selected run, the restarts' spread, the selection budget, `precision`
    (precision_record's) and the head: whether a BiLSTM sits under it and which token a
    sequence is pooled from (a causal model's last real token, model/bert.py pooled_positions)."""
    same_setting = [r for r in results if r.settings.hyperparameters() == best.settings.hyperparameters()]
    scores = [r.score for r in same_setting]
    summary = dict(
        task=task.name,
        metrics=task.flatten(best.dev_metrics),
        selected=dict(best.settings.hyperparameters(), seed=best.settings.seed),
        runs=len(results),
        selection=f"best dev score of {len(results)} run(s): {len(results) // job.grid.restarts} setting(s) x {job.grid.restarts} restart(s)",
        selection_budget=dict(settings=len(results) // job.grid.restarts, restarts=job.grid.restarts, runs=len(results)),
        restarts=dict(scores=scores, mean=float(np.mean(scores)), std=float(np.std(scores)), count=len(scores)),
        init=job.start.init,
        precision=precision,
        head=dict(bilstm=job.head.bilstm, pooling=None if task.kind not in POOLED_KINDS or job.head.bilstm
                  else "last real token (causal model)" if causal else "[CLS]", unpad=job.head.unpad),
        all_runs=[
            dict(settings=r.settings.hyperparameters(), seed=r.settings.seed, score=r.score, history=r.history)
            for r in results
        ],
    )
    if task.score_test is not None:
        scored = {name: task.score_test(name, outputs) for name, outputs in best.test_outputs.items()}
        summary["test_metrics"] = {name: metrics for name, metrics in scored.items() if metrics is not None}
    if layout.rank == 0:
        Path(job.start.output).mkdir(parents=True, exist_ok=True)
        write_json(Path(job.start.output) / RESULTS, summary)
        print(f"{task.name}: selected {summary['selected']} -> {summary['metrics']} "
              f"({summary['selection']}; restarts mean {summary['restarts']['mean']:.4f} ± {summary['restarts']['std']:.4f})",
              flush=True)
    return summary
