"""GLUE and SQuAD metrics against independent references: the GLUE metrics are scikit-learn's and
scipy's (as Hugging Face's `evaluate` computes them); the tests check them, and our conventions
around them (0.0 where undefined, the positive class), against textbook formulas written out
here, numpy's corrcoef, pandas' rank correlation, hand-computed values and the BERT paper's
Table 1."""

import numpy as np
import pandas as pd
import pytest

from bert_ds.finetune.metrics import (
    accuracy,
    best_threshold,
    binary_f1,
    exact_match,
    glue_average,
    glue_metrics,
    matthews_corrcoef,
    normalize_answer,
    pearson,
    spearman,
    squad_v1_metrics,
    squad_v2_metrics,
    token_f1,
)

RNG = np.random.default_rng(1234)
LABELS = RNG.integers(0, 2, 200)
PREDICTIONS = np.where(RNG.random(200) < 0.7, LABELS, 1 - LABELS)  # ~70% right


def confusion(predictions, labels):
    p, y = np.asarray(predictions), np.asarray(labels)
    return [int(np.sum((p == a) & (y == b))) for a, b in ((1, 1), (0, 0), (1, 0), (0, 1))]  # TP TN FP FN


def test_binary_metrics_match_the_textbook_formulas():
    tp, tn, fp, fn = confusion(PREDICTIONS, LABELS)
    assert accuracy(PREDICTIONS, LABELS) == pytest.approx((tp + tn) / 200)
    assert binary_f1(PREDICTIONS, LABELS) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    mcc = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert matthews_corrcoef(PREDICTIONS, LABELS) == pytest.approx(mcc)
    # Hand-computed: TP 2, FN 1, FP 1, TN 0 -> (0 - 1) / sqrt(3 * 3 * 1 * 1) = -1/3; F1 = 4/6.
    assert matthews_corrcoef([1, 0, 1, 1], [1, 1, 1, 0]) == pytest.approx(-1 / 3)
    assert binary_f1([1, 0, 1, 1], [1, 1, 1, 0]) == pytest.approx(2 / 3)
    assert matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0  # constant prediction: undefined -> 0
    assert binary_f1([0, 0], [0, 0]) == 0.0
    with pytest.raises(ValueError, match="as many predictions as labels"):
        accuracy([1, 0], [1])


def test_multiclass_mcc_is_the_correlation_of_one_hot_matrices():
    labels, predictions = RNG.integers(0, 3, 300), RNG.integers(0, 3, 300)
    predictions[:150] = labels[:150]
    x, y = np.eye(3)[labels], np.eye(3)[predictions]
    x, y = x - x.mean(0), y - y.mean(0)
    reference = np.sum(x * y) / np.sqrt(np.sum(x * x) * np.sum(y * y))
    assert matthews_corrcoef(predictions, labels) == pytest.approx(reference)
    assert matthews_corrcoef(labels, labels) == pytest.approx(1.0)


def test_correlations_match_numpy_and_pandas():
    x = RNG.normal(size=120)
    y = 0.6 * x + RNG.normal(size=120)
    y[::7] = y[0]  # ties in one variable
    x_rounded = np.round(x, 1)  # and many in the other
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    frame = pd.DataFrame({"x": x_rounded, "y": y})
    assert spearman(x_rounded, y) == pytest.approx(frame.corr(method="spearman").loc["x", "y"])
    # Hand-computed: ranks [1, 2.5, 2.5, 4] and [1, 3, 2, 4].
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(np.corrcoef([1, 2.5, 2.5, 4], [1, 3, 2, 4])[0, 1])
    assert pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0 and spearman([2, 2], [1, 3]) == 0.0


def test_glue_metrics_per_task():
    assert set(glue_metrics("cola", PREDICTIONS, LABELS)) == {"mcc"}
    assert glue_metrics("mrpc", PREDICTIONS, LABELS) == {"f1": binary_f1(PREDICTIONS, LABELS),
                                                       "accuracy": accuracy(PREDICTIONS, LABELS)}
    assert set(glue_metrics("QQP", PREDICTIONS, LABELS)) == {"f1", "accuracy"}
    gold = RNG.random(50) * 5
    guess = gold + RNG.normal(size=50)
    assert glue_metrics("stsb", guess, gold) == {"spearman": spearman(guess, gold), "pearson": pearson(guess, gold)}
    assert set(glue_metrics("mnli", [0, 1, 2], [0, 2, 2])) == {"accuracy"}


# BERT paper, Table 1 (GLUE test), BERT-LARGE and BERT-BASE rows: the "Average" column is 82.1 / 79.6.
def table1(mnli_m, mnli_mm, qqp, qnli, sst2, cola, stsb, mrpc, rte):
    return {"mnli-m": {"accuracy": mnli_m}, "mnli-mm": {"accuracy": mnli_mm}, "qqp": {"f1": qqp, "accuracy": 0.0},
            "qnli": {"accuracy": qnli}, "sst2": {"accuracy": sst2}, "cola": {"mcc": cola},
            "stsb": {"spearman": stsb, "pearson": 0.0}, "mrpc": {"f1": mrpc, "accuracy": 0.0}, "rte": {"accuracy": rte},
            "wnli": {"accuracy": 65.1}}


def test_glue_average_reproduces_the_bert_paper_and_excludes_wnli():
    large = table1(86.7, 85.9, 72.1, 92.7, 94.9, 60.5, 86.5, 89.3, 70.1)
    base = table1(84.6, 83.4, 71.2, 90.5, 93.5, 52.1, 85.8, 88.9, 66.4)
    assert round(glue_average(large), 1) == 82.1 and round(glue_average(base), 1) == 79.6
    large["wnli"]["accuracy"] = 0.0
    assert round(glue_average(large), 1) == 82.1
    # Leaderboard rule: two-metric tasks average their metrics, MNLI averages m and mm: 8 task scores.
    results = {name: {"accuracy": 0.8} for name in ("sst2", "qnli", "rte", "mnli-m")}
    results.update({"mnli-mm": {"accuracy": 0.6}, "cola": {"mcc": 0.5}, "mrpc": {"f1": 0.9, "accuracy": 0.7},
                    "qqp": {"f1": 0.7, "accuracy": 0.9}, "stsb": {"pearson": 0.88, "spearman": 0.86}})
    expected = (0.8 * 3 + 0.7 + 0.5 + 0.8 + 0.8 + 0.87) / 8
    assert glue_average(results, convention="leaderboard") == pytest.approx(expected)
    del results["mnli-mm"]
    with pytest.raises(ValueError, match="mnli-mm"):
        glue_average(results)


@pytest.mark.parametrize(
    "text, normalized",
    [
        ("The Denver Broncos", "denver broncos"),  # case and a leading article
        ("an apple a day", "apple day"),  # every article, inside the text too
        ("Theatre and Anthem", "theatre and anthem"),  # articles only as whole words
        ("  many \t spaces\nhere ", "many spaces here"),  # whitespace collapsed
        ("U.S.A.!", "usa"),  # punctuation removed, not replaced by a space
        ("the-end", "theend"),  # punctuation goes before articles: no "the" word remains
        ("a", ""),
        ("Café, 1,000", "café 1000"),  # only ASCII punctuation is removed
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_and_token_f1():
    assert exact_match("the Denver Broncos!", "Denver Broncos") == 1.0
    assert token_f1("Denver", "Denver Broncos") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert token_f1("broncos broncos", "broncos") == pytest.approx(2 * 0.5 * 1 / 1.5)  # multiset overlap
    assert token_f1("", "") == 1.0 and token_f1("the", "") == 1.0 and token_f1("x", "") == 0.0


def test_squad_v1_takes_the_best_gold_answer():
    golds = {"q1": ["Denver Broncos", "Broncos"], "q2": ["1959"], "q3": ["Luna 3"]}
    predictions = {"q1": "broncos", "q2": "in 1959", "q3": "Luna"}
    result = squad_v1_metrics(golds, predictions)
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(100 * (1.0 + 2 / 3 + 2 / 3) / 3)
    with pytest.raises(ValueError, match="No prediction for 1"):
        squad_v1_metrics(golds, {"q1": "x", "q2": "y"})


def test_squad_v2_no_answer_groups_and_best_threshold():
    golds = {"q1": ["Luna 3"], "q2": [], "q3": ["1959"], "q4": ["", "the"]}  # q4: golds normalise to nothing
    predictions = {"q1": "Luna 3", "q2": "Moon", "q3": "1960", "q4": ""}
    na_probs = {"q1": 0.1, "q2": 0.6, "q3": 0.7, "q4": 0.2}
    result = squad_v2_metrics(golds, predictions)
    assert result["exact"] == 50.0 and result["total"] == 4  # q1 right; q4: "" matches no answer
    groups = [result[key] for key in ("HasAns_exact", "HasAns_total", "NoAns_exact", "NoAns_total")]
    assert groups == [50.0, 2, 50.0, 2]
    assert "best_exact" not in result
    # By hand: answering "" everywhere scores 2 (q2, q4); answering q1 too (t = 0.1) scores 3;
    # also q4 (t = 0.2): 3; also q2: 2; also q3: 2. Best: 3 of 4 at t = 0.1.
    result = squad_v2_metrics(golds, predictions, na_probs=na_probs)
    assert (result["best_exact"], result["best_exact_thresh"]) == (75.0, 0.1)
    assert (result["best_f1"], result["best_f1_thresh"]) == (75.0, 0.1)
    # Applying the threshold reproduces the best score.
    assert squad_v2_metrics(golds, predictions, na_probs, na_prob_thresh=0.1)["exact"] == 75.0
    assert squad_v2_metrics(golds, predictions, na_probs, na_prob_thresh=0.5)["exact"] == 75.0


def test_best_threshold_moves_tied_questions_together():
    predictions, has_answer = {"a": "x", "b": "y"}, {"a": True, "b": False}
    scores, na_probs = {"a": 1.0, "b": 0.0}, {"a": 0.5, "b": 0.5}
    # No threshold separates a from b: both answered scores 1 of 2, both "" scores 1 of 2.
    best, threshold = best_threshold(predictions, scores, na_probs, has_answer)
    assert best == 50.0 and threshold < 0.5
    na_probs["b"] = 0.9  # now t in [0.5, 0.9) answers a and not b: 2 of 2
    assert best_threshold(predictions, scores, na_probs, has_answer) == (100.0, 0.5)
