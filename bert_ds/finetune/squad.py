"""Fine-tune on SQuAD: `python bert_ds/finetune/squad.py --version 1.1 --data-dir squad_data --output out/`.

Data: a folder with the official files (`train-v1.1.json`, `dev-v1.1.json`, or the v2.0 pair),
`--train-file` with `--dev-file`, or `--dataset [HUB_ID]` (default rajpurkar/squad, or
rajpurkar/squad_v2 for --version 2.0). Each question's context is cut into BERT's sliding windows;
every window is one training feature, and at evaluation the start/end logits of all windows of a
question are decoded together (squad_features.postprocess).

Scores use the official scripts' names: v1.1 "exact_match", "f1"; v2.0 "exact", "f1",
"HasAns_*", "NoAns_*" and "best_exact(_thresh)", "best_f1(_thresh)". For v2.0 the no-answer
threshold (null score - best span score above which the answer is "") is tuned on dev as
best_f1_thresh and used for predictions.json and the reported "exact"/"f1", unless
--null-score-diff-threshold fixes it; either way it is reported as "null_score_diff_threshold".
Runs are selected by f1 (v2.0: best_f1).

Files in --output: predictions.json (question id -> answer text, "" for no answer),
nbest_predictions.json and, for v2.0, null_odds.json, the official script's --na-prob-file.
A question without any valid span has infinite null odds, which JSON cannot hold: it is written
as NO_SPAN_NULL_ODDS (1e30), a finite number above any real logit difference, so the official
script still reads the file.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional


from bert_ds.finetune.data.tasks import FinetuneDataError
from bert_ds.finetune.task import FinetuneTask, data_option

DEFAULT_SEQ_LENGTH = 384
HUB_IDS = {"1.1": "rajpurkar/squad", "2.0": "rajpurkar/squad_v2"}
NO_SPAN_NULL_ODDS = 1e30
"""null_odds.json's stand-in for infinity (a question whose windows hold no valid span)."""


def add_arguments(parser) -> None:
    add = parser.add_argument
    add("--version", required=True, choices=sorted(HUB_IDS), help="SQuAD version")
    add("--data-dir", default=None, help="folder with the official train-vX.json and dev-vX.json")
    add("--dataset", nargs="?", const="", default=None,
        help="hub dataset id; without a value rajpurkar/squad (1.1) or rajpurkar/squad_v2 (2.0)")
    add("--train-file", default=None, help="a SQuAD JSON training file (with --dev-file)")
    add("--dev-file", default=None, help="a SQuAD JSON dev file (with --train-file)")
    add("--doc-stride", type=int, default=128, help="tokens between the starts of a context's windows")
    add("--max-query-length", type=int, default=64, help="question tokens kept")
    add("--n-best-size", type=int, default=20, help="candidate starts/ends per window, and n-best entries written")
    add("--max-answer-length", type=int, default=30, help="longest answer, in tokens")
    add("--null-score-diff-threshold", type=float, default=None,
        help="v2.0: answer \"\" when null score - best span score exceeds this (default: tuned on dev)")


def data_specs(args) -> dict[str, str]:
    """{"train": spec, "dev": spec} for load_squad, from exactly one of the data options."""
    source = data_option(args, "a folder with the official SQuAD files")
    if source == "--dataset":
        spec = f"hf:{args.dataset or HUB_IDS[args.version]}"
        return dict(train=spec, dev=spec)
    if source == "--data-dir":
        return dict(train=args.data_dir, dev=args.data_dir)
    return dict(train=args.train_file, dev=args.dev_file)


def check_options(args) -> None:
    from bert_ds.config import ConfigError

    checks = [("--doc-stride", args.doc_stride >= 1), ("--max-query-length", args.max_query_length >= 1),
              ("--n-best-size", args.n_best_size >= 1), ("--max-answer-length", args.max_answer_length >= 1)]
    bad = [name for name, ok in checks if not ok]
    if bad:
        raise ConfigError(f"Invalid value for {', '.join(bad)}: must be at least 1.")


def _window(feature, with_target: bool) -> dict:
    """A SquadFeature as the dict batches.collate takes."""
    window = dict(input_ids=feature.input_ids, token_type_ids=feature.token_type_ids)
    if with_target:
        window.update(start_position=feature.start_position, end_position=feature.end_position)
    return window


def build_task(version: str, specs: dict[str, str], tokenizer, max_length: int, doc_stride: int = 128,
               max_query_length: int = 64, n_best_size: int = 20, max_answer_length: int = 30,
               null_threshold: Optional[float] = None, say=print):
    """TaskData for SQuAD `version`: windows, decoding and scoring, prediction files."""
    from bert_ds.config import ConfigError
    from bert_ds.finetune.core import TaskData
    from bert_ds.finetune.metrics import squad_v1_metrics, squad_v2_metrics
    from bert_ds.finetune.outputs import write_json
    from bert_ds.finetune.data.squad import gold_answers, load_squad
    from bert_ds.finetune.data.squad_features import build_squad_features, postprocess

    version_2 = version == "2.0"
    name = "squad_v2" if version_2 else "squad"

    def load(split):
        examples, report = load_squad(split, specs[split], version)
        say(f"{name} {split}: {report.summary()}")
        if not examples:
            raise FinetuneDataError(f"{report.source}: no questions.")
        unanswerable = next((e.qid for e in examples if e.is_impossible), None)
        if not version_2 and unanswerable is not None:
            raise FinetuneDataError(
                f"{report.source}: question {unanswerable} has no answer (SQuAD 2.0 data?); use --version 2.0."
            )
        try:
            return examples, build_squad_features(examples, tokenizer, max_length, doc_stride, max_query_length)
        except ValueError as error:  # a question leaves no room for context
            raise ConfigError(f"{report.source}: {error} Raise --max-seq-length or lower --max-query-length.") from None

    _, train_windows = load("train")
    dev_examples, dev_windows = load("dev")
    golds = gold_answers(dev_examples)

    def evaluate(_name, outputs):
        starts, ends = zip(*outputs)
        decode = dict(n_best_size=n_best_size, max_answer_length=max_answer_length, version_2=version_2)
        if not version_2:
            predicted = postprocess(dev_examples, dev_windows, starts, ends, **decode)
            return squad_v1_metrics(golds, predicted.answers), predicted
        # Every question's best span first (threshold +inf); the threshold then decides which become "".
        predicted = postprocess(dev_examples, dev_windows, starts, ends, null_threshold=math.inf, **decode)
        tuned = squad_v2_metrics(golds, predicted.answers, na_probs=predicted.null_odds)
        threshold = tuned["best_f1_thresh"] if null_threshold is None else null_threshold
        predicted.answers = {qid: "" if predicted.null_odds[qid] > threshold else text
                             for qid, text in predicted.answers.items()}
        metrics = squad_v2_metrics(golds, predicted.answers)
        metrics.update({k: v for k, v in tuned.items() if k.startswith("best_")}, null_score_diff_threshold=threshold)
        return metrics, predicted

    def write_outputs(output, dev_predictions, _test_outputs):
        predicted, out = dev_predictions[name], Path(output)
        write_json(out / "predictions.json", predicted.answers)
        write_json(out / "nbest_predictions.json", predicted.nbest)
        if version_2:
            odds = {qid: value if math.isfinite(value) else NO_SPAN_NULL_ODDS for qid, value in predicted.null_odds.items()}
            write_json(out / "null_odds.json", odds)

    score = "best_f1" if version_2 else "f1"
    return TaskData(
        name=name, kind="span", train=[_window(f, True) for f in train_windows],
        dev={name: [_window(f, False) for f in dev_windows]}, evaluate=evaluate,
        select=lambda metrics: float(metrics[name][score]), flatten=lambda metrics: dict(metrics[name]),
        write_outputs=write_outputs, num_labels=2, export_task=dict(kind="question_answering", num_labels=2),
    )


def _build(args, _name, tokenizer, max_length: int, say):
    specs = data_specs(args)
    check_options(args)
    return build_task(args.version, specs, tokenizer, max_length, args.doc_stride, args.max_query_length,
                      args.n_best_size, args.max_answer_length, args.null_score_diff_threshold, say=say)


def plan_task(args, _name=None):
    """The dry run's view of the data: local files read and checked as the job reads them (the
    windows, hence the training features, are counted at start: at least one per question)."""
    from bert_ds.finetune.data.squad import load_squad
    from bert_ds.finetune.data.tasks import parse_hub_spec
    from bert_ds.finetune.plan import TaskPlan

    specs = data_specs(args)
    check_options(args)
    name = "squad_v2" if args.version == "2.0" else "squad"
    options = {"doc stride": args.doc_stride, "max query length": args.max_query_length,
               "n-best": args.n_best_size, "max answer length": args.max_answer_length}
    if parse_hub_spec(specs["train"]) is not None:
        return TaskPlan(name, "span", 2, None, f"{specs['train']}: hub dataset, read at start", options=options)
    reports = [load_squad(split, specs[split], args.version)[1] for split in ("train", "dev")]
    data = "\n".join(r.summary() for r in reports) + "\n(steps counted per question; windows add more at start)"
    return TaskPlan(name, "span", 2, reports[0].rows, data, options=options)


TASK = FinetuneTask(
    script="bert_ds/finetune/squad.py", description="Fine-tune BERT on SQuAD v1.1 or v2.0.",
    default_seq_length=DEFAULT_SEQ_LENGTH, add_arguments=add_arguments, build=_build, plan=plan_task,
)


def main(argv=None) -> int:
    return TASK.main(argv)


if __name__ == "__main__":
    sys.exit(main())
