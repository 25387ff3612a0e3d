"""Which of Table 5's orderings a run shows: every difference the experiment exists to test,
read against the spread of the fine-tuning restarts, so that table5.md says which gaps are larger
than that noise and which are not (experiments/table5_report.py writes them).

Three kinds of comparison (gap = our mean of the row minus our mean of the one it is read against):
- `floor`: every pre-trained row against "No pre-training". Shown when the gap is at least 10 F1
  points on SQuAD (whatever the spread) and more than twice the pooled restart std on the other
  tasks: pre-training that does not clear random weights by that much shows nothing at this scale.
- `effect`: the paper's two large effects, LTR & No NSP below MLM+NSP on SQuAD and on the pair
  task (-10.7 and -9.2 points in the paper, where the pair task is MRPC) and + BiLSTM above
  LTR & No NSP on SQuAD (+7.1). Shown when the gap has the paper's sign and is more than twice the
  pooled std.
- `spread`: No NSP against MLM+NSP on every task (the paper's gaps there are 0.1-0.6 points on
  MRPC, SST-2 and SQuAD): reported with its spread, no claim either way.

The pooled std of two cells is that of their restarts around each cell's own mean, with the
unbiased (n - 1) denominators: sqrt((sum of squared deviations of both) / (n1 + n2 - 2)). With one
restart per cell there is no spread, and nothing that needs one is called shown.
"""

from __future__ import annotations

import math
from typing import Optional

FLOOR_ROW = "No pre-training"
PRETRAINED_ROWS = ("MLM+NSP", "No NSP", "LTR & No NSP", "+ BiLSTM")
SQUAD_FLOOR_POINTS = 10.0
"""A pre-trained row must beat random weights by this many SQuAD F1 points at least."""
SPREADS = 2.0
"""A gap counts when it exceeds this many pooled restart stds."""


def pooled_std(a: list[float], b: list[float]) -> Optional[float]:
    """The two cells' restart std pooled around each cell's mean; None without two restarts in either."""
    degrees = len(a) + len(b) - 2
    if len(a) < 2 or len(b) < 2:
        return None
    squares = sum((x - sum(cell) / len(cell)) ** 2 for cell in (a, b) for x in cell)
    return math.sqrt(squares / degrees)


def comparisons(columns: list[str], pair_task: str) -> list[tuple[str, str, str, str]]:
    """(kind, row, against, column) of every comparison the experiment reads, in reading order."""
    found = [("floor", row, FLOOR_ROW, column) for row in PRETRAINED_ROWS for column in columns]
    found += [("effect", "LTR & No NSP", "MLM+NSP", column) for column in ("squad", pair_task) if column in columns]
    found += [("effect", "+ BiLSTM", "LTR & No NSP", "squad")] if "squad" in columns else []
    found += [("spread", "No NSP", "MLM+NSP", column) for column in columns]
    return found


def orderings(record: dict, paper: dict) -> list[dict]:
    """Each comparison whose two cells both ran: the gap, the pooled std, the paper's gap (where the
    paper reports both), and whether it is shown (None for `spread`, which claims nothing)."""
    cells, columns = record["cells"], record["columns"]
    found = []
    for kind, row, against, column in comparisons(columns, columns[0]):
        ours, base = cells.get(row, {}).get(column), cells.get(against, {}).get(column)
        if not ours or not base:
            continue
        gap = ours["mean"] - base["mean"]
        spread = pooled_std(ours["scores"], base["scores"])
        paper_row, paper_against = paper.get(row, {}).get(column), paper.get(against, {}).get(column)
        paper_gap = None if paper_row is None or paper_against is None else round(paper_row - paper_against, 1)
        beyond = spread is not None and abs(gap) > SPREADS * spread
        if kind == "floor" and column == "squad":
            shown = gap >= SQUAD_FLOOR_POINTS
        elif kind == "floor":
            shown = beyond and gap > 0
        elif kind == "effect":
            expected_sign = math.copysign(1.0, paper_gap) if paper_gap else (-1.0 if row == "LTR & No NSP" else 1.0)
            shown = beyond and math.copysign(1.0, gap) == expected_sign
        else:
            shown = None
        found.append(dict(kind=kind, row=row, against=against, column=column, gap=gap, pooled_std=spread,
                          paper_gap=paper_gap, beyond_spread=beyond, shown=shown))
    return found


def markdown(found: list[dict], column_names: dict) -> str:
    """The orderings as a table: ours (gap, twice the pooled std), the paper's gap, shown or not."""
    if not found:
        return ""
    rule = {"floor": "> 2 std", "effect": "the paper's sign, > 2 std", "spread": "reported, no claim"}
    lines = ["", "Orderings (gap = our mean of the row minus our mean of the other; std: the two cells' restarts "
             "pooled; `experiments/table5_orderings.py`):", "",
             "| comparison | task | gap, ours | 2 × pooled std | paper's gap | needs | shown |", "|---|---|---|---|---|---|---|"]
    for item in found:
        spread = "–" if item["pooled_std"] is None else f"{SPREADS * item['pooled_std']:.1f}"
        paper = "–" if item["paper_gap"] is None else f"{item['paper_gap']:+.1f}"
        squad_floor = item["kind"] == "floor" and item["column"] == "squad"
        needs = f">= {SQUAD_FLOOR_POINTS:.0f} points" if squad_floor else rule[item["kind"]]
        if item["shown"] is None:
            verdict = "beyond the spread" if item["beyond_spread"] else "within the spread"
        elif item["shown"]:
            verdict = "yes"
        else:
            verdict = "no spread (1 restart)" if item["pooled_std"] is None and item["column"] != "squad" else "**no**"
        lines.append(f"| {item['row']} vs {item['against']} | {column_names.get(item['column'], item['column'])} | "
                     f"{item['gap']:+.1f} | {spread} | {paper} | {needs} | {verdict} |")
    return "\n".join(lines) + "\n"
