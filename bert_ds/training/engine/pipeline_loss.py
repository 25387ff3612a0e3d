"""What pre-training adds to the pipeline stages of model/pipeline.py: the last stage's loss
function (which also keeps the step's metrics and the held-out sums) and the loader-batch form
DeepSpeed's train_batch/eval_batch take."""

from __future__ import annotations

from typing import Optional

import torch

from bert_ds.model.loss import PretrainingLoss, evaluation_sums, pretraining_loss
from bert_ds.model.selection import selected_rows

_METRIC_FIELDS = ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy")


class StageMetrics:
    """Sums of the PretrainingLoss fields over the micro-batches since the last reset.

    Kept as detached tensors (no host sync per micro-batch); `mean()` converts to floats once.
    """

    def __init__(self) -> None:
        self.evaluating = False
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.sums: dict[str, Optional[torch.Tensor]] = {}
        self.eval_sums: Optional[torch.Tensor] = None
        """Held-out sums (model/loss.py evaluation_sums) of the micro-batches of an eval_batch."""

    def add(self, losses: PretrainingLoss) -> None:
        for name in _METRIC_FIELDS:
            value = getattr(losses, name)
            total = self.sums.get(name)
            self.sums[name] = None if value is None else value.detach().float() + (0.0 if total is None else total)
        self.count += 1

    def mean(self) -> Optional[dict[str, Optional[float]]]:
        if self.count == 0:
            return None
        return {n: None if t is None else t.item() / self.count for n, t in self.sums.items()}


class PretrainingLossFn:
    """loss_fn(outputs, labels) for the last stage: pretraining_loss, recorded into `metrics`.

    The module calls `mode_changed` on train()/eval() (model/pipeline.py BertPipelineModule), so
    after a train_batch or an eval_batch `metrics` holds exactly that call's micro-batches.
    """

    def __init__(self, tp_group):
        self.metrics = StageMetrics()
        self.tp_group = tp_group

    def mode_changed(self, training: bool) -> None:
        self.metrics.reset()
        self.metrics.evaluating = not training

    def __call__(self, outputs: tuple, labels: tuple) -> torch.Tensor:
        hidden, nsp_logits, decode = outputs  # model/pipeline.py BertPretrainingHeadsPipe
        positions, targets = labels[0], labels[1]
        next_sentence_label = labels[2] if len(labels) > 2 else None
        mlm_logits = decode(selected_rows(hidden, positions, seq_first=True))  # [n_padded, vocab / tp]
        if self.metrics.evaluating:
            sums = evaluation_sums(mlm_logits, targets, nsp_logits, next_sentence_label, tp_group=self.tp_group)
            self.metrics.eval_sums = sums if self.metrics.eval_sums is None else self.metrics.eval_sums + sums
            return (sums[0] / sums[2].clamp(min=1)).float()  # eval_batch averages it; training/evaluation.py reads the sums
        losses = pretraining_loss(mlm_logits, targets, nsp_logits, next_sentence_label, tp_group=self.tp_group)
        self.metrics.add(losses)
        return losses.loss


def pipeline_batch(batch: dict) -> tuple[tuple, tuple]:
    """Loader batch dict, with the predicted positions read on the host (training/loop/steps.py
    read_on_host), -> (stage-0 inputs, last-stage labels), one item of train_batch's iterator.

    inputs: (input_ids, token_type_ids, attention_mask as int64), all [b, s];
    labels: (predicted_positions [n], predicted_labels [n], next_sentence_label [b]), the last
    left out without NSP. The positions go with the labels, not between the stages: DeepSpeed's
    stages exchange fixed shapes, and their number changes with every batch.
    """
    inputs = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"].long())
    labels = (batch["predicted_positions"], batch["predicted_labels"])
    if batch.get("next_sentence_label") is not None:
        labels += (batch["next_sentence_label"],)
    return inputs, labels


def last_stage_metrics(pipe_model) -> Optional[dict[str, Optional[float]]]:
    """Mean PretrainingLoss fields over the last train_batch/eval_batch's micro-batches.

    Floats (nsp_* None without NSP), this rank's micro-batches only (not averaged over DP). None on
    every stage but the last, and before the first batch.
    """
    return pipe_model.loss_fn.metrics.mean() if pipe_model.last_stage else None
