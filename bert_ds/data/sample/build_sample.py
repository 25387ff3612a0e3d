"""Rebuild the built-in sample corpus from the project's shared copy of the source texts.

Books are copied byte for byte (dirty bytes included on purpose: a BOM, CRLF line ends and an
ISO-8859-1 file exercise the loader's lenient decoding). WikiText-2 is turned into one JSON record
per article with a `text` field, the schema of the `wikimedia/wikipedia` hub dataset, and its
tokenisation (" @-@ ", spaces before punctuation) is undone so it reads like Wikipedia text.

Usage: python bert_ds/data/sample/build_sample.py PATH/TO/shared/corpus
"""

import json
import re
import shutil
import sys
from pathlib import Path

BOOKS = [
    "austen-persuasion.txt",
    "chesterton-thursday.txt",
    "botchan.txt",
    "shakespeare-caesar.txt",
    "blake-poems.txt",
]
WIKI = ["wikitext2-valid.txt", "wikitext2-test.txt"]
_TITLE = re.compile(r"^ = ([^=].*?) = $")
_SECTION = re.compile(r"^ (?:= )+(.*?)(?: =)+ $")


def detokenize(line: str) -> str:
    line = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    line = re.sub(r" ([,.;:!?)\]'])", r"\1", line)
    line = re.sub(r"([(\[]) ", r"\1", line)
    return line.replace(" n't", "n't").strip()


def wiki_articles(path: Path):
    title, paragraphs = None, []
    for raw in path.read_text(encoding="utf-8").splitlines():
        title_match = _TITLE.match(raw)
        if title_match:
            if title is not None:
                yield {"title": title, "text": "\n\n".join(paragraphs)}
            title, paragraphs = detokenize(title_match.group(1)), []
            continue
        section = _SECTION.match(raw)
        text = detokenize(section.group(1) if section else raw)
        if text:
            paragraphs.append(text)
    if title is not None:
        yield {"title": title, "text": "\n\n".join(paragraphs)}


def main(shared_corpus: str) -> None:
    source, here = Path(shared_corpus), Path(__file__).parent
    for name in BOOKS:
        shutil.copyfile(source / "books" / name, here / "books" / name)
    for name in WIKI:
        with open(here / "wiki" / name.replace(".txt", ".jsonl"), "w", encoding="utf-8") as out:
            for article in wiki_articles(source / "wiki" / name):
                out.write(json.dumps(article, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
