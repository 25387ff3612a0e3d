"""Table 5's orderings read against the restarts' spread (bert_ds/experiments/table5_orderings.py),
on a made-up record whose gaps and stds are known, and as table5.md prints them."""

import math

import pytest

from bert_ds.experiments.table5_orderings import comparisons, orderings, pooled_std
from bert_ds.experiments.table5_report import PAPER, markdown


def _cell(scores):
    return dict(scores=scores, mean=sum(scores) / len(scores), std=0.0)


def _record(cells, columns=("mrpc", "sst2", "squad")):
    return dict(columns=list(columns), cells={row: {c: _cell(s) for c, s in by.items()} for row, by in cells.items()},
                scale="test", restarts=3, settings={}, budget=dict(pretraining_tokens=1))


CELLS = {  # three restarts each, every cell's sample std 1 (so every pooled std is 1)
    "MLM+NSP": {"mrpc": [80, 81, 82], "sst2": [85, 86, 87], "squad": [40, 41, 42]},
    "No NSP": {"mrpc": [79.5, 80.5, 81.5], "sst2": [85, 86, 87], "squad": [44, 45, 46]},
    "LTR & No NSP": {"mrpc": [70, 71, 72], "sst2": [84, 85, 86], "squad": [30, 31, 32]},
    "+ BiLSTM": {"mrpc": [70, 71, 72], "sst2": [84, 85, 86], "squad": [35, 36, 37]},
    "No pre-training": {"mrpc": [68, 69, 70], "sst2": [80, 81, 82], "squad": [23, 24, 25]},
}


def _find(found, row, against, column):
    return next(item for item in found if (item["row"], item["against"], item["column"]) == (row, against, column))


def test_pooled_std_uses_each_cells_own_mean_and_n_minus_1():
    assert pooled_std([1, 3], [2, 4]) == pytest.approx(math.sqrt(2))  # deviations 1, 1, 1, 1 over 4 - 2
    assert pooled_std([10, 10, 10], [0, 6]) == pytest.approx(math.sqrt(18 / 3))
    assert pooled_std([1], [2, 3]) is None


def test_every_comparison_of_the_issue_is_read():
    found = comparisons(["mrpc", "sst2", "squad"], "mrpc")
    assert len(found) == 4 * 3 + 3 + 3
    assert ("effect", "LTR & No NSP", "MLM+NSP", "mrpc") in found and ("effect", "+ BiLSTM", "LTR & No NSP", "squad") in found
    assert ("spread", "No NSP", "MLM+NSP", "sst2") in found


def test_gaps_are_shown_only_beyond_twice_the_pooled_std_and_with_the_papers_sign():
    found = orderings(_record(CELLS), PAPER)
    ltr_squad = _find(found, "LTR & No NSP", "MLM+NSP", "squad")
    assert ltr_squad["gap"] == pytest.approx(-10) and ltr_squad["pooled_std"] == pytest.approx(1)
    assert ltr_squad["paper_gap"] == -10.7 and ltr_squad["shown"] is True
    assert _find(found, "+ BiLSTM", "LTR & No NSP", "squad")["shown"] is True  # +5 against 2 x 1
    # SQuAD's floor is 10 points whatever the spread: LTR clears it by 7 only, MLM+NSP by 17.
    assert _find(found, "LTR & No NSP", "No pre-training", "squad")["shown"] is False
    assert _find(found, "MLM+NSP", "No pre-training", "squad")["shown"] is True
    # A gap of exactly twice the pooled std is not beyond it.
    assert _find(found, "LTR & No NSP", "No pre-training", "mrpc")["gap"] == pytest.approx(2)
    assert _find(found, "LTR & No NSP", "No pre-training", "mrpc")["shown"] is False
    assert _find(found, "MLM+NSP", "No pre-training", "mrpc")["shown"] is True
    # No NSP against MLM+NSP claims nothing: within the spread on MRPC, beyond it (+4) on SQuAD.
    mrpc, squad = _find(found, "No NSP", "MLM+NSP", "mrpc"), _find(found, "No NSP", "MLM+NSP", "squad")
    assert mrpc["shown"] is None and not mrpc["beyond_spread"] and squad["shown"] is None and squad["beyond_spread"]


def test_an_effect_with_the_wrong_sign_is_not_shown_however_large():
    cells = {row: dict(by) for row, by in CELLS.items()}
    cells["LTR & No NSP"] = dict(CELLS["LTR & No NSP"], squad=[50, 51, 52])  # LTR above MLM+NSP by 10
    item = _find(orderings(_record(cells), PAPER), "LTR & No NSP", "MLM+NSP", "squad")
    assert item["beyond_spread"] and item["shown"] is False


def test_one_restart_has_no_spread_and_table5_md_says_so():
    cells = {row: {column: scores[:1] for column, scores in by.items()} for row, by in CELLS.items()}
    found = orderings(_record(cells), PAPER)
    assert all(item["pooled_std"] is None for item in found)
    assert _find(found, "MLM+NSP", "No pre-training", "squad")["shown"] is True  # 40 - 23: the 10 points need no spread
    assert _find(found, "MLM+NSP", "No pre-training", "mrpc")["shown"] is False
    text = markdown(_record(cells))
    assert "| MLM+NSP vs No pre-training | MRPC (Acc) | +12.0 | – | – | > 2 std | no spread (1 restart) |" in text


def test_table5_md_prints_each_gap_beside_the_papers():
    text = markdown(_record(CELLS))
    assert "| LTR & No NSP vs MLM+NSP | SQuAD v1.1 (F1) | -10.0 | 2.0 | -10.7 | the paper's sign, > 2 std | yes |" in text
    assert "| LTR & No NSP vs MLM+NSP | MRPC (Acc) | -10.0 | 2.0 | -9.2 | the paper's sign, > 2 std | yes |" in text
    assert "| LTR & No NSP vs No pre-training | MRPC (Acc) | +2.0 | 2.0 | – | > 2 std | **no** |" in text
    assert "| No NSP vs MLM+NSP | MRPC (Acc) | -0.5 | 2.0 | -0.2 | reported, no claim | within the spread |" in text
