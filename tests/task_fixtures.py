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
