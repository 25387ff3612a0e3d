"""One optimizer step of pre-training, with or without pipeline stages, and its metrics.

Both paths return the same `StepResult`: sums over this rank's micro-batches that
`reduce_step_results` turns into global means (over data-parallel ranks; with pipelines the
last stage, which holds the losses, sends them to the logging rank).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterator

import torch
import torch.distributed as dist

from bert_ds.model.loss import pretraining_loss
from bert_ds.runtime.device import to_device


@dataclass
class StepResult:
    """Sums over micro-batches (divide by `micro_batches` for means)."""

    loss: float = 0.0
    mlm_loss: float = 0.0
    nsp_loss: float = 0.0
    mlm_accuracy: float = 0.0
    nsp_accuracy: float = 0.0
    micro_batches: float = 0.0
    samples: float = 0.0
    tokens: float = 0.0
    predicted_tokens: float = 0.0
    has_nsp: float = 0.0

    def add(self, other: "StepResult") -> "StepResult":
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def as_tensor(self) -> torch.Tensor:
        return torch.tensor([getattr(self, f.name) for f in fields(self)], dtype=torch.float64)

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> "StepResult":
        return cls(*values.tolist())


def _count(batch: dict) -> StepResult:
    return StepResult(
        samples=float(batch["input_ids"].shape[0]),
        tokens=float(batch["attention_mask"].sum()),
        predicted_tokens=float(batch["loss_mask"].sum()),
    )


def plain_step(engine, batches: Iterator[dict], accumulation: int, layout, poison: bool = False) -> StepResult:
    """`accumulation` micro-batches of forward/backward, then one optimizer step on this rank of
    `layout`. `poison` makes the loss NaN (training/loop/faults.py: the injected-divergence test)."""
    result = StepResult()
    for _ in range(accumulation):
        batch = to_device(next(batches), layout.device)
        loss_mask = batch["loss_mask"]
        out = engine(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], loss_mask)
        losses = pretraining_loss(
            out.mlm_logits, batch["labels"][loss_mask], out.nsp_logits, batch.get("next_sentence_label"), tp_group=layout.tp_group
        )
        if poison:
            losses.loss = losses.loss * float("nan")
        engine.backward(losses.loss)  # DeepSpeed divides by the accumulation steps
        engine.step()  # applies the update only at the accumulation boundary
        micro = _count(batch)
        micro.loss, micro.mlm_loss = losses.loss.item(), losses.mlm_loss.item()
        micro.mlm_accuracy, micro.micro_batches = losses.mlm_accuracy.item(), 1.0
        if losses.nsp_loss is not None:
            micro.nsp_loss, micro.nsp_accuracy = losses.nsp_loss.item(), losses.nsp_accuracy.item()
            micro.has_nsp = 1.0
        result.add(micro)
    return result


def pipeline_step(engine, batches: Iterator[dict], accumulation: int, device: torch.device, pipe_model) -> StepResult:
    """One DeepSpeed pipeline `train_batch` over `accumulation` micro-batches."""
    from bert_ds.training.engine.pipeline_loss import last_stage_metrics, pipeline_batch

    counted = StepResult()

    def feed():
        for _ in range(accumulation):
            batch = to_device(next(batches), device)
            counted.add(_count(batch))
            yield pipeline_batch(batch)

    needs_data = engine.is_first_stage() or engine.is_last_stage()
    engine.train_batch(data_iter=feed() if needs_data else None)
    metrics = last_stage_metrics(pipe_model)
    if metrics is None:
        return counted
    counted.micro_batches = float(accumulation)
    for name in ("loss", "mlm_loss", "mlm_accuracy"):
        setattr(counted, name, metrics[name] * accumulation)
    if metrics.get("nsp_loss") is not None:
        counted.nsp_loss = metrics["nsp_loss"] * accumulation
        counted.nsp_accuracy = metrics["nsp_accuracy"] * accumulation
        counted.has_nsp = float(accumulation)
    return counted


def reduce_step_results(result: StepResult, layout, pipeline: bool) -> StepResult:
    """Collective: sums over data-parallel ranks, on every rank (so every rank's counters agree).

    Without pipelines every rank holds losses, and TP ranks hold equal ones, so the DP sum suffices.
    With pipelines only the last stage holds them: it broadcasts the DP sums over its pipeline group.
    """
    values = result.as_tensor().to(layout.device)
    dist.all_reduce(values, group=layout.dp_group)
    if pipeline and layout.pipeline_parallel > 1:
        last_stage = dist.get_global_rank(layout.pp_group, layout.pipeline_parallel - 1)
        dist.broadcast(values, src=last_stage, group=layout.pp_group)
    return StepResult.from_tensor(values.cpu())
