"""The pre-training curves of the Table 5 experiment: each model's held-out evaluations against the
tokens it has consumed, from its metrics.jsonl, in table5.json (`curves`) and pretraining.png.

A row that does not clear the floor, or an ordering that does not show, is read first against these:
a model still on the frequent-token plateau (held-out masked accuracy near the share of the most
frequent tokens) has learnt little a task can use. Curves include unfinished models (running, or
stopped), marked so, since those are the ones in doubt while the experiment runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from bert_ds.experiments.shared_output import save_figure
from bert_ds.training.loop.metrics_file import read_metrics

CURVE_LABELS = {"mlm_nsp": "MLM+NSP (masked tokens)", "mlm": "No NSP (masked tokens)",
                "ltr": "LTR & No NSP (next token)"}


def pretraining_curves(output: Path, objectives: tuple, pretrained: Optional[dict] = None) -> dict:
    """{objective: {"finished": bool, "points": [{step, tokens, accuracy, loss, nsp_accuracy}]}} for
    every objective with a held-out evaluation in OUTPUT/pretrain/OBJECTIVE/metrics.jsonl, or, not
    adopted yet, in the metrics.jsonl of the run `pretrained` names for it (--pretrained: a run
    still training is shown too). A step evaluated twice (a run resumed before its next
    checkpoint) keeps its last evaluation."""
    curves = {}
    for objective in objectives:
        folder = output / "pretrain" / objective
        metrics = folder / "metrics.jsonl"
        if not metrics.exists() and objective in (pretrained or {}):
            metrics = Path(pretrained[objective]) / "metrics.jsonl"
        points = [dict(step=line["step"], tokens=line.get("consumed_tokens"), accuracy=line["eval/mlm_accuracy"],
                       loss=line.get("eval/mlm_loss"), nsp_accuracy=line.get("eval/nsp_accuracy"))
                  for line in read_metrics(metrics, while_written=True)[1] if "eval/mlm_accuracy" in line]
        if points:
            curves[objective] = dict(finished=(folder / "done.json").is_file(), points=points)
    return curves


def finished_summary(curve: Optional[dict]) -> dict:
    """A finished model's last held-out evaluation (masked-LM or, for LTR, next-token accuracy; NSP)
    for table5.json's `pretraining`; {} for a model still pre-training (another job's, a stopped one)."""
    if not curve or not curve["finished"]:
        return {}
    last = curve["points"][-1]
    return {"step": last["step"], "held_out_accuracy": last["accuracy"], "held_out_nsp_accuracy": last["nsp_accuracy"],
            "consumed_tokens": last["tokens"]}


def plot_curves(curves: dict, path: Path) -> None:
    """Held-out accuracy and loss against consumed tokens, a line per model (dashed while it is
    unfinished), written through a temporary file of this process (several jobs may)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (accuracy, loss) = plt.subplots(1, 2, figsize=(10, 3.8))
    for objective, curve in curves.items():
        points = [p for p in curve["points"] if p["tokens"] is not None]
        tokens = [p["tokens"] / 1e6 for p in points]
        label = CURVE_LABELS.get(objective, objective) + ("" if curve["finished"] else " (unfinished)")
        style = "-" if curve["finished"] else "--"
        accuracy.plot(tokens, [100 * p["accuracy"] for p in points], style, marker=".", label=label)
        loss.plot(tokens, [float("nan") if p["loss"] is None else p["loss"] for p in points], style, marker=".", label=label)
    accuracy.set(xlabel="tokens consumed (millions)", ylabel="held-out accuracy (%)", title="held-out token accuracy")
    loss.set(xlabel="tokens consumed (millions)", ylabel="held-out cross-entropy", title="held-out loss")
    accuracy.legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, path)
