"""Tiny SQuAD v1.1 (official JSON) and SWAG (official CSV) folders, and a few-row SST-2, for
plumbing tests (Slurm scripts, launch plans): the real formats, a handful of examples each."""

import csv
import json

WORDS = "the a film plot actor scene story music ending cast was is very quite rather good bad dull fun".split()


def sentence(rng, n: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def write_sst2_plumbing(root, rng) -> None:
    folder = root / "SST-2"
    folder.mkdir(parents=True)
    for split, count in (("train", 16), ("dev", 8)):
        rows = [f"{sentence(rng)}\t{i % 2}" for i in range(count)]
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")


def write_squad(root, rng) -> None:
    root.mkdir(parents=True)
    for split, count in (("train", 8), ("dev", 4)):
        paragraphs = []
        for i in range(count):
            answer = f"the {rng.choice(WORDS)} {rng.choice(WORDS)}"
            context = f"{sentence(rng)} It was {answer} in the end. {sentence(rng)}"
            qa = dict(id=f"{split}-{i}", question=f"what was it {i}?",
                      answers=[dict(text=answer, answer_start=context.index(answer))])
            paragraphs.append(dict(context=context, qas=[qa]))
        data = dict(version="1.1", data=[dict(title=f"{split} article", paragraphs=paragraphs)])
        (root / f"{split}-v1.1.json").write_text(json.dumps(data))


def write_swag(root, rng) -> None:
    root.mkdir(parents=True)
    header = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
              "ending0", "ending1", "ending2", "ending3", "label"]
    for split, count in (("train", 8), ("val", 4)):
        with open(root / f"{split}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for i in range(count):
                sent1, sent2 = sentence(rng), "then, the actor"
                endings = [sentence(rng, 4) for _ in range(4)]
                writer.writerow([i, f"video_{i}", i, f"{sent1} {sent2}", sent1, sent2, "gold", *endings, i % 4])


# CoNLL-2003 NER: entity names from small gazetteers among filler words, so a 2-layer model learns
# the tags; the files are in CoNLL-2003's own shape (-DOCSTART-, four columns, IOB1 tags). No two
# words of different tags share a first sub-token under the sample's sentencepiece model (the
# tagger reads first sub-tokens only: "tokyo" starts with "to"'s piece, "initech" with "in"'s).
PEOPLE = ("peter brown", "mary white", "john green")
PLACES = ("london", "berlin", "madrid", "new york")
COMPANIES = ("globex", "umbrella industries", "stark enterprises")
FILLER = "he she said went to the in met with from and visited works at for by on yesterday today".split()


def conll_sentence(rng) -> list[tuple[str, str]]:
    """(word, IOB1 tag) pairs: filler words with one or two entities, never side by side (so no
    entity needs CoNLL-2003's B- tag, which only separates two adjacent ones of a type)."""
    tokens = [(word, "O") for word in rng.sample(FILLER, 5)]
    for _ in range(rng.randint(1, 2)):
        kind, names = rng.choice((("PER", PEOPLE), ("LOC", PLACES), ("ORG", COMPANIES)))
        free = [i for i in range(len(tokens) + 1)
                if (i == 0 or tokens[i - 1][1] == "O") and (i == len(tokens) or tokens[i][1] == "O")]
        at = rng.choice(free)
        tokens[at:at] = [(word, f"I-{kind}") for word in rng.choice(names).split()]
    return tokens


def write_conll(root, rng, train: int = 300, dev: int = 60, test: int = 30) -> None:
    """train.txt, valid.txt, test.txt as CoNLL-2003 ships them (word POS chunk NER, documents)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, count in (("train.txt", train), ("valid.txt", dev), ("test.txt", test)):
        lines = []
        for i in range(count):
            if i % 20 == 0:
                lines += ["-DOCSTART- -X- -X- O", ""]
            lines += [f"{word} NN I-NP {tag}" for word, tag in conll_sentence(rng)] + [""]
        (root / name).write_text("\n".join(lines), encoding="utf-8")
