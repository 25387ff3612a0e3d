"""The official scores of GLUE, SQuAD and CoNLL-2003 NER.

GLUE: Matthews correlation (CoLA), accuracy, F1 of the positive class 1 (MRPC, QQP), Pearson
and Spearman correlation (STS-B), computed by scikit-learn and scipy as Hugging Face's `evaluate`
GLUE metric does (`matthews_corrcoef`, `accuracy_score`, `f1_score`; `pearsonr`, `spearmanr`);
`glue_metrics` computes a task's metrics on one dev split (MNLI's matched and mismatched splits
are scored separately) and `glue_average` the GLUE score without WNLI. Values are fractions in
[0, 1] (correlations in [-1, 1]); where a score is undefined (a constant prediction) it is 0.0,
so model selection by dev score always has a number.

SQuAD: answers are compared after the official normalisation (lowercase, no punctuation, no
articles a/an/the, single spaces); exact match and token-level F1 take the maximum over the gold
answers; scores are percentages, under the official scripts' key names.

NER (token tagging): entity-level precision, recall and F1 over chunks, computed by seqeval in
its default mode, which reads chunks as CoNLL's official `conlleval` script does (an I- tag
after O or after another type starts a chunk), so CoNLL-2003's IOB1 files and the hub's IOB2
copy score the same way; plus token accuracy. Fractions in [0, 1], as seqeval returns them.
"""

from __future__ import annotations

import collections
import math
import re
import string
import warnings
from typing import Mapping, Optional, Sequence

import numpy as np
import scipy.stats
import sklearn.metrics

from bert_ds.finetune.data.tasks import GLUE_TASKS, GlueTask, eval_name, get_task

# --- GLUE -------------------------------------------------------------------------------------


def accuracy(predictions: Sequence, labels: Sequence) -> float:
    """Share of predictions equal to their label."""
    predictions, labels = _pair(predictions, labels)
    return float(sklearn.metrics.accuracy_score(labels, predictions))


def binary_f1(predictions: Sequence, labels: Sequence, positive: int = 1) -> float:
    """F1 of the positive class: 2 TP / (2 TP + FP + FN); 0.0 when there is no positive at all."""
    predictions, labels = _pair(predictions, labels)
    return float(sklearn.metrics.f1_score(labels == positive, predictions == positive, zero_division=0.0))


def matthews_corrcoef(predictions: Sequence, labels: Sequence) -> float:
    """Matthews correlation coefficient (its multi-class form for more than two classes); 0.0
    when undefined (a constant prediction or constant labels)."""
    predictions, labels = _pair(predictions, labels)
    return float(sklearn.metrics.matthews_corrcoef(labels, predictions))


def _correlation(function, predictions: Sequence[float], labels: Sequence[float]) -> float:
    x, y = (np.asarray(v, dtype=np.float64) for v in _pair(predictions, labels))
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0  # undefined for a constant side (scipy warns and returns nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.stats.ConstantInputWarning)
        value = float(function(x, y)[0])
    return value if math.isfinite(value) else 0.0


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Pearson correlation (scipy.stats.pearsonr); 0.0 when either side is constant."""
    return _correlation(scipy.stats.pearsonr, predictions, labels)


def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Spearman's rank correlation (scipy.stats.spearmanr, ties at their mean rank); 0.0 when
    either side is constant."""
    return _correlation(scipy.stats.spearmanr, predictions, labels)


def _pair(predictions: Sequence, labels: Sequence) -> tuple[np.ndarray, np.ndarray]:
    predictions, labels = np.asarray(predictions).reshape(-1), np.asarray(labels).reshape(-1)
    if len(predictions) != len(labels) or len(labels) == 0:
        sizes = f"{len(predictions)} and {len(labels)}"
        raise ValueError(f"Need as many predictions as labels (at least one), got {sizes}.")
    return predictions, labels


# Metric name (as in tasks.GlueTask.metrics) -> function(predictions, labels).
METRICS = {"accuracy": accuracy, "f1": binary_f1, "mcc": matthews_corrcoef, "pearson": pearson, "spearman": spearman}


def glue_metrics(task: str | GlueTask, predictions: Sequence, labels: Sequence) -> dict[str, float]:
    """Every official metric of `task` on one dev split: {"mcc"} for CoLA, {"f1", "accuracy"}
    for MRPC/QQP, {"spearman", "pearson"} for STS-B, {"accuracy"} otherwise (MNLI: call once
    per dev split). Predictions are class ints (float scores for STS-B)."""
    task = task if isinstance(task, GlueTask) else get_task(task)
    return {name: METRICS[name](predictions, labels) for name in task.metrics}


def glue_average(results: Mapping[str, Mapping[str, float]], convention: str = "paper") -> float:
    """The GLUE score over CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI and RTE (WNLI excluded, as
    in the BERT paper). `results` maps eval names (tasks.eval_name: the task name, or "mnli-m"
    and "mnli-mm") to `glue_metrics` dicts; a "wnli" entry is ignored.

    convention="paper": the BERT paper's Table 1 "Average": the mean of nine numbers, one per
    column: CoLA MCC, SST-2 acc, MRPC F1, STS-B Spearman, QQP F1, MNLI-m acc, MNLI-mm acc, QNLI
    acc, RTE acc (the paper's BERT-LARGE row gives 82.1 this way).
    convention="leaderboard": the GLUE benchmark's rule for tasks with several metrics, as we
    read it: each task scores the mean of its metrics (MRPC and QQP (F1+acc)/2, STS-B
    (Pearson+Spearman)/2), MNLI the mean of its matched and mismatched accuracy, and the result
    is the mean of these eight task scores (the public leaderboard also counts WNLI; we do not).
    """
    if convention not in ("paper", "leaderboard"):
        raise ValueError(f"convention must be 'paper' or 'leaderboard', got {convention!r}.")
    tasks = [task for task in GLUE_TASKS.values() if task.name != "wnli"]
    needed = [eval_name(task, split) for task in tasks for split in task.dev_splits]
    missing = [name for name in needed if name not in results]
    if missing:
        raise ValueError(f"GLUE average needs results for {missing}; got {sorted(results)}.")
    if convention == "paper":
        scores = [results[eval_name(t, split)][t.metrics[0]] for t in tasks for split in t.dev_splits]
    else:
        scores = [
            float(np.mean([np.mean([results[eval_name(t, s)][m] for m in t.metrics]) for s in t.dev_splits]))
            for t in tasks
        ]
    return float(np.mean(scores))


# --- SQuAD ------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation, in its order: lowercase, drop ASCII punctuation, replace
    the words a/an/the by a space, then collapse whitespace to single spaces."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when prediction and gold are equal after normalisation, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised tokens (a multiset overlap); when either side has no token, 1.0 iff
    both have none. That is v2.0's rule; v1.1's script gives 0.0 when both are empty, which
    needs a gold answer that normalises to nothing: v1.1 data has none."""
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not wanted:
        return float(predicted == wanted)
    common = sum((collections.Counter(predicted) & collections.Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def _raw_scores(golds: Mapping[str, Sequence[str]], predictions: Mapping[str, str], version_2: bool):
    """(exact, f1) per question id: the best over its gold answers."""
    missing = [qid for qid in golds if qid not in predictions]
    if missing:
        raise ValueError(f"No prediction for {len(missing)} of {len(golds)} questions, e.g. {missing[:3]}.")
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        if version_2:  # answers that normalise to nothing do not count; none left means "no answer"
            answers = [a for a in answers if normalize_answer(a)] or [""]
        exact[qid] = max(exact_match(predictions[qid], a) for a in answers)
        f1[qid] = max(token_f1(predictions[qid], a) for a in answers)
    return exact, f1


def squad_v1_metrics(golds: Mapping[str, Sequence[str]], predictions: Mapping[str, str]) -> dict[str, float]:
    """{"exact_match", "f1"} in percent over every question of `golds` (question id -> gold
    answer texts). Every question needs a prediction (ValueError otherwise)."""
    exact, f1 = _raw_scores(golds, predictions, version_2=False)
    return {"exact_match": 100.0 * float(np.mean(list(exact.values()))), "f1": 100.0 * float(np.mean(list(f1.values())))}


def best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """(best score in percent, threshold): the no-answer threshold t that maximises the score
    when a question is answered "" iff na_probs[qid] > t (a no-answer question then scores 1).

    Candidates are "answer nothing" and each distinct na_prob value (ties move together, so
    the threshold reported always reproduces the score); "answer nothing" reports a threshold
    just below the smallest na_prob. The official v2.0 script scans the same way but starts
    from threshold 0.0 and may stop inside a group of tied na_probs.
    """
    qids = sorted(scores, key=lambda q: na_probs[q])
    total = sum(not has_answer[q] for q in qids)  # everything answered "": every no-answer right
    best, threshold = total, (na_probs[qids[0]] - 1.0 if qids else 0.0)
    for i, qid in enumerate(qids):
        # Answer this question instead of "": gain its score, or lose the free no-answer point.
        total += scores[qid] if has_answer[qid] else (-1.0 if predictions[qid] else 0.0)
        last_of_tie = i + 1 == len(qids) or na_probs[qids[i + 1]] != na_probs[qid]
        if last_of_tie and total > best:
            best, threshold = total, na_probs[qid]
    return 100.0 * best / max(len(qids), 1), float(threshold)


def squad_v2_metrics(
    golds: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    na_probs: Optional[Mapping[str, float]] = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """The official v2.0 dict: "exact", "f1", "total", "HasAns_exact/_f1/_total",
    "NoAns_exact/_f1/_total" (groups that are empty are left out), and with `na_probs`
    (question id -> no-answer score, e.g. postprocess's null_odds) also "best_exact",
    "best_exact_thresh", "best_f1", "best_f1_thresh". An empty gold list means "no answer",
    which only the prediction "" matches. With `na_probs`, a question whose na_prob exceeds
    `na_prob_thresh` counts as answered "" in "exact"/"f1" (the official script's default: 1.0).
    """
    exact_raw, f1_raw = _raw_scores(golds, predictions, version_2=True)
    has_answer = {qid: any(normalize_answer(a) for a in answers) for qid, answers in golds.items()}
    exact, f1 = dict(exact_raw), dict(f1_raw)
    if na_probs is not None:
        for qid in golds:
            if na_probs[qid] > na_prob_thresh:
                exact[qid] = f1[qid] = float(not has_answer[qid])
    result: dict[str, float] = {}
    groups = {
        "": list(golds),
        "HasAns_": [qid for qid in golds if has_answer[qid]],
        "NoAns_": [qid for qid in golds if not has_answer[qid]],
    }
    for prefix, group in groups.items():
        if group or not prefix:
            result[prefix + "exact"] = 100.0 * float(np.mean([exact[q] for q in group])) if group else 0.0
            result[prefix + "f1"] = 100.0 * float(np.mean([f1[q] for q in group])) if group else 0.0
            result[prefix + "total"] = len(group)
    if na_probs is not None:
        for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
            best, threshold = best_threshold(predictions, raw, na_probs, has_answer)
            result[f"best_{name}"], result[f"best_{name}_thresh"] = best, threshold
    return result


# --- NER --------------------------------------------------------------------------------------


def entity_metrics(golds: Sequence[Sequence[str]], predictions: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity precision, recall, F1 (seqeval's conlleval-compatible default mode, micro over
    chunk types) and token accuracy; one tag sequence per sentence on each side."""
    import seqeval.metrics  # lazy: only NER needs it

    golds, predictions = [list(g) for g in golds], [list(p) for p in predictions]
    if len(golds) != len(predictions) or not golds or any(len(g) != len(p) for g, p in zip(golds, predictions)):
        raise ValueError(f"Need one predicted tag per gold tag, in {len(golds)} and {len(predictions)} sentences.")
    with warnings.catch_warnings():  # seqeval warns where a side has no entity; the score is then 0.0
        warnings.simplefilter("ignore")
        return dict(
            f1=float(seqeval.metrics.f1_score(golds, predictions, zero_division=0)),
            precision=float(seqeval.metrics.precision_score(golds, predictions, zero_division=0)),
            recall=float(seqeval.metrics.recall_score(golds, predictions, zero_division=0)),
            accuracy=float(seqeval.metrics.accuracy_score(golds, predictions)),
        )
