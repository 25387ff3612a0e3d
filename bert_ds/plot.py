"""Draw pre-training curves from one or more metrics files (JSON Lines) into one PNG.

    python -m bert_ds.plot runs/base/metrics.jsonl runs/large/metrics.jsonl -o curves.png
    python -m bert_ds.plot runs/base/metrics.jsonl --x tokens --labels base --title "BERT-base"
    python -m bert_ds.plot runs/*/metrics.jsonl --crossings 0.18 0.2 0.25   # and a table, see below

A metrics file is what `--metrics-file` writes (bert_ds/training/loop/metrics.py): training lines (they
have "loss") and held-out evaluation lines (they have "eval/mlm_loss" and no "loss"); other lines
and unknown keys are ignored. A step that appears twice keeps its last line per kind
(bert_ds/training/loop/metrics_file.py reads the file).

Panels: MLM loss, NSP loss (only if some run has NSP), accuracy, learning rate, throughput. One
colour per run; training solid, evaluation dashed with markers. `--x both` (the default) draws one
row against optimizer steps and one against consumed tokens. Labels default to each file's parent
directory name (runs/base/metrics.jsonl -> "base"), or its stem when those names clash.

`--crossings LEVEL ...` also prints a Markdown table: for each run, the step (or, with `--x tokens`
or `--x seconds`, the tokens or training seconds) at which its held-out masked-LM accuracy first
reaches each level, linear between the two evaluations around it; "-" where it never does. Runs
that leave a plateau at different times compare by it better than by their accuracy at one step.

Exit status 0 (the output path is printed), or 2 with one `error: ...` line on stderr naming the
file (and line) that could not be read.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from bert_ds.training.loop.metrics_file import MetricsFileError, Records, crossing, number, read_metrics

X_AXES = {"steps": ("step", "optimizer step"), "tokens": ("consumed_tokens", "consumed tokens"),
          # Training wall time, for files that record it (the learning-parity benchmark's).
          "seconds": ("train_seconds", "training time (s)")}
TRAIN, EVAL = {"ls": "-", "lw": 1.6}, {"ls": "--", "lw": 1.2, "marker": "o", "ms": 4}
# (kind, key, series name, style): NSP accuracy is dotted / square-marked so it stays apart from MLM.
PANELS = (
    ("MLM loss", False, [("train", "mlm_loss", "train MLM", TRAIN), ("eval", "eval/mlm_loss", "eval MLM", EVAL)]),
    ("NSP loss", True, [("train", "nsp_loss", "train NSP", TRAIN), ("eval", "eval/nsp_loss", "eval NSP", EVAL)]),
    ("accuracy", False, [
        ("train", "mlm_accuracy", "train MLM", TRAIN), ("eval", "eval/mlm_accuracy", "eval MLM", EVAL),
        ("train", "nsp_accuracy", "train NSP", {"ls": ":", "lw": 1.6}),
        ("eval", "eval/nsp_accuracy", "eval NSP", {**EVAL, "marker": "s"}),
    ]),
    ("learning rate", False, [("train", "lr", "lr", TRAIN)]),
    ("throughput (tokens/s)", False, [("train", "tokens_per_s", "tokens/s", TRAIN)]),
)


def default_labels(paths: Sequence[str]) -> list[str]:
    """Parent directory names if they tell the files apart, else stems, else the paths as given."""
    for name in (lambda p: Path(p).resolve().parent.name, lambda p: Path(p).stem, str):
        labels = [name(p) for p in paths]
        if all(labels) and len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in paths]


def _series(records: Records, x_key: str, y_key: str) -> tuple[list[float], list[float]]:
    points = [(number(r.get(x_key)), number(r.get(y_key))) for r in records]
    points = [(x, y) for x, y in points if math.isfinite(x)]
    return [x for x, _ in points], [y for _, y in points]


def _has_nsp(runs: Sequence[tuple[Records, Records]]) -> bool:
    keys = ("nsp_loss", "eval/nsp_loss")
    return any(math.isfinite(number(r.get(k))) for t, e in runs for r in t + e for k in keys)


def draw(runs: Sequence[tuple[Records, Records]], labels: Sequence[str], output: str,
         x: str = "both", title: Optional[str] = None) -> None:
    """Write the figure: one row of panels per x axis, one colour per run."""
    nsp = _has_nsp(runs)
    panels = [p for p in PANELS if nsp or not p[1]]
    axes_rows = ["steps", "tokens"] if x == "both" else [x]
    fig = Figure(figsize=(4.3 * len(panels), 3.6 * len(axes_rows) + (0.4 if title else 0)), dpi=110)
    FigureCanvasAgg(fig)
    grid = fig.subplots(len(axes_rows), len(panels), squeeze=False)
    colours = [f"C{i % 10}" for i in range(len(runs))]
    for row, x_name in zip(grid, axes_rows):
        x_key, x_label = X_AXES[x_name]
        for ax, (panel_title, _, series) in zip(row, panels):
            for (train, evals), label, colour in zip(runs, labels, colours):
                for kind, key, name, style in series:
                    xs, ys = _series(train if kind == "train" else evals, x_key, key)
                    if any(math.isfinite(y) for y in ys):
                        # A one-series panel's title already names the series: the run is enough.
                        name = label if len(series) == 1 else f"{label}: {name}"
                        ax.plot(xs, ys, color=colour, label=name, **style)
            _style_axes(ax, panel_title, x_label, x_name)
    if title:
        fig.suptitle(title, fontsize=14)
    fig.tight_layout()
    fig.savefig(output)


def crossings_table(runs: Sequence[tuple[Records, Records]], labels: Sequence[str], levels: Sequence[float],
                    x: str = "steps") -> str:
    """A Markdown table: one row per run, one column per level, the crossing on the `x` axis."""
    x_key, x_label = X_AXES[x]
    lines = [f"| run ({x_label} at held-out MLM accuracy) | " + " | ".join(f"{level:.1%}" for level in levels) + " |",
             "|---|" + "---|" * len(levels)]
    for (_, evals), label in zip(runs, labels):
        cells = [crossing(evals, level, x_key) for level in levels]
        lines.append(f"| {label} | " + " | ".join("-" if c is None else f"{c:,.0f}" for c in cells) + " |")
    return "\n".join(lines)


def _style_axes(ax: Any, title: str, x_label: str, x_name: str) -> None:
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(x_label, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
    if x_name == "tokens":
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 1.2M, not 1200000
    if title == "learning rate":
        ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_ds.plot", description="Plot pre-training curves.")
    parser.add_argument("metrics", nargs="+", help="metrics .jsonl files (--metrics-file of pre-training)")
    parser.add_argument("-o", "--output", default="curves.png", help="PNG to write (default: curves.png)")
    parser.add_argument("--labels", nargs="+", help="one run name per file (default: parent directory names)")
    parser.add_argument("--x", choices=("steps", "tokens", "seconds", "both"), default="both", help="x axis (default: both)")
    parser.add_argument("--title", help="figure title")
    parser.add_argument("--crossings", nargs="+", type=float, metavar="LEVEL",
                        help="also print where each run's held-out MLM accuracy first reaches each LEVEL (0-1)")
    args = parser.parse_args(argv)
    bad_levels = [level for level in args.crossings or () if not 0.0 < level <= 1.0]
    if bad_levels:
        print(f"error: --crossings: an accuracy level lies in (0, 1], got {bad_levels[0]:g}", file=sys.stderr)
        return 2
    if args.labels is not None and len(args.labels) != len(args.metrics):
        print(f"error: --labels has {len(args.labels)} names for {len(args.metrics)} files", file=sys.stderr)
        return 2
    try:
        runs = [read_metrics(path) for path in args.metrics]
    except MetricsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    labels = args.labels or default_labels(args.metrics)
    if args.crossings:
        print(crossings_table(runs, labels, args.crossings, "steps" if args.x == "both" else args.x))
    output = Path(args.output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        draw(runs, labels, str(output), args.x, args.title)
    except OSError as exc:
        print(f"error: {output}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
