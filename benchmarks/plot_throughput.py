"""Bar chart of training tokens/s, bert_ds vs Hugging Face, one panel per preset and precision
(the JSON's keys: "<preset>" for fp32, "<preset>_bf16"), from train_throughput's JSON.

Usage: python benchmarks/plot_throughput.py throughput.json docs/throughput.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv=None) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    source, target = (argv or sys.argv[1:])[:2]
    figures = json.loads(Path(source).read_text())
    presets = list(figures)
    ours = [figures[p]["bert_ds_tokens_per_s"] for p in presets]
    theirs = [figures[p]["hf_tokens_per_s"] for p in presets]
    fig, axes = plt.subplots(1, len(presets), figsize=(3.2 * len(presets), 3.2), squeeze=False)
    for axis, preset, a, b in zip(axes[0], presets, ours, theirs):
        bars = axis.bar(["bert_ds", "Hugging Face"], [a, b], color=["#2b6cb0", "#a0aec0"])
        axis.bar_label(bars, labels=[f"{a:,.0f}", f"{b:,.0f}"], fontsize=8)
        first = figures[preset]
        axis.set_title(f"{first['preset']} {first['precision']}: {first['seq_length']} x {first['batch']} ({a / b:.2f}x)",
                       fontsize=9)
        axis.set_ylabel("training tokens / s")
    first = figures[presets[0]]
    fig.suptitle(f"{first['device']}, {first['threads']} threads", fontsize=9)
    fig.tight_layout()
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=120)


if __name__ == "__main__":
    main()
