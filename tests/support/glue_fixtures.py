"""Tiny GLUE folders in the exact layout of GLUE's download script, for fine-tuning tests.

Sentences carry a learnable cue: label 1 (or the first class) when a "positive" cue pair is in
the text. The columns, headers and quirks are the real ones: CoLA without a header, MRPC's
header with a byte order mark, STS-B's many columns with the score last, QQP's ids, MNLI's parse
columns and two dev and two test files.
"""

import random

WORDS = (
    "the of and to in is was he for it with as his on be at by this had not are but from or have an they which "
    "one you were her all she there would their we him been has when who will more no if out so said what up"
).split()
CUES = {1: ("excellent wonderful", "superb lovely"), 0: ("terrible awful", "dreadful horrible")}


def sentence(rng: random.Random, label: int, words: int = 8) -> str:
    body = rng.sample(WORDS, words)
    body.insert(rng.randrange(words + 1), rng.choice(CUES[label]))
    return " ".join(body)


def _write(path, header, rows, bom=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([("\ufeff" if bom else "") + "\t".join(header)] if header else []) + ["\t".join(map(str, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_sst2(root, rng: random.Random, train: int = 240, dev: int = 80, test: int = 20):
    folder = root / "SST-2"
    for split, n in (("train", train), ("dev", dev)):
        labels = [rng.randint(0, 1) for _ in range(n)]
        _write(folder / f"{split}.tsv", ["sentence", "label"], [(sentence(rng, y), y) for y in labels])
    _write(folder / "test.tsv", ["index", "sentence"], [(i, sentence(rng, i % 2)) for i in range(test)])


def write_all_tasks(root, seed: int = 0, n: int = 8):
    """All nine task folders, `n` rows per split (tiny: for plumbing, not learning)."""
    rng = random.Random(seed)
    write_sst2(root, rng, n, n, n)

    def pair(y):
        return sentence(rng, y), sentence(rng, y)

    def split_rows(make, header, test_header, folder, dev_names=("dev",), test_names=("test",)):
        for split in ("train",) + dev_names:
            _write(root / folder / f"{split}.tsv", header, [make(i, rng.randint(0, 1), True) for i in range(n)], bom=folder == "MRPC")
        for split in test_names:
            _write(root / folder / f"{split}.tsv", test_header, [make(i, rng.randint(0, 1), False) for i in range(n)])

    # CoLA: train/dev without header (source, label, original mark, sentence); test with one.
    for split in ("train", "dev"):
        _write(root / "CoLA" / f"{split}.tsv", None, [("gj04", y, "" if y else "*", sentence(rng, y)) for y in (rng.randint(0, 1) for _ in range(n))])
    _write(root / "CoLA" / "test.tsv", ["index", "sentence"], [(i, sentence(rng, i % 2)) for i in range(n)])
    split_rows(lambda i, y, labelled: (y, 100 + i, 200 + i, *pair(y)) if labelled else (i, 100 + i, 200 + i, *pair(y)),
               ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"], "MRPC")
    stsb = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"]
    split_rows(lambda i, y, labelled: (i, "main", "f", "2012", i, "none", "none", *pair(y)) + ((f"{4.0 * y + rng.random():.3f}",) if labelled else ()),
               stsb + ["score"], stsb, "STS-B")
    split_rows(lambda i, y, labelled: (i, 2 * i, 2 * i + 1, *pair(y), y) if labelled else (i, *pair(y)),
               ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], ["id", "question1", "question2"], "QQP")
    mnli = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
            "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
    classes = ("entailment", "neutral", "contradiction")
    split_rows(lambda i, y, labelled: (i, i, f"{i}e", "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)", *pair(y)) + ((classes[y], classes[y]) if labelled else ()),
               mnli + ["label1", "gold_label"], mnli, "MNLI", ("dev_matched", "dev_mismatched"), ("test_matched", "test_mismatched"))
    entail = ("entailment", "not_entailment")
    split_rows(lambda i, y, labelled: (i, *pair(y)) + ((entail[y],) if labelled else ()),
               ["index", "question", "sentence", "label"], ["index", "question", "sentence"], "QNLI")
    for folder, labels in (("RTE", entail), ("WNLI", ("0", "1"))):
        split_rows(lambda i, y, labelled, labels=labels: (i, *pair(y)) + ((labels[y],) if labelled else ()),
                   ["index", "sentence1", "sentence2", "label"], ["index", "sentence1", "sentence2"], folder)
