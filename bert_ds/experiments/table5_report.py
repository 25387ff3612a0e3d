"""table5.json, table5.md and table5.png of the Table 5 experiment (experiments/table5.py): every
restart's dev score per cell, mean ± std, the selected run, and the paper's numbers beside ours."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from bert_ds.experiments.shared_output import save_figure, write_whole
from bert_ds.experiments.table5_curves import plot_curves
from bert_ds.experiments.table5_orderings import markdown as orderings_markdown
from bert_ds.experiments.table5_orderings import orderings
from bert_ds.training.loop.metrics_file import crossing

ROWS = ("MLM+NSP", "No NSP", "LTR & No NSP", "+ BiLSTM", "No pre-training")
"""The paper's row names, in its order (BERT-BASE is its "MLM+NSP" row), and the floor: the same
fine-tuning from random weights (not in the paper)."""

# Devlin et al. 2018, Table 5 (dev sets, BERT-BASE architecture): MNLI-m, QNLI, MRPC and SST-2
# accuracy, SQuAD v1.1 F1.
PAPER = {
    "MLM+NSP": {"mnli": 84.4, "qnli": 88.4, "mrpc": 86.7, "sst2": 92.7, "squad": 88.5},
    "No NSP": {"mnli": 83.9, "qnli": 84.9, "mrpc": 86.5, "sst2": 92.6, "squad": 87.9},
    "LTR & No NSP": {"mnli": 82.1, "qnli": 84.3, "mrpc": 77.5, "sst2": 92.1, "squad": 77.8},
    "+ BiLSTM": {"mnli": 82.1, "qnli": 84.1, "mrpc": 75.7, "sst2": 91.6, "squad": 84.9},
}
COLUMN_NAMES = {"mnli": "MNLI-m (Acc)", "qnli": "QNLI (Acc)", "mrpc": "MRPC (Acc)", "rte": "RTE (Acc)",
                "sst2": "SST-2 (Acc)", "squad": "SQuAD v1.1 (F1)"}


def cell_summary(scores: list[float], selected: float, selection_budget: dict) -> dict:
    """One cell: every restart's dev score, their mean and (population) std, the selected run's."""
    return dict(scores=scores, mean=statistics.fmean(scores), std=statistics.pstdev(scores) if len(scores) > 1 else 0.0,
                best=max(scores), selected=selected, selection_budget=selection_budget)


# The number each column reports (the paper's Table 5: accuracy, SQuAD F1), as a percentage.
METRIC = {"squad": ("f1", 1.0)}
DEFAULT_METRIC = ("accuracy", 100.0)


def results_cell(results: dict, column: str) -> dict:
    """A cell's summary from the task's results.json: each run's final-epoch dev score."""
    name, factor = METRIC.get(column, DEFAULT_METRIC)

    def score(metrics: dict) -> float:
        return factor * float(next(iter(metrics.values()))[name])

    scores = [score(run["history"][-1]["dev"]) for run in results["all_runs"]]
    selected = factor * float(results["metrics"][name])
    return dict(cell_summary(scores, selected, results["selection_budget"]), metric=name)


def write_report(output: Path, record: dict) -> None:
    """table5.json (the record with its orderings), table5.md, table5.png and (with the record's
    `curves`) pretraining.png, each written whole then moved in place."""
    record = dict(record, orderings=orderings(record, PAPER))
    write_whole(output / "table5.json", json.dumps(record, indent=1))
    write_whole(output / "table5.md", markdown(record))
    plot(record, output / "table5.png")
    if record.get("curves"):
        plot_curves(record["curves"], output / "pretraining.png")


def markdown(record: dict) -> str:
    """The table shaped like the paper's Table 5: one row per objective, ours (mean ± std over the
    restarts) with the paper's number beside it."""
    columns = record["columns"]
    header = "| Tasks | " + " | ".join(f"{COLUMN_NAMES.get(c, c)} ours | paper" for c in columns) + " |"
    cap = record["settings"].get("max_train_examples")
    lines = [f"Table 5 in miniature, scale `{record['scale']}`: dev scores, mean ± std over "
             f"{record['restarts']} restart(s) per cell; pre-training {record['budget']['pretraining_tokens']:,} token "
             "positions (sequences × length, padding included) per model" + (f"; fine-tuning on the first {cap:,} training examples of each task" if cap
                            else "; fine-tuning on whole training sets") + ".",
             "", header, "|---|" + "---|---|" * len(columns)]
    for row in ROWS:
        cells = record["cells"].get(row, {})
        values = []
        for column in columns:
            cell = cells.get(column)
            ours = f"{cell['mean']:.1f} ± {cell['std']:.1f}" if cell else "–"
            paper = PAPER.get(row, {}).get(column)
            values += [ours, f"{paper:.1f}" if paper is not None else "–"]
        lines.append(f"| {row} | " + " | ".join(values) + " |")
    found = record.get("orderings", orderings(record, PAPER))
    return "\n".join(lines) + "\n" + orderings_markdown(found, COLUMN_NAMES) + pretraining_markdown(record)


OBJECTIVE_NAMES = {"mlm_nsp": "MLM+NSP", "mlm": "No NSP", "ltr": "LTR & No NSP"}


CROSSING_LEVELS = (0.15, 0.20, 0.25, 0.30)
"""Held-out accuracies whose first crossing table5.md lists: a model on the frequent-token plateau
sits near 12-15% on English; leaving it shows as these levels reached, and the tokens it took."""


def crossings_markdown(curves: dict) -> str:
    """When each model's held-out accuracy first reached each CROSSING_LEVELS level (millions of
    tokens, linear between evaluations): when it left the plateau, comparable across models that
    are at different steps. A level its first evaluation had already passed is "≤" that
    evaluation's tokens. Unfinished models are included and marked."""
    rows = []
    for name, curve in curves.items():
        points = [p for p in curve["points"] if p["tokens"] is not None and p["accuracy"] is not None]
        if not points:
            continue
        cells = []
        for level in CROSSING_LEVELS:
            tokens = crossing(points, level, x_key="tokens", accuracy_key="accuracy")
            bound = "≤ " if tokens is not None and points[0]["accuracy"] >= level else ""
            cells.append("–" if tokens is None else f"{bound}{tokens / 1e6:.1f}")
        last = points[-1]
        label = OBJECTIVE_NAMES.get(name, name) + ("" if curve["finished"] else " (unfinished)")
        rows.append(f"| {label} | " + " | ".join(cells)
                    + f" | {100 * last['accuracy']:.1f}% at {last['tokens'] / 1e6:.1f}M (step {last['step']:,}) |")
    if not rows:
        return ""
    header = ["", "Tokens consumed (millions) when each model's held-out accuracy (LTR: next-token) first "
              "reached a level (linear between evaluations; – not yet):", "",
              "| model | " + " | ".join(f"{level:.0%}" for level in CROSSING_LEVELS) + " | last evaluation |",
              "|---|" + "---|" * (len(CROSSING_LEVELS) + 1)]
    return "\n".join(header + rows) + "\n"


def pretraining_markdown(record: dict) -> str:
    """Each pre-trained model's last held-out evaluation (LTR: next-token accuracy), if evaluated,
    and when each model's held-out accuracy reached the CROSSING_LEVELS."""
    models = {name: summary for name, summary in record.get("pretraining", {}).items() if summary}
    curves = ("\nEvery evaluation so far, against the tokens consumed: pretraining.png (`curves` in "
              "table5.json; an unfinished model dashed).\n" + crossings_markdown(record["curves"])) if record.get("curves") else ""
    if not models:
        return curves
    lines = ["", "Held-out accuracy of each pre-trained model at its last evaluation (masked tokens; LTR: next token):",
             "", "| model | step | tokens | held-out accuracy | NSP accuracy |", "|---|---|---|---|---|"]
    for name, m in models.items():
        nsp = f"{100 * m['held_out_nsp_accuracy']:.1f}%" if m.get("held_out_nsp_accuracy") is not None else "–"
        lines.append(f"| {OBJECTIVE_NAMES.get(name, name)} | {m['step']:,} | {m.get('consumed_tokens') or 0:,} | "
                     f"{100 * m['held_out_accuracy']:.1f}% | {nsp} |")
    return "\n".join(lines) + "\n" + curves


def plot(record: dict, path: Path) -> None:
    """Bars per task and objective (mean, error bar: std over the restarts), the paper's value as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = record["columns"]
    figure, axes = plt.subplots(1, len(columns), figsize=(4 * len(columns), 3.5), squeeze=False)
    for axis, column in zip(axes[0], columns):
        rows = [row for row in ROWS if column in record["cells"].get(row, {})]
        means = [record["cells"][row][column]["mean"] for row in rows]
        stds = [record["cells"][row][column]["std"] for row in rows]
        axis.bar(range(len(rows)), means, yerr=stds, capsize=4, color="#4C72B0", label="ours")
        paper = [PAPER.get(row, {}).get(column, math.nan) for row in rows]
        axis.plot(range(len(rows)), paper, "o", color="#DD8452", label="paper")
        axis.set_xticks(range(len(rows)), rows, rotation=20, fontsize=8)
        axis.set_title(COLUMN_NAMES.get(column, column), fontsize=10)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(f"Table 5 in miniature ({record['scale']})", fontsize=11)
    figure.tight_layout()
    save_figure(figure, path)  # several jobs may write the report
