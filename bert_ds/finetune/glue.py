"""Fine-tune on GLUE: `python bert_ds/finetune/glue.py --task sst2 --data-dir glue_data --output out/`.

`--task all` runs the nine tasks one after another (OUTPUT/<task>/ each) and writes the GLUE
average without WNLI (the BERT paper's Table 1 convention) to OUTPUT/results.json. Data: a local
glue_data folder as GLUE's download script writes it, or `--dataset nyu-mll/glue` (the hub).
Test predictions are written in GLUE's submission format when a test split is present.
"""

from __future__ import annotations

import sys
from pathlib import Path


import numpy as np

from bert_ds.finetune.data.tasks import GLUE_TASKS, FinetuneDataError, eval_name, get_task
from bert_ds.finetune.task import FinetuneTask, folder_or_hub

DEFAULT_SEQ_LENGTH = 128
SMALL_TASKS = ("cola", "stsb", "mrpc", "rte")
"""The paper's small GLUE tasks, where BERT-LARGE fine-tuning was sometimes unstable and several
random restarts were run, the best on dev kept (§4.1)."""


def add_arguments(parser) -> None:
    parser.add_argument("--task", required=True, choices=sorted(GLUE_TASKS) + ["all"], help="GLUE task, or all")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data-dir", default=None, help="glue_data folder (or one task's folder)")
    source.add_argument("--dataset", default=None, help="hub dataset id, e.g. nyu-mll/glue")
    parser.add_argument("--small-task-restarts", type=int, default=None,
                        help=f"restarts on {', '.join(SMALL_TASKS)} (the paper's small tasks; default: --restarts)")


def _data_spec(args) -> str:
    return folder_or_hub(args, "a glue_data folder", "e.g. nyu-mll/glue")


def _test_available(task, data: str) -> bool:
    from bert_ds.finetune.data.glue import glue_file

    if data.startswith("hf:"):
        return True
    try:
        glue_file(task, data, task.test_splits[0])
        return True
    except FinetuneDataError:
        return False


def build_task(task_name: str, data: str, tokenizer, max_length: int, say=print):
    """TaskData for one GLUE task: features, scoring, prediction files."""
    from bert_ds.finetune.batches import pair_feature
    from bert_ds.finetune.core import TaskData
    from bert_ds.finetune.data.glue import load_glue
    from bert_ds.finetune.metrics import glue_metrics

    task = get_task(task_name)

    def load(split):
        examples, report = load_glue(task, split, data)
        say(f"{task.name} {split}: {report.summary()}")
        features = [dict(pair_feature(tokenizer, e.text_a, e.text_b, max_length), label=e.label) for e in examples]
        return examples, features

    train_examples, train = load("train")
    dev_examples = {eval_name(task, s): load(s) for s in task.dev_splits}
    test_examples = {s: load(s) for s in task.test_splits} if _test_available(task, data) else {}

    def predictions(outputs):
        stacked = np.stack(outputs)
        return stacked[:, 0] if task.is_regression else stacked.argmax(-1)

    def evaluate(name, outputs):
        examples = dev_examples[name][0]
        predicted = predictions(outputs)
        return glue_metrics(task, predicted, [e.label for e in examples]), predicted

    def label_text(value):
        return f"{float(value):.3f}" if task.is_regression else task.labels[int(value)]

    def write_outputs(output, dev_predictions, test_outputs):
        for name, predicted in dev_predictions.items():
            rows = [f"{e.guid}\t{label_text(p)}\t{label_text(e.label)}" for e, p in zip(dev_examples[name][0], predicted)]
            (Path(output) / f"{name}_dev_predictions.tsv").write_text("guid\tprediction\tlabel\n" + "\n".join(rows) + "\n")
        for split, outputs in test_outputs.items():
            rows = [f"{e.guid}\t{label_text(p)}" for e, p in zip(test_examples[split][0], predictions(outputs))]
            (Path(output) / task.submission_files[split]).write_text("index\tprediction\n" + "\n".join(rows) + "\n")

    first = eval_name(task, task.dev_splits[0])

    def flatten(metrics):
        flat = dict(metrics[first])
        for name, values in metrics.items():
            if name != first:
                flat.update({f"{name}_{k}": v for k, v in values.items()})
        return flat

    kind = dict(kind="sequence_classification", num_labels=1 if task.is_regression else len(task.labels),
                problem_type="regression" if task.is_regression else "single_label_classification")
    if not task.is_regression:
        kind["id2label"] = {str(i): label for i, label in enumerate(task.labels)}
    return TaskData(
        name=task.name, kind="classification", train=train, dev={n: f for n, (_, f) in dev_examples.items()},
        test={s: f for s, (_, f) in test_examples.items()}, evaluate=evaluate,
        select=lambda metrics: float(metrics[first][task.metrics[0]]), flatten=flatten, write_outputs=write_outputs,
        num_labels=kind["num_labels"], regression=task.is_regression, export_task=kind,
    )


def task_names(args) -> list[str]:
    return list(GLUE_TASKS) if args.task == "all" else [args.task]


def task_restarts(args, name: str) -> int | None:
    """The restarts of one task: --small-task-restarts on the small tasks, else None (--restarts)."""
    from bert_ds.config import ConfigError

    if args.small_task_restarts is not None and not 1 <= args.small_task_restarts <= 1000:
        raise ConfigError(f"Invalid value for --small-task-restarts: {args.small_task_restarts} (1 to 1000).")
    return args.small_task_restarts if name in SMALL_TASKS else None


def plan_task(args, name: str):
    """The dry run's view of one task's data: its local files read and checked as the job reads them."""
    from bert_ds.finetune.data.glue import load_glue
    from bert_ds.finetune.plan import TaskPlan

    data, task = _data_spec(args), get_task(name)
    outputs = 1 if task.is_regression else len(task.labels)
    if data.startswith("hf:"):
        return TaskPlan(task.name, "classification", outputs, None, f"{data}: hub dataset, read at start")
    splits = ("train",) + task.dev_splits + (task.test_splits if _test_available(task, data) else ())
    reports = [load_glue(task, split, data)[1] for split in splits]
    return TaskPlan(task.name, "classification", outputs, reports[0].rows, "\n".join(r.summary() for r in reports))


def write_glue_average(job, summaries: dict) -> None:
    """OUTPUT/results.json with the GLUE average without WNLI (the paper's Table 1 convention)."""
    from bert_ds.finetune.metrics import glue_average
    from bert_ds.finetune.outputs import RESULTS, write_json

    per_task = {}
    for name, summary in summaries.items():
        task = get_task(name)
        per_task[eval_name(task, task.dev_splits[0])] = {k: v for k, v in summary["metrics"].items() if "_" not in k}
        if name == "mnli":
            per_task["mnli-mm"] = {k.split("_", 1)[1]: v for k, v in summary["metrics"].items() if k.startswith("mnli-mm_")}
    average = glue_average(per_task)
    write_json(Path(job.start.output) / RESULTS, dict(task="glue", metrics=dict(glue_average=average), tasks=summaries))
    print(f"GLUE average (without WNLI): {average:.4f}", flush=True)


TASK = FinetuneTask(
    script="bert_ds/finetune/glue.py", description="Fine-tune BERT on a GLUE task.", default_seq_length=DEFAULT_SEQ_LENGTH,
    add_arguments=add_arguments, task_names=task_names, restarts=task_restarts, summarize=write_glue_average,
    build=lambda args, name, tokenizer, max_length, say: build_task(name, _data_spec(args), tokenizer, max_length, say),
    plan=plan_task,
)


def main(argv=None) -> int:
    return TASK.main(argv)


if __name__ == "__main__":
    sys.exit(main())
