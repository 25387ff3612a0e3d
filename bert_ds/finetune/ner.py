"""Fine-tune on CoNLL-2003 NER: `python bert_ds/finetune/ner.py --data-dir conll2003 --output out/`.

The paper's token tagging (§5.3, Figure 4d, Table 7): each word's tag is predicted from its first
sub-token's final state by a linear layer over the tag set (ner_features.py); no CRF, no
document context. Data: a folder of CoNLL files (train.txt / valid.txt / test.txt, or eng.train
/ eng.testa / eng.testb; conll_data.py), `--train-file` with `--dev-file` (and `--test-file`),
or `--dataset [HUB_ID]` in the hub's `conll2003` schema (default eriktks/conll2003). Metric:
entity-level F1 by seqeval in conlleval's way (metrics.entity_metrics), which also selects the
run; precision, recall and token accuracy beside it. The tag set is the training and dev files'
tags ("O" first), or the hub's ClassLabel names.

Files in --output: results.json (with `test_metrics` when the test split has gold tags, as
CoNLL-2003's does), dev_predictions.txt and test_predictions.txt in CoNLL form (`word gold
predicted` per token, a blank line between sentences, as conlleval reads them), and the
selected model (export-hf makes it a BertForTokenClassification with the tag names).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bert_ds.finetune.data.conll import CONLL2003_LABELS, CONLL_HUB_ID, label_list, load_conll, split_file
from bert_ds.finetune.data.tasks import FinetuneDataError, parse_hub_spec
from bert_ds.finetune.task import FinetuneTask, data_option

DEFAULT_SEQ_LENGTH = 128
NAME = "ner"


def add_arguments(parser) -> None:
    add = parser.add_argument
    add("--data-dir", default=None, help="folder with CoNLL files: train.txt, valid.txt (test.txt), or eng.train, eng.testa (eng.testb)")
    add("--dataset", nargs="?", const=CONLL_HUB_ID, default=None,
        help=f"hub dataset ID[:CONFIG][@REVISION] in the conll2003 schema (tokens, ner_tags); without a value "
             f"{CONLL_HUB_ID}")
    add("--train-file", default=None, help="a CoNLL training file (with --dev-file)")
    add("--dev-file", default=None, help="a CoNLL dev file (with --train-file)")
    add("--test-file", default=None, help="a CoNLL test file (optional, with --train-file)")


def data_specs(args) -> dict[str, str]:
    """{"train": spec, "dev": spec[, "test": spec]} from exactly one of the data options."""
    source = data_option(args, "a folder of CoNLL files", ("--train-file", "--dev-file", "--test-file"))
    if source == "--dataset":
        spec = f"hf:{args.dataset}"
        return dict(train=spec, dev=spec, test=spec)
    if source == "--data-dir":
        folder = Path(args.data_dir)
        if not folder.is_dir():
            raise FinetuneDataError(f"--data-dir {folder}: no such folder.")
        specs = dict(train=str(folder), dev=str(folder))
        if split_file(folder, "test") is not None:
            specs["test"] = str(folder)
        return specs
    return dict(train=args.train_file, dev=args.dev_file, **({"test": args.test_file} if args.test_file else {}))


def load_splits(specs: dict[str, str]) -> tuple[dict, tuple[str, ...], list]:
    """({split: sentences}, the tag set, each split's ReadReport); train and dev must be tagged
    and not empty."""
    splits, reports, hub_labels = {}, [], None
    for split, spec in specs.items():
        sentences, report, names = load_conll(split, spec)
        reports.append(report)
        if split != "test" and not sentences:
            raise FinetuneDataError(f"{report.source}: no sentences.")
        if split != "test" and sentences[0].tags is None:
            raise FinetuneDataError(f"{report.source}: line {sentences[0].guid.rsplit('-', 1)[1]}: one word and no tag; "
                                    f"the {split} file needs 'word ... tag' lines.")
        splits[split], hub_labels = sentences, names or hub_labels
    labels = hub_labels or label_list(*splits.values())
    return splits, labels, reports


def build_task(specs: dict[str, str], tokenizer, max_length: int, say=print):
    """TaskData for token tagging: first-sub-token features, entity F1, CoNLL prediction files."""
    from bert_ds.finetune.core import TaskData
    from bert_ds.finetune.metrics import entity_metrics
    from bert_ds.finetune.data.ner_features import conll_lines, tagging_features, word_tags

    splits, labels, reports = load_splits(specs)
    for split, report in zip(splits, reports):
        say(f"{NAME} {split}: {report.summary()}")
    say(f"{NAME}: {len(labels)} tags: {' '.join(labels)}")
    ids = {label: i for i, label in enumerate(labels)}
    featured = {split: tagging_features(sentences, tokenizer, ids, max_length) for split, sentences in splits.items()}

    def scored(split: str, outputs) -> tuple[dict, list]:
        predicted = word_tags(splits[split], featured[split][1], outputs, labels)
        return entity_metrics([s.tags for s in splits[split]], predicted), predicted

    def test_metrics(split: str, outputs):
        return scored(split, outputs)[0] if splits[split] and splits[split][0].tags is not None else None

    def write_outputs(output, dev_predictions, test_outputs):
        out = Path(output)
        (out / "dev_predictions.txt").write_text(conll_lines(splits["dev"], dev_predictions[NAME]), encoding="utf-8")
        if "test" in test_outputs:
            predicted = word_tags(splits["test"], featured["test"][1], test_outputs["test"], labels)
            (out / "test_predictions.txt").write_text(conll_lines(splits["test"], predicted), encoding="utf-8")

    has_test = bool(splits.get("test"))
    return TaskData(
        name=NAME, kind="tagging", train=featured["train"][0], dev={NAME: featured["dev"][0]},
        test={"test": featured["test"][0]} if has_test else {},
        evaluate=lambda _name, outputs: scored("dev", outputs), score_test=test_metrics if has_test else None,
        select=lambda metrics: float(metrics[NAME]["f1"]), flatten=lambda metrics: dict(metrics[NAME]),
        write_outputs=write_outputs, num_labels=len(labels),
        export_task=dict(kind="token_classification", num_labels=len(labels),
                         id2label={str(i): label for i, label in enumerate(labels)}),
    )


def plan_task(args, _name=None):
    """The dry run's view of the data: local files read and checked as the job reads them."""
    from bert_ds.finetune.plan import TaskPlan

    specs = data_specs(args)
    if parse_hub_spec(specs["train"]) is not None:
        return TaskPlan(NAME, "tagging", len(CONLL2003_LABELS), None, f"{specs['train']}: hub dataset, read at start")
    splits, labels, reports = load_splits(specs)
    return TaskPlan(NAME, "tagging", len(labels), len(splits["train"]),
                    "\n".join(r.summary() for r in reports) + f"\n{len(labels)} tags: {' '.join(labels)}")


TASK = FinetuneTask(
    script="bert_ds/finetune/ner.py", description="Fine-tune BERT on token tagging (CoNLL-2003 NER).",
    default_seq_length=DEFAULT_SEQ_LENGTH, add_arguments=add_arguments, plan=plan_task,
    build=lambda args, _name, tokenizer, max_length, say: build_task(data_specs(args), tokenizer, max_length, say),
)


def main(argv=None) -> int:
    return TASK.main(argv)


if __name__ == "__main__":
    sys.exit(main())
