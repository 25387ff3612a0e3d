"""Fine-tune on SWAG: `python bert_ds/finetune/swag.py --data-dir swagaf/data --output out/`.

Data: a folder with the official train.csv, val.csv (and test.csv), or `--dataset [HUB_ID]`
(default allenai/swag). As in the paper, each example becomes four sequences
[CLS] sent1 [SEP] sent2 ending_i [SEP]; the model scores each by its [CLS] state and a softmax
over the four picks the ending. Metric: "accuracy" on val, which also selects the run.

Files in --output: val_predictions.csv (guid, prediction, label, prob0..prob3) and, when a test
split is present, test_predictions.csv (guid, prediction, prob0..prob3); guid is "<split>-<line
of the CSV record>" (hub data: "<split>-<record index>"), prediction the ending index 0..3.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


import numpy as np

from bert_ds.finetune.data.swag import NUM_CHOICES, SWAG_FILES, SWAG_HUB_ID
from bert_ds.finetune.data.tasks import FinetuneDataError, parse_hub_spec
from bert_ds.finetune.task import FinetuneTask, folder_or_hub

DEFAULT_SEQ_LENGTH = 128  # the paper's SWAG setting
NAME = "swag"
PROBABILITIES = [f"prob{i}" for i in range(NUM_CHOICES)]


def add_arguments(parser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data-dir", default=None, help="folder with the official train.csv, val.csv (and test.csv)")
    source.add_argument("--dataset", nargs="?", const=SWAG_HUB_ID, default=None,
                        help=f"hub dataset id (without a value: {SWAG_HUB_ID})")


def data_spec(args) -> str:
    return folder_or_hub(args, "a folder with SWAG's train.csv and val.csv", SWAG_HUB_ID)


def has_test_split(data: str) -> bool:
    """The hub copy always has a test split; a local folder when it holds test.csv."""
    return parse_hub_spec(data) is not None or (Path(data) / SWAG_FILES["test"]).is_file()


class PreEncoded:
    """A tokenizer's ids for texts encoded in one bulk call beforehand: `pair_feature` encodes one
    text per call, which costs ~100 us each, and SWAG repeats every context four times."""

    def __init__(self, tokenizer, texts):
        self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id
        unique = list(dict.fromkeys(texts))
        self.ids = dict(zip(unique, tokenizer.encode_batch(unique)))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(self.ids[text]) for text in texts]  # copies: pair_feature trims them in place


def second_segment(example, ending: str) -> str:
    return f"{example.start} {ending}".strip()


def example_features(examples, tokenizer, max_length: int) -> list[dict]:
    """Per example: four [CLS] sent1 [SEP] sent2 ending_i [SEP] sequences and the label (None in test)."""
    from bert_ds.finetune.batches import pair_feature

    texts = [e.context for e in examples] + [second_segment(e, ending) for e in examples for ending in e.endings]
    encoded = PreEncoded(tokenizer, texts)
    features = []
    for example in examples:
        choices = [pair_feature(encoded, example.context, second_segment(example, ending), max_length)
                   for ending in example.endings]
        features.append(dict(input_ids=[c["input_ids"] for c in choices],
                             token_type_ids=[c["token_type_ids"] for c in choices], label=example.label))
    return features


def _write_csv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def build_task(data: str, tokenizer, max_length: int, say=print):
    """TaskData for SWAG: four scored sequences per example, accuracy, prediction files."""
    from bert_ds.finetune.batches import softmax
    from bert_ds.finetune.core import TaskData
    from bert_ds.finetune.metrics import accuracy
    from bert_ds.finetune.data.swag import load_swag

    def load(split):
        examples, report = load_swag(split, data)
        say(f"{NAME} {split}: {report.summary()}")
        if not examples and split != "test":
            raise FinetuneDataError(f"{report.source}: no examples.")
        return examples, example_features(examples, tokenizer, max_length)

    _, train = load("train")
    dev_examples, dev = load("val")
    test_examples, test = load("test") if has_test_split(data) else (None, None)

    def evaluate(_name, outputs):
        scores = np.stack(outputs)  # [examples, choices]
        return {"accuracy": accuracy(scores.argmax(-1), [e.label for e in dev_examples])}, scores

    def rows(examples, scores, with_label: bool):
        for example, probabilities in zip(examples, softmax(np.asarray(scores, dtype=np.float64))):
            label = [example.label] if with_label else []
            yield [example.guid, int(probabilities.argmax()), *label, *(f"{p:.6f}" for p in probabilities)]

    def write_outputs(output, dev_predictions, test_outputs):
        out = Path(output)
        _write_csv(out / "val_predictions.csv", ["guid", "prediction", "label", *PROBABILITIES],
                   rows(dev_examples, dev_predictions[NAME], True))
        if "test" in test_outputs:
            _write_csv(out / "test_predictions.csv", ["guid", "prediction", *PROBABILITIES],
                       rows(test_examples, test_outputs["test"], False))

    return TaskData(
        name=NAME, kind="multiple_choice", train=train, dev={NAME: dev}, test={"test": test} if test else {},
        evaluate=evaluate, select=lambda metrics: float(metrics[NAME]["accuracy"]),
        flatten=lambda metrics: dict(metrics[NAME]), write_outputs=write_outputs, num_labels=1,
        export_task=dict(kind="multiple_choice", num_labels=1),
    )


def plan_task(args, _name=None):
    """The dry run's view of the data: local files read and checked as the job reads them."""
    from bert_ds.finetune.data.swag import load_swag
    from bert_ds.finetune.plan import TaskPlan

    data = data_spec(args)
    if parse_hub_spec(data) is not None:
        return TaskPlan(NAME, "multiple_choice", 1, None, f"{data}: hub dataset, read at start", NUM_CHOICES)
    reports = [load_swag(split, data)[1] for split in ("train", "val") + (("test",) if has_test_split(data) else ())]
    return TaskPlan(NAME, "multiple_choice", 1, reports[0].rows, "\n".join(r.summary() for r in reports), NUM_CHOICES)


TASK = FinetuneTask(
    script="bert_ds/finetune/swag.py", description="Fine-tune BERT on SWAG (multiple choice).",
    default_seq_length=DEFAULT_SEQ_LENGTH, add_arguments=add_arguments, plan=plan_task,
    build=lambda args, _name, tokenizer, max_length, say: build_task(data_spec(args), tokenizer, max_length, say),
)


def main(argv=None) -> int:
    return TASK.main(argv)


if __name__ == "__main__":
    sys.exit(main())
