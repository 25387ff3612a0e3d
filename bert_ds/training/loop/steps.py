"""One optimizer step of pre-training, with or without pipeline stages, and its metrics.

Both paths return the same `StepResult`: sums over this rank's micro-batches that
`reduce_step_results` turns into global means (over data-parallel ranks; with pipelines the
last stage, which holds the losses, sends them to the logging rank).

The device is never read back inside a step: what the step must know about a batch (its token
counts, which positions are predicted, whether it has padding) is read from the loader's host
copy before it moves, and the losses stay on the device as sums that the trainer reads once per
logging window. On a GPU each such read would stall the host until the device drained its queue.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields
from typing import Iterator, Union

import numpy as np
import torch
import torch.distributed as dist

from bert_ds.model.loss import pretraining_loss
from bert_ds.model.selection import padded_selection
from bert_ds.runtime.device import to_device
from bert_ds.training.loop import faults
from bert_ds.training.loop.rank_times import RankTimes
from bert_ds.training.loop.watchdog import watching

Number = Union[float, torch.Tensor]


@dataclass
class StepResult:
    """Sums over micro-batches (divide by `micro_batches` for means). Fields are floats or, for the
    losses of a plain step, 0-d tensors still on the device (`reduce_step_results` reads them)."""

    loss: Number = 0.0
    mlm_loss: Number = 0.0
    nsp_loss: Number = 0.0
    mlm_accuracy: Number = 0.0
    nsp_accuracy: Number = 0.0
    micro_batches: float = 0.0
    samples: float = 0.0
    tokens: float = 0.0
    predicted_tokens: float = 0.0
    has_nsp: float = 0.0

    def add(self, other: "StepResult") -> "StepResult":
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def as_tensor(self, device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        """float64 [fields] on `device`, without reading any device value on the host."""
        return torch.stack([
            torch.as_tensor(getattr(self, f.name)).detach().to(device=device, dtype=torch.float64) for f in fields(self)
        ])

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> "StepResult":
        return cls(*values.tolist())


def _sum_term(value: torch.Tensor) -> torch.Tensor:
    return value.detach().to(torch.float64)


def _host_array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.numpy() if tensor.device.type == "cpu" else tensor.cpu().numpy()


def read_on_host(batch: dict) -> tuple[dict, StepResult, bool]:
    """(the batch with `predicted_positions`, its counts, whether it has no padding), all read
    from the loader's host tensors through numpy, so no device value is ever waited for.

    `predicted_positions` are the flat (batch-major) indices of `loss_mask` and
    `predicted_labels` their targets, padded to a repeating row count (model/selection.py): the
    model selects rows by them, where boolean indexing on the device would first read back how
    many rows there are. A batch already on the device (a benchmark's) is read back here
    instead: correct, at the cost of those reads."""
    attention, loss_mask, labels = (_host_array(batch[name]) for name in ("attention_mask", "loss_mask", "labels"))
    positions, targets = padded_selection(loss_mask, labels)
    counts = StepResult(samples=float(attention.shape[0]), tokens=float(attention.sum()), predicted_tokens=float(loss_mask.sum()))
    selection = dict(predicted_positions=torch.from_numpy(positions), predicted_labels=torch.from_numpy(targets))
    return dict(batch, **selection), counts, bool(attention.all())


@contextlib.contextmanager
def _reading_data(watchdog, times):
    """Waiting for the data loader: the watchdog's `data` phase and this rank's data-wait time."""
    with watchdog.phase("data", "reading the next batch from the data loader"), times.data_wait():
        yield


def plain_step(engine, batches: Iterator[dict], accumulation: int, layout, poison: bool = False, step: int = 0,
               times=None) -> StepResult:
    """`accumulation` micro-batches of forward/backward, then one optimizer step on this rank of
    `layout`. `poison` makes the loss NaN (training/loop/faults.py: the injected-divergence test).

    A batch without padding goes in without an attention mask, which lets a GPU's SDPA pick
    FlashAttention (a mask rules it out). `times` (training/loop/rank_times.py RankTimes) sums
    this rank's data wait and forward time for the straggler report."""
    result, watchdog = StepResult(), watching()
    times = times or RankTimes(layout.device)
    for _ in range(accumulation):
        with _reading_data(watchdog, times):
            host, micro, unpadded = read_on_host(next(batches))
        batch = to_device(host, layout.device)
        positions = batch["predicted_positions"]
        with times.forward():
            faults.delay("forward", step, layout.rank)
            out = engine(batch["input_ids"], batch["token_type_ids"], None if unpadded else batch["attention_mask"], positions)
            losses = pretraining_loss(
                out.mlm_logits, batch["predicted_labels"], out.nsp_logits, batch.get("next_sentence_label"),
                tp_group=layout.tp_group,
            )
            # Nothing here reads the model's output again: the loss keeps the logits' buffer for
            # backward (it becomes their gradient, model/vocab_cross_entropy.py) and the rest goes.
            del out
        if poison:
            losses.loss = losses.loss * float("nan")
        with watchdog.phase("step", "backward and the optimizer step (the gradient all-reduce)"):
            engine.backward(losses.loss)  # DeepSpeed divides by the accumulation steps
            engine.step()  # applies the update only at the accumulation boundary
        faults.delay("micro-batch", step, layout.rank)
        watchdog.beat()
        # float64 on the device: summed over micro batches and steps exactly as host floats were.
        micro.loss, micro.mlm_loss = _sum_term(losses.loss), _sum_term(losses.mlm_loss)
        micro.mlm_accuracy, micro.micro_batches = _sum_term(losses.mlm_accuracy), 1.0
        if losses.nsp_loss is not None:
            micro.nsp_loss, micro.nsp_accuracy = _sum_term(losses.nsp_loss), _sum_term(losses.nsp_accuracy)
            micro.has_nsp = 1.0
        result.add(micro)
    return result


def pipeline_step(engine, batches: Iterator[dict], accumulation: int, device: torch.device, pipe_model, times=None) -> StepResult:
    """One DeepSpeed pipeline `train_batch` over `accumulation` micro-batches (`times`: the data
    wait only; a stage's forward passes are interleaved with its sends and receives)."""
    from bert_ds.training.engine.pipeline_loss import last_stage_metrics, pipeline_batch

    counted, watchdog = StepResult(), watching()
    times = times or RankTimes(device)

    def feed():
        for _ in range(accumulation):
            with _reading_data(watchdog, times):
                batch = next(batches)
            host, counts, _ = read_on_host(batch)
            counted.add(counts)
            yield pipeline_batch(to_device(host, device))

    needs_data = engine.is_first_stage() or engine.is_last_stage()
    with watchdog.phase("step", "the pipeline schedule (sends, receives, the gradient all-reduce)"):
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
    values = result.as_tensor(layout.device)
    with watching().phase("collective", "the all-reduce of the log window's metrics"):
        dist.all_reduce(values, group=layout.dp_group)
    if pipeline and layout.pipeline_parallel > 1:
        last_stage = dist.get_global_rank(layout.pp_group, layout.pipeline_parallel - 1)
        dist.broadcast(values, src=last_stage, group=layout.pp_group)
    return StepResult.from_tensor(values.cpu())
