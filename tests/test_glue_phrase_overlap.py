"""benchmarks/glue_phrase_overlap.py: the longest training phrase inside each dev sentence, matched on
whole words, its share of the sentence and whether its label agrees; read as fine-tuning reads."""

import os
import subprocess
import sys

from tests.support.helpers import REPO


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("sentence\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows))


def test_dev_sentences_holding_training_phrases_are_counted(tmp_path):
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        from glue_phrase_overlap import longest_phrases
    finally:
        sys.path.pop(0)
    from bert_ds.finetune.data.glue import load_glue

    _write(tmp_path / "SST-2" / "train.tsv", [
        ("a gorgeous and moving film about love", 1), ("gorgeous and moving film", 1),  # the longer one counts
        ("the plot never comes together at all", 0), ("not funny", 0)])
    _write(tmp_path / "SST-2" / "dev.tsv", [
        ("truly , a gorgeous and moving film about love .", 1),  # 7 of 10 words, label agrees
        ("the plot never comes together at all", 1),  # the whole sentence, label disagrees
        ("the plot never comes together at allegedly high speed", 0),  # "all" is not "allegedly": whole words
        ("not funny at all", 0)])  # the phrase is too short to count
    train, _ = load_glue("sst2", "train", str(tmp_path))
    dev, _ = load_glue("sst2", "dev", str(tmp_path))
    assert longest_phrases(dev, train, 5) == [(0.7, True), (1.0, False), None, None]
    assert longest_phrases(dev, train, 8) == [None, None, None, None]

    # A run's dev predictions (guid, prediction, label): right on the two sentences holding a phrase only.
    predictions = tmp_path / "sst2_dev_predictions.tsv"
    predictions.write_text("guid\tprediction\tlabel\ndev-2\t1\t1\ndev-3\t1\t1\ndev-4\t1\t0\ndev-5\t1\t0\n")
    shown = subprocess.run([sys.executable, "benchmarks/glue_phrase_overlap.py", "--data-dir", str(tmp_path),
                            "--min-words", "5", "--predictions", str(predictions)], capture_output=True, text=True,
                           cwd=REPO, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "a training phrase of >= 5 words inside: 2 (50.0%)" in shown.stdout
    assert "covering >= 80% of the sentence: 1 (25.0%), the phrase's label is the sentence's in 0.0%" in shown.stdout
    assert "accuracy on the sentences holding one 100.0% of 2, the rest 0.0% of 2" in shown.stdout
    predictions.write_text("guid\tprediction\tlabel\ndev-2\t1\t1\n")
    partial = subprocess.run([sys.executable, "benchmarks/glue_phrase_overlap.py", "--data-dir", str(tmp_path),
                              "--min-words", "5", "--predictions", str(predictions)], capture_output=True, text=True,
                             cwd=REPO, timeout=120)
    assert partial.returncode == 1 and "has no row dev-3: not this task's dev predictions" in partial.stderr
