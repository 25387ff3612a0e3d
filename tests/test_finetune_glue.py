"""`bert_ds/finetune/glue.py` end to end: real jobs from a tiny pre-trained checkpoint on GLUE
folders in the download script's exact format (tests/support/glue_fixtures.py)."""

import json
import random

import pytest
import torch

from tests.support.glue_fixtures import write_all_tasks, write_sst2
from tests.support.golden import assert_golden
from tests.support.helpers import run_entrypoint

SCRIPT = "bert_ds/finetune/glue.py"
SMALL = ["--max-seq-length", "48", "--epochs", "1", "--batch-size", "4", "--lr", "1e-3"]


def _glue(args, nproc=1):
    result = run_entrypoint(SCRIPT, args, nproc=nproc)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _results(folder):
    return json.loads((folder / "results.json").read_text())


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue_data")
    write_sst2(root, random.Random(0))
    return root


def test_learns_a_sentiment_cue_and_writes_every_output(tmp_path, sst2, pretrained_tiny):
    """Bar: >= 0.9 dev accuracy on a cue a 2-layer model can learn (the head, loss, optimizer and
    schedule are wired right); the exported model predicts what bert_ds predicted."""
    out = tmp_path / "out"
    # --no-unpad: the golden record predates unpadding (test_unpadded_training_learns_the_cue_too).
    job = _glue(["--task", "sst2", "--data-dir", str(sst2), "--init", pretrained_tiny, "--output", str(out),
                 "--max-seq-length", "48", "--batch-size", "16", "--lr", "2e-3", "--epochs", "5", "--no-unpad"])
    # Into a pipe (not a terminal) the progress bar is drawn every 30 s, not for each of the 75 steps.
    assert job.stderr.count("it/s") <= 2 * 5, job.stderr[-2000:]
    results = _results(out)
    assert results["task"] == "sst2" and results["runs"] == 1
    assert results["metrics"]["accuracy"] >= 0.9, results["metrics"]
    assert results["selected"] == {"batch_size": 16, "lr": 2e-3, "epochs": 5, "seed": 42}
    assert len(results["all_runs"][0]["history"]) == 5  # evaluated after every epoch
    assert_golden("glue-sst2-dropout", _fingerprint(results))
    submission = (out / "SST-2.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 21
    assert {line.split("\t")[1] for line in submission[1:]} <= {"0", "1"}
    dev = (out / "sst2_dev_predictions.tsv").read_text().splitlines()[1:]
    assert len(dev) == 80

    # The selected model exports to BertForSequenceClassification with the same predictions.
    import subprocess
    import sys

    import torch
    import transformers

    from bert_ds.checkpoint.portable import open_portable
    from bert_ds.data.tokenizer.load import load_tokenizer
    from bert_ds.finetune.batches import collate, pair_feature
    from tests.support.helpers import REPO

    hf_dir = tmp_path / "hf"
    command = [sys.executable, "-m", "bert_ds.checkpoint", "export-hf", str(out / "model"), str(hf_dir)]
    assert subprocess.run(command, capture_output=True, cwd=REPO, timeout=300).returncode == 0
    model, info = transformers.BertForSequenceClassification.from_pretrained(hf_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    tokenizer = load_tokenizer(open_portable(out / "model").tokenizer_dir)
    sentences = [line.split("\t")[0] for line in (sst2 / "SST-2" / "dev.tsv").read_text().splitlines()[1:]]
    batch = collate([pair_feature(tokenizer, s, None, 48) for s in sentences], "classification", tokenizer.pad_id)
    with torch.no_grad():
        logits = model.eval()(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    assert logits.argmax(-1).tolist() == [int(line.split("\t")[1]) for line in dev]


def test_unpadded_training_learns_the_cue_too(tmp_path, sst2, pretrained_tiny):
    """The default, unpadded encoder (model/unpadding.py) with dropout learns what the padded one
    does; its losses are golden values of their own (its dropout masks cover fewer rows)."""
    out = tmp_path / "out"
    _glue(["--task", "sst2", "--data-dir", str(sst2), "--init", pretrained_tiny, "--output", str(out),
           "--max-seq-length", "48", "--batch-size", "16", "--lr", "2e-3", "--epochs", "5", "--no-save-model"])
    results = _results(out)
    assert results["metrics"]["accuracy"] >= 0.9, results["metrics"]
    assert_golden("glue-sst2-unpadded-dropout", _fingerprint(results))


def test_all_nine_tasks_and_the_glue_average(tmp_path, pretrained_tiny):
    data, out = tmp_path / "glue_data", tmp_path / "out"
    write_all_tasks(data)
    _glue(["--task", "all", "--data-dir", str(data), "--init", pretrained_tiny, "--output", str(out), *SMALL])
    submissions = {"cola": ["CoLA.tsv"], "sst2": ["SST-2.tsv"], "mrpc": ["MRPC.tsv"], "stsb": ["STS-B.tsv"],
                   "qqp": ["QQP.tsv"], "mnli": ["MNLI-m.tsv", "MNLI-mm.tsv"], "qnli": ["QNLI.tsv"], "rte": ["RTE.tsv"],
                   "wnli": ["WNLI.tsv"]}
    metric_names = {"cola": {"mcc"}, "stsb": {"pearson", "spearman"}, "mrpc": {"f1", "accuracy"}, "qqp": {"f1", "accuracy"},
                    "mnli": {"accuracy", "mnli-mm_accuracy"}}
    per_task = {}
    for task, files in submissions.items():
        results = _results(out / task)
        assert set(results["metrics"]) == metric_names.get(task, {"accuracy"}), task
        for name in files:
            rows = (out / task / name).read_text().splitlines()
            assert rows[0] == "index\tprediction" and len(rows) == 9, (task, name)
        per_task[task] = results["metrics"]
    assert all(float(row.split("\t")[1]) >= -10 for row in (out / "stsb" / "STS-B.tsv").read_text().splitlines()[1:])

    from bert_ds.finetune.metrics import glue_average

    expected = {"cola": per_task["cola"], "sst2": per_task["sst2"], "mrpc": per_task["mrpc"], "stsb": per_task["stsb"],
                "qqp": per_task["qqp"], "mnli-m": {"accuracy": per_task["mnli"]["accuracy"]},
                "mnli-mm": {"accuracy": per_task["mnli"]["mnli-mm_accuracy"]}, "qnli": per_task["qnli"], "rte": per_task["rte"]}
    assert _results(out)["metrics"]["glue_average"] == pytest.approx(glue_average(expected))


def test_grid_and_restarts_keep_the_best_dev_run(tmp_path, sst2, pretrained_tiny):
    out = tmp_path / "out"
    _glue(["--task", "sst2", "--data-dir", str(sst2), "--init", pretrained_tiny, "--output", str(out),
           "--max-seq-length", "48", "--grid", "--grid-batch-sizes", "16,32", "--grid-lrs", "2e-3",
           "--grid-epochs", "1", "--restarts", "2"])
    results = _results(out)
    assert results["runs"] == 4
    scores = {(r["settings"]["batch_size"], r["settings"]["lr"], r["seed"]): r["score"] for r in results["all_runs"]}
    best = max(scores, key=scores.get)
    selected = results["selected"]
    assert scores[(selected["batch_size"], selected["lr"], selected["seed"])] == scores[best]
    same = [s for (b, lr, _), s in scores.items() if (b, lr) == (selected["batch_size"], selected["lr"])]
    assert results["restarts"]["count"] == 2 and results["restarts"]["mean"] == pytest.approx(sum(same) / 2)
    assert results["metrics"]["accuracy"] == scores[best]


def test_tensor_and_data_parallel_match_one_process(tmp_path, sst2, pretrained_tiny):
    """Without dropout, TP, DP (ZeRO-2, ZeRO-3) and the unpadded encoder (alone and under TP) all
    train what one padded process trains. The golden records are of the padded runs (--no-unpad),
    which predate unpadding."""
    common = ["--task", "sst2", "--data-dir", str(sst2), "--init", pretrained_tiny, "--dropout", "0",
              "--max-seq-length", "48", "--batch-size", "16", "--lr", "1e-3", "--epochs", "2", "--no-save-model"]
    one = _results(_output(tmp_path, "one", common + ["--no-unpad"]))
    assert_golden("glue-sst2-no-dropout", _fingerprint(one))
    runs = (("tp2", ["--tensor-parallel", "2", "--no-unpad"], 2), ("dp2", ["--zero-stage", "2", "--no-unpad"], 2),
            ("dp2-zero3", ["--zero-stage", "3", "--no-unpad"], 2), ("unpadded", [], 1),
            ("tp2-unpadded", ["--tensor-parallel", "2"], 2))
    for name, extra, nproc in runs:
        keep = name.startswith("dp2")  # the kept models of ZeRO-2 and ZeRO-3 are compared below
        split = _results(_output(tmp_path, name, [a for a in common if not keep or a != "--no-save-model"] + extra,
                                 nproc=nproc))
        if name in ("tp2", "dp2"):  # dp2-zero3: the same figures as dp2, to the tolerance below
            assert_golden(f"glue-sst2-{name}-no-dropout", _fingerprint(split))
        for a, b in zip(one["all_runs"][0]["history"], split["all_runs"][0]["history"], strict=True):
            assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-4), name
            assert a["dev"] == b["dev"], name
    # ZeRO-3 held each weight in halves: the kept model gathers them whole, as ZeRO-2's has them.
    from safetensors.torch import load_file

    zero2, zero3 = (load_file(tmp_path / name / "model" / "model.safetensors") for name in ("dp2", "dp2-zero3"))
    assert zero2.keys() == zero3.keys()
    for key in zero2:
        torch.testing.assert_close(zero3[key], zero2[key], rtol=0, atol=1e-5, msg=key)


def _fingerprint(results) -> list[float]:
    """Every epoch's mean training loss and dev metrics of the first run (golden values)."""
    values = []
    for epoch in results["all_runs"][0]["history"]:
        values.append(epoch["train_loss"])
        values += [metric for dev in epoch["dev"].values() for _, metric in sorted(dev.items()) if isinstance(metric, float)]
    return values


def _output(tmp_path, name, args, nproc=1):
    out = tmp_path / name
    _glue(args + ["--output", str(out)], nproc=nproc)
    return out


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: (d / "SST-2" / "dev.tsv").write_text("sentence\tlbl\nsome words\t1\n"), "dev.tsv"),
        (lambda d: (d / "SST-2" / "train.tsv").write_text("sentence\tlabel\nsome words\t7\n"), "train.tsv: line 2"),
        (lambda d: (d / "SST-2" / "train.tsv").unlink(), "train"),
    ],
    ids=["missing-column", "label-out-of-range", "missing-file"],
)
def test_bad_data_is_a_named_error(tmp_path, sample_tokenizer, change, message):
    from bert_ds.finetune.glue import build_task
    from bert_ds.finetune.data.tasks import FinetuneDataError

    data = tmp_path / "glue_data"
    write_sst2(data, random.Random(1), 8, 8, 0)
    change(data)
    with pytest.raises(FinetuneDataError, match=message.replace(".", r"\.")):
        build_task("sst2", str(data), sample_tokenizer, 32, say=lambda text: None)


def test_bad_data_through_the_entrypoint_is_one_clear_line(tmp_path, pretrained_tiny):
    data = tmp_path / "glue_data"
    write_sst2(data, random.Random(1), 8, 8, 0)
    (data / "SST-2" / "train.tsv").write_text("sentence\tlabel\nsome words\t7\n")
    result = run_entrypoint(SCRIPT, ["--task", "sst2", "--data-dir", str(data), "--init", pretrained_tiny,
                                     "--output", str(tmp_path / "out"), *SMALL])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "train.tsv" in error[0], result.stderr[-2000:]


def test_bad_init_is_one_clear_line(tmp_path, sst2):
    result = run_entrypoint(SCRIPT, ["--task", "sst2", "--data-dir", str(sst2), "--init", str(tmp_path / "nothing"),
                                     "--output", str(tmp_path / "out"), *SMALL])
    assert result.returncode == 2 and "Traceback" not in result.stderr and "--init" in result.stderr


def test_init_from_a_hugging_face_folder(tmp_path, sst2):
    """--init with a Hugging Face BERT folder: imported on the fly (OUTPUT/init), its vocab.txt
    becomes the tokenizer, the run trains and reports."""
    import transformers

    from tests.support.glue_fixtures import WORDS

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS) | {"excellent", "wonderful", "superb",
              "lovely", "terrible", "awful", "dreadful", "horrible"})
    hf = tmp_path / "hf"
    config = transformers.BertConfig(vocab_size=len(tokens), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=256)
    transformers.BertForMaskedLM(config).save_pretrained(hf)
    (hf / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
    out = tmp_path / "out"
    result = _glue(["--task", "sst2", "--data-dir", str(sst2), "--init", str(hf), "--output", str(out), *SMALL])
    assert "initialised" in result.stdout  # BertForMaskedLM has no pooler: reported, then drawn
    assert (out / "init" / "portable.json").is_file()
    assert _results(out)["init"] == str(hf) and 0.0 <= _results(out)["metrics"]["accuracy"] <= 1.0
