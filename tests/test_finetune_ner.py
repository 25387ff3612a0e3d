"""Token tagging (CoNLL-2003 NER, `bert_ds/finetune/ner.py`): the CoNLL reader and the hub schema,
first-sub-token features and their way back, the seqeval entity scores, and a real job from the
tiny pre-trained checkpoint that learns a gazetteer fixture, keeps the best of its restarts,
writes CoNLL predictions and exports a BertForTokenClassification that tags the same."""

import json
import random
import re
import subprocess
import sys

import numpy as np
import pytest

from bert_ds.finetune.data.conll import CONLL2003_LABELS, conll_from_hub, label_list, load_conll, read_conll_file
from bert_ds.finetune.metrics import entity_metrics
from bert_ds.finetune.data.ner_features import conll_lines, tagging_features, word_tags
from bert_ds.finetune.data.tasks import FinetuneDataError
from bert_ds.model.heads import IGNORE_INDEX
from tests.support.helpers import REPO, run_entrypoint
from tests.support.task_fixtures import write_conll

SCRIPT = "bert_ds/finetune/ner.py"
CONLL_2003 = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
. . O O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP I-LOC
"""


def test_reads_conll_2003_files_sentence_by_sentence(tmp_path):
    path = tmp_path / "eng.train"
    path.write_text(CONLL_2003)
    sentences, report = read_conll_file(path, "train")
    assert [s.words for s in sentences] == [("EU", "rejects", "German", "call", "."), ("Peter", "Blackburn"), ("BRUSSELS",)]
    assert sentences[0].tags == ("I-ORG", "O", "I-MISC", "O", "O") and sentences[1].tags == ("I-PER", "I-PER")
    assert [s.guid for s in sentences] == ["train-3", "train-9", "train-14"]  # the line of each first word
    assert report.rows == 3
    assert label_list(sentences) == ("O", "I-LOC", "I-MISC", "I-ORG", "I-PER")
    two_columns = tmp_path / "two.txt"
    two_columns.write_text("Alice B-PER\nsaid O\n\nBob B-PER\n")
    assert [s.tags for s in read_conll_file(two_columns, "dev")[0]] == [("B-PER", "O"), ("B-PER",)]
    words_only = tmp_path / "test.txt"
    words_only.write_text("Alice\nsaid\n\nBob\n")
    assert [(s.words, s.tags) for s in read_conll_file(words_only, "test")[0]] == [(("Alice", "said"), None), (("Bob",), None)]
    # A folder in either naming; the B-, I-, E-, S- prefixes of one type sort together after O.
    (tmp_path / "eng.testa").write_text("x B-ORG\ny E-ORG\nz S-LOC\n")
    dev, _, hub_names = load_conll("dev", str(tmp_path))
    assert hub_names is None and label_list(dev) == ("O", "S-LOC", "B-ORG", "E-ORG")


@pytest.mark.parametrize("text, message", [
    ("EU NNP B-NP I-ORG\nrejects\n", "line 2: expected 'word ... tag'"),
    ("EU NNP B-NP I-ORG\n\nrejects VBZ B-VP ORG\n", "line 3: tag 'ORG' is not O or B-/I-/E-/S-"),
    ("Alice\nBob B-PER\n", "line 2: expected one word"),
    ("Alice B-PER\n\xff\n", "line 2 is not valid UTF-8"),
])
def test_a_malformed_line_is_named(tmp_path, text, message):
    path = tmp_path / "train.txt"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(FinetuneDataError, match=f"{path}: {message}"):
        read_conll_file(path, "train")


def test_the_hub_schema_uses_its_label_names():
    rows = [dict(tokens=["EU", "rejects"], ner_tags=[3, 0]), dict(tokens=[], ner_tags=[]), dict(tokens=["Bonn"], ner_tags=[5])]
    sentences, report, names = conll_from_hub(rows, "train", "eriktks/conll2003")
    assert names == CONLL2003_LABELS and report.rows == 2
    assert [(s.words, s.tags) for s in sentences] == [(("EU", "rejects"), ("B-ORG", "O")), (("Bonn",), ("B-LOC",))]
    # A real hub split: its ClassLabel names the ints (here in an order of its own).
    import datasets

    names = ["O", "B-LOC", "I-LOC"]
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})
    split = datasets.Dataset.from_dict({"tokens": [["in", "New", "York"]], "ner_tags": [[0, 1, 2]]}, features=features)
    sentences, _, found = conll_from_hub(split, "dev", "someone/conll2003-parquet")
    assert found == tuple(names) and sentences[0].tags == ("O", "B-LOC", "I-LOC")
    with pytest.raises(FinetuneDataError, match="record 0: 2 tokens but 1 ner_tags"):
        conll_from_hub([dict(tokens=["a", "b"], ner_tags=[0])], "dev", "x")
    with pytest.raises(FinetuneDataError, match="record 0: ner_tag 9 is not one of 0..8"):
        conll_from_hub([dict(tokens=["a"], ner_tags=[9])], "dev", "x")


def test_the_hubs_parquet_branch_layout_reads_at_a_revision(tmp_path):
    """The default `--dataset` is the hub's Parquet copy (`@refs/convert/parquet`); a folder laid out
    as that branch is (`conll2003/<split>/0000.parquet`) reads every split with its ClassLabel names."""
    import datasets

    from bert_ds.finetune.data.conll import CONLL_HUB_ID
    from bert_ds.finetune.data.tasks import parse_hub_spec

    assert parse_hub_spec(f"hf:{CONLL_HUB_ID}") == ("eriktks/conll2003", None, "refs/convert/parquet")
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=list(CONLL2003_LABELS)))})
    for number, split in enumerate(["train", "validation", "test"]):
        (tmp_path / "conll2003" / split).mkdir(parents=True)
        rows = {"tokens": [["Bonn", "says"] * (number + 1)], "ner_tags": [[5, 0] * (number + 1)]}
        datasets.Dataset.from_dict(rows, features=features).to_parquet(tmp_path / "conll2003" / split / "0000.parquet")
    for number, split in enumerate(["train", "dev", "test"]):
        sentences, report, names = load_conll(split, f"hf:{tmp_path}@refs/convert/parquet")
        assert names == CONLL2003_LABELS and sentences[0].tags == ("B-LOC", "O") * (number + 1)
        assert report.source.endswith({"dev": "validation"}.get(split, split))
    with pytest.raises(FinetuneDataError, match="at revision v9: Couldn't find"):
        load_conll("dev", f"hf:{tmp_path / 'missing'}@v9")


class _Pieces:
    """A tokenizer that splits each word into one piece per 3 characters (ids count up)."""
    cls_id, sep_id, unk_id = 101, 102, 100

    def encode_batch(self, words):
        return [[1000 + len(w) * 10 + i for i in range(0, len(w), 3)] for w in words]


def test_features_label_first_sub_tokens_and_windows_cover_every_word_once(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("Washington B-LOC\nis O\nbig O\n\n" + "".join(f"w{i}xxxx O\n" for i in range(7)))
    sentences, _ = read_conll_file(path, "train")
    ids = {"O": 0, "B-LOC": 1}
    features, windows = tagging_features(sentences, _Pieces(), ids, max_length=8)
    # "Washington" is 4 pieces: its tag on the first, IGNORE on the rest and on [CLS]/[SEP].
    assert features[0]["input_ids"][0] == 101 and features[0]["input_ids"][-1] == 102
    assert features[0]["tags"] == [IGNORE_INDEX, 1, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 0, 0, IGNORE_INDEX]
    assert windows[0].positions == [1, 5, 6]
    # Seven 2-piece words in windows of 6 pieces: 3 + 3 + 1 words, every word tagged once.
    assert [(w.sentence, w.first_word, len(w.positions)) for w in windows[1:]] == [(1, 0, 3), (1, 3, 3), (1, 6, 1)]
    assert all(len(f["input_ids"]) <= 8 for f in features)
    # Back to words: the argmax at each first piece.
    labels = ("O", "B-LOC")
    outputs = []
    for feature in features:
        logits = np.zeros((len(feature["input_ids"]), 2))
        logits[:, 0] = 1.0
        logits[1, :] = (0.0, 1.0)  # the window's first token says B-LOC
        outputs.append(logits)
    assert word_tags(sentences, windows, outputs, labels) == [
        ["B-LOC", "O", "O"], ["B-LOC", "O", "O", "B-LOC", "O", "O", "B-LOC"]]
    assert conll_lines(sentences[:1], [["B-LOC", "O", "O"]]) == "Washington B-LOC B-LOC\nis O O\nbig O O\n\n"


def test_entity_scores_are_seqevals_conlleval_reading():
    # IOB1 (CoNLL-2003's files) and IOB2 (the hub's) name the same entities and score alike.
    iob1 = [["I-PER", "I-PER", "O", "I-LOC", "B-LOC"]]
    iob2 = [["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]]
    assert entity_metrics(iob1, iob2)["f1"] == 1.0
    # Gold: PER(0-1), LOC(3), LOC(4). Predicted: PER(0) only partly right, LOC(3) right, one ORG extra.
    predicted = [["B-PER", "O", "O", "B-LOC", "B-ORG"]]
    scores = entity_metrics(iob2, predicted)
    assert scores["precision"] == pytest.approx(1 / 3) and scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(1 / 3) and scores["accuracy"] == pytest.approx(3 / 5)
    assert entity_metrics([["O"]], [["O"]])["f1"] == 0.0  # no entity anywhere: 0, not a warning
    with pytest.raises(ValueError):
        entity_metrics([["O", "O"]], [["O"]])


def test_learns_the_gazetteer_tags_writes_conll_predictions_and_exports(tmp_path, pretrained_tiny):
    """Bar: dev entity F1 >= 0.9 with two restarts (the better one kept), on names a 2-layer model
    learns; results.json scores the labelled test split; the exported BertForTokenClassification
    tags the dev sentences as the predictions file says."""
    data, out = tmp_path / "conll", tmp_path / "out"
    write_conll(data, random.Random(3))
    result = run_entrypoint(SCRIPT, ["--data-dir", str(data), "--init", pretrained_tiny, "--output", str(out),
                                     "--max-seq-length", "32", "--batch-size", "16", "--lr", "2e-3", "--epochs", "3",
                                     "--restarts", "2"])
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == "ner" and results["runs"] == 2 and set(results["metrics"]) == {"f1", "precision", "recall", "accuracy"}
    assert results["metrics"]["f1"] >= 0.9, results["metrics"]
    assert results["metrics"]["f1"] == max(run["score"] for run in results["all_runs"])
    assert results["head"] == {"bilstm": False, "pooling": None, "unpad": True}
    assert results["test_metrics"]["test"]["f1"] >= 0.9, results["test_metrics"]
    assert re.search(r"ner: \d tags: O (B-LOC )?I-LOC (B-ORG )?I-ORG (B-PER )?I-PER\n", result.stdout), result.stdout[-2000:]

    # The predictions file is CoNLL as conlleval reads it; its scores are the results'.
    blocks = [b.splitlines() for b in (out / "dev_predictions.txt").read_text().strip("\n").split("\n\n")]
    assert len(blocks) == 60 and all(len(line.split()) == 3 for block in blocks for line in block)
    golds = [[line.split()[1] for line in block] for block in blocks]
    predicted = [[line.split()[2] for line in block] for block in blocks]
    assert entity_metrics(golds, predicted) == pytest.approx(results["metrics"])
    assert len((out / "test_predictions.txt").read_text().strip("\n").split("\n\n")) == 30

    import torch
    import transformers

    from bert_ds.checkpoint.portable import open_portable
    from bert_ds.data.tokenizer.load import load_tokenizer
    from bert_ds.finetune.batches import collate

    hf_dir = tmp_path / "hf"
    command = [sys.executable, "-m", "bert_ds.checkpoint", "export-hf", str(out / "model"), str(hf_dir)]
    assert subprocess.run(command, capture_output=True, cwd=REPO, timeout=300).returncode == 0
    model, info = transformers.BertForTokenClassification.from_pretrained(hf_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    dev, _ = read_conll_file(data / "valid.txt", "dev")
    labels = tuple(model.config.id2label[i] for i in range(model.config.num_labels))
    tokenizer = load_tokenizer(open_portable(out / "model").tokenizer_dir)
    features, windows = tagging_features(dev, tokenizer, {label: i for i, label in enumerate(labels)}, 32)
    batch = collate(features, "tagging", tokenizer.pad_id)
    with torch.no_grad():
        logits = model.eval()(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    lengths = batch["attention_mask"].sum(-1).tolist()
    assert word_tags(dev, windows, [logits[i, :n].numpy() for i, n in enumerate(lengths)], labels) == predicted


def test_bad_data_is_one_error_line_naming_file_and_line(tmp_path, pretrained_tiny):
    data = tmp_path / "conll"
    write_conll(data, random.Random(0), train=4, dev=2, test=0)
    (data / "test.txt").unlink()
    lines = (data / "train.txt").read_text().splitlines()
    lines[3] = "broken"  # a token line without its tag
    (data / "train.txt").write_text("\n".join(lines))
    for extra in ([], ["--dry-run", "cpu"]):  # the real job and its launch plan read the files alike
        result = run_entrypoint(SCRIPT, ["--data-dir", str(data), "--init", pretrained_tiny, "--output", str(tmp_path / "o"), *extra])
        assert result.returncode == 2, result.stderr[-2000:]
        error = result.stderr.strip().splitlines()[-1]
        assert error.startswith("error: ") and f"{data / 'train.txt'}: line 4: expected 'word ... tag'" in error
        assert "Traceback" not in result.stderr
    missing = run_entrypoint(SCRIPT, ["--data-dir", str(tmp_path / "nowhere"), "--output", str(tmp_path / "o"), "--dry-run", "cpu"])
    assert missing.returncode == 2 and "nowhere: no such folder" in missing.stderr and "Traceback" not in missing.stderr
