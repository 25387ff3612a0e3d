"""How much of a GLUE single-sentence task's dev set its training set already holds as phrases.

GLUE's SST-2 trains on phrases of the Stanford Sentiment Treebank's parse trees as well as whole
sentences, and a dev sentence often contains a long training phrase with the same label. A model
fine-tuned from random weights can then score well by memorising phrases, which raises the "No
pre-training" floor of Table 5 (docs/finetuning.md) and narrows every gap above it. This counts,
for each dev sentence, the longest training phrase of at least `--min-words` words it contains
(whole words), the share of the sentence that phrase covers, and whether its label is the
sentence's: "looking the phrase up" as a classifier of those sentences. Both files are read as
fine-tuning reads them (finetune/data/glue.py's load_glue). With `--predictions` (a fine-tuning
run's `TASK_dev_predictions.tsv`) it also splits that run's dev accuracy between the sentences
holding such a phrase (covering at least half of them) and the rest.

Usage: python benchmarks/glue_phrase_overlap.py --data-dir GLUE_DIR [--task sst2] [--min-words 5 8]
       [--predictions OUTPUT/sst2_dev_predictions.tsv ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bert_ds.finetune.data.glue import load_glue  # noqa: E402


def longest_phrases(dev: list, train: list, min_words: int) -> list:
    """For each dev example, (words covered by its longest contained training phrase / its words,
    that phrase's label == its label), or None when it contains no phrase that long."""
    phrases = {}  # one label per phrase text (the first seen), longest first below
    for example in train:
        text = " ".join(example.text_a.split())
        if len(text.split()) >= min_words:
            phrases.setdefault(text, example.label)
    by_length = sorted(phrases.items(), key=lambda item: -len(item[0].split()))
    found = []
    for example in dev:
        words = example.text_a.split()
        padded = f" {' '.join(words)} "
        match = next(((text, label) for text, label in by_length if f" {text} " in padded), None)
        found.append(None if match is None else (len(match[0].split()) / len(words), match[1] == example.label))
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="glue_data folder (or the task's folder)")
    parser.add_argument("--task", default="sst2", help="a single-sentence GLUE task")
    parser.add_argument("--min-words", type=int, nargs="+", default=[5, 8])
    parser.add_argument("--predictions", nargs="*", default=[], help="TASK_dev_predictions.tsv files of fine-tuning runs")
    args = parser.parse_args(argv)
    runs = {path: read_predictions(Path(path)) for path in args.predictions}
    train, _ = load_glue(args.task, "train", args.data_dir)
    dev, _ = load_glue(args.task, "dev", args.data_dir)
    print(f"{args.task}: {len(train):,} training rows, {len(dev):,} dev sentences ({args.data_dir})")
    for min_words in args.min_words:
        found = longest_phrases(dev, train, min_words)
        hits = [item for item in found if item is not None]
        print(f"  a training phrase of >= {min_words} words inside: {len(hits)} ({100 * len(hits) / len(dev):.1f}%)")
        for share in (0.5, 0.8):
            covering = [same for covered, same in hits if covered >= share]
            agree = 100 * sum(covering) / len(covering) if covering else float("nan")
            print(f"    covering >= {share:.0%} of the sentence: {len(covering)} ({100 * len(covering) / len(dev):.1f}%), "
                  f"the phrase's label is the sentence's in {agree:.1f}%")
        held = [item is not None and item[0] >= 0.5 for item in found]
        for path, correct in runs.items():
            split = {True: [], False: []}
            for example, holds in zip(dev, held):
                if example.guid not in correct:
                    raise SystemExit(f"error: {path} has no row {example.guid}: not this task's dev predictions.")
                split[holds].append(correct[example.guid])
            said = ", ".join(f"{name} {100 * sum(split[key]) / len(split[key]):.1f}% of {len(split[key])}"
                             for name, key in (("holding one", True), ("the rest", False)) if split[key])
            print(f"    {path}: accuracy on the sentences {said}")
    return 0


def read_predictions(path: Path) -> dict:
    """{guid: prediction == label} from a fine-tuning run's dev predictions (guid, prediction, label)."""
    lines = path.read_text().splitlines()
    if not lines or lines[0].split("\t") != ["guid", "prediction", "label"]:
        raise SystemExit(f"error: {path}: not a dev predictions file (header guid, prediction, label).")
    rows = [line.split("\t") for line in lines[1:] if line]
    return {guid: predicted == label for guid, predicted, label in rows}


if __name__ == "__main__":
    sys.exit(main())
