"""The pre-training loss, defined once: MLM + NSP terms (`_mlm_terms` and the NSP cross-entropy),
reduced to means for a training step (`pretraining_loss`: the plain step and the pipeline's last
stage) or to sums for held-out evaluation (`evaluation_sums`).

`mlm_loss` is a masked-token cross-entropy averaged over the selected positions (all of them:
[MASK]ed, randomised and unchanged alike), not a perplexity of the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from bert_ds.model.vocab_cross_entropy import RowStatistics, row_statistics, vocab_cross_entropy


@dataclass
class PretrainingLoss:
    """The scalar to back-propagate plus what gets logged, each averaged over this micro-batch."""

    loss: torch.Tensor
    mlm_loss: torch.Tensor
    nsp_loss: Optional[torch.Tensor]
    mlm_accuracy: torch.Tensor
    nsp_accuracy: Optional[torch.Tensor]


@torch.no_grad()
def vocab_parallel_accuracy(logits: torch.Tensor, targets: torch.Tensor, tp_group) -> torch.Tensor:
    """Fraction of rows whose target has the top logit, with the vocabulary split over TP ranks.

    logits: [n, vocab / tp] (this rank's slice); targets: [n] full-vocabulary ids, negative on
    padding rows (model/selection.py), which count nowhere. Only two [n]-sized all-reduces cross
    ranks, never the [n, vocab] logits.
    """
    return _correct(row_statistics(logits, targets, tp_group), targets).sum() / (targets >= 0).sum().clamp(min=1)


def _correct(statistics: RowStatistics, targets: torch.Tensor) -> torch.Tensor:
    """float [n]: 1 where the row's target has the top logit (ties count), 0 elsewhere and on padding rows."""
    return ((statistics.target_logit >= statistics.row_max) & (targets >= 0)).float()


def _mlm_terms(mlm_logits: torch.Tensor, mlm_targets: torch.Tensor, tp_group):
    """(per-row cross-entropy [n] or None when no position is selected, correct [n], real [n]):
    the MLM terms both reductions below share, zero on padding rows (a negative target: the rows
    model/selection.py adds so that the decoder's shape repeats). The softmax over the
    vocabulary, its log-sum-exp and the gradient back into the decoder are computed in fp32
    (megatron's and HF's practice), a few rows at a time (model/vocab_cross_entropy.py), which
    overwrites the logits: correctness is read first."""
    real = (mlm_targets >= 0).float()
    if mlm_targets.numel() == 0:
        return None, mlm_logits.new_zeros((0,)), real
    statistics = row_statistics(mlm_logits, mlm_targets, tp_group)
    correct = _correct(statistics, mlm_targets)
    # A padding row's target is outside every rank's vocabulary slice: its loss is finite, then zeroed.
    per_row = vocab_cross_entropy(mlm_logits, statistics, tp_group) * real
    return per_row, correct, real


def pretraining_loss(
    mlm_logits: torch.Tensor,
    mlm_targets: torch.Tensor,
    nsp_logits: Optional[torch.Tensor] = None,
    next_sentence_label: Optional[torch.Tensor] = None,
    *,
    tp_group,
) -> PretrainingLoss:
    """MLM cross-entropy over the selected positions (+ NSP cross-entropy when given), averaged
    over this micro-batch: the loss of a training step (plain or the pipeline's last stage).

    mlm_logits: [n, vocab / tp] from BertForPretraining, rows aligned with mlm_targets [n]
    (= labels[loss_mask]; a negative target marks a padding row, which counts nowhere). The
    logits must not be used after this call (see _mlm_terms).
    """
    per_row, correct, real = _mlm_terms(mlm_logits, mlm_targets, tp_group)
    count = real.sum().clamp(min=1)
    mlm_accuracy = correct.sum() / count
    # No selected token in this micro-batch: a zero that still reaches every head parameter.
    mlm_loss = mlm_logits.float().sum() * 0.0 if per_row is None else per_row.sum() / count
    loss, nsp_loss, nsp_accuracy = mlm_loss, None, None
    if nsp_logits is not None and next_sentence_label is not None:
        nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label)
        with torch.no_grad():
            nsp_accuracy = (nsp_logits.argmax(-1) == next_sentence_label).float().mean()
        loss = mlm_loss + nsp_loss
    return PretrainingLoss(loss, mlm_loss, nsp_loss, mlm_accuracy, nsp_accuracy)


EVAL_SUM_FIELDS = ("mlm_loss", "mlm_correct", "mlm_count", "nsp_loss", "nsp_correct", "nsp_count")


@torch.no_grad()
def evaluation_sums(
    mlm_logits: torch.Tensor,
    mlm_targets: torch.Tensor,
    nsp_logits: Optional[torch.Tensor] = None,
    next_sentence_label: Optional[torch.Tensor] = None,
    *,
    tp_group,
) -> torch.Tensor:
    """The same loss as `pretraining_loss`, summed for held-out metrics: float64 [EVAL_SUM_FIELDS],
    summed, not averaged, so that any split of the evaluation set into micro-batches and ranks
    adds up to the same means (a token-weighted MLM loss and accuracy, an example-weighted NSP
    loss and accuracy).

    NSP rows whose label is negative are padding (an evaluation set that does not fill every
    rank's last micro-batch) and count nowhere; padding rows select no MLM position either.
    """
    sums = torch.zeros(len(EVAL_SUM_FIELDS), dtype=torch.float64, device=mlm_logits.device)
    per_row, correct, real = _mlm_terms(mlm_logits, mlm_targets, tp_group)
    if per_row is not None:
        sums[0] = per_row.double().sum()
        sums[1] = correct.double().sum()
        sums[2] = real.double().sum()
    if nsp_logits is not None and next_sentence_label is not None:
        real = next_sentence_label >= 0
        logits, labels = nsp_logits[real].float(), next_sentence_label[real]
        sums[3] = F.cross_entropy(logits, labels, reduction="sum").double() if labels.numel() else 0.0
        sums[4] = (logits.argmax(-1) == labels).sum()
        sums[5] = labels.numel()
    return sums
