"""Rebuild the built-in sample corpus.

Books are Project Gutenberg etexts copied byte for byte (dirty bytes included on purpose: a BOM,
CRLF line ends and an ISO-8859-1 file exercise the loader's lenient decoding).

Wikipedia is a real English Wikipedia dump (MediaWiki XML, May 2016, 106 articles), the one gensim
ships as test data. Its wikitext is turned into plain text the way the `wikimedia/wikipedia` hub
dataset is made (mwparserfromhell: references, tables, templates, files and categories dropped,
links kept as their text) and written one JSON record per article with that dataset's schema
(`id`, `url`, `title`, `text`). Articles alternate between the training file and the held-out file,
each capped at about 1.2 MB, so the demo evaluates on articles it never saw.

Usage:
    pip download gensim==4.4.0 --no-deps -d /tmp/gensim && unzip -o /tmp/gensim/*.whl \
        'gensim/test/test_data/enwiki-latest-pages-articles1*' -d /tmp/gensim
    python bert_ds/data/sample/build_sample.py BOOKS_DIR \
        /tmp/gensim/gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2
(BOOKS_DIR holds the five etexts named in BOOKS; needs `pip install mwparserfromhell`.)
"""

import bz2
import json
import re
import shutil
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

BOOKS = [
    "austen-persuasion.txt",
    "chesterton-thursday.txt",
    "botchan.txt",
    "shakespeare-caesar.txt",
    "blake-poems.txt",
]
TRAIN_FILE, HELD_OUT_FILE = "enwiki-train.jsonl", "enwiki-held-out.jsonl"
MAX_BYTES = 1_200_000
# Sections that are lists of citations or links, not prose.
_END_SECTIONS = {"references", "external links", "see also", "further reading", "notes", "bibliography",
                 "sources", "footnotes", "citations", "notes and references"}
_NAMESPACED = re.compile(r"\s*:?[A-Za-z-]+:")


def plain_text(wikitext: str) -> str:
    """Article prose from wikitext: what a reader sees, without references, tables or templates."""
    import mwparserfromhell

    code = mwparserfromhell.parse(_without_tables(wikitext))
    for tag in code.filter_tags(recursive=True):
        if str(tag.tag).lower() in {"ref", "table", "gallery", "math", "timeline", "imagemap", "syntaxhighlight"}:
            _remove(code, tag)
    for link in code.filter_wikilinks(recursive=True):
        if _NAMESPACED.match(str(link.title)):  # files, categories, other languages' articles
            _remove(code, link)
    for template in code.filter_templates(recursive=True):
        _remove(code, template)
    paragraphs = []
    for section in code.get_sections(levels=[2], include_lead=True, include_headings=True):
        headings = section.filter_headings()
        if headings and headings[0].title.strip_code().strip().lower() in _END_SECTIONS:
            continue
        for heading in section.filter_headings():
            title = heading.title.strip_code().strip()
            _replace(section, heading, f"\n\n{title}\n\n" if title.lower() not in _END_SECTIONS else "\n\n")
        paragraphs.append(section.strip_code(normalize=True, collapse=True))
    return _tidy("\n\n".join(paragraphs))


def _without_tables(wikitext: str) -> str:
    """Drop `{| ... |}` tables line by line (nested ones too): the parser keeps malformed ones."""
    kept, depth = [], 0
    for line in wikitext.splitlines():
        stripped = line.strip()
        if stripped.startswith("{|"):
            depth += 1
        elif depth and stripped.startswith("|}"):
            depth -= 1
        elif not depth:
            kept.append(line)
    text = "\n".join(kept)
    # References first by pattern: the parser leaves some of them as text where the markup around is malformed.
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"<ref[^>/]*/>", "", text)
    return re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.S)


def _remove(code, node) -> None:
    try:
        code.remove(node)
    except ValueError:  # already gone with a parent removed before it
        pass


def _replace(code, node, text: str) -> None:
    try:
        code.replace(node, text)
    except ValueError:
        pass


def _tidy(text: str) -> str:
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\(\s*[,;]?\s*\)", "", line)  # "Albedo () is": the brackets a removed template leaves
        line = re.sub(r"</?(?:div|blockquote|span|small|big|sup|sub|center|br|poem|references)\b[^>]*>", "", line)
        line = re.sub(r"[ \t]+", " ", line).strip()
        if "[[" in line or "{{" in line or "|thumb" in line or re.fullmatch(r"[|!{}\-=*#:;]*", line):
            line = ""
        lines.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def wiki_articles(dump: Path):
    """The dump's articles (main namespace, no redirects) as `wikimedia/wikipedia` records."""
    with bz2.open(dump, "rb") as stream:
        root = ElementTree.parse(stream).getroot()
    ns = root.tag.split("}")[0] + "}"
    for page in root.iter(f"{ns}page"):
        if page.findtext(f"{ns}ns") != "0" or page.find(f"{ns}redirect") is not None:
            continue
        page_id, title = page.findtext(f"{ns}id"), page.findtext(f"{ns}title")
        text = plain_text(page.findtext(f"{ns}revision/{ns}text") or "")
        if len(text.split()) >= 100:
            yield {"id": page_id, "url": f"https://en.wikipedia.org/wiki?curid={page_id}", "title": title, "text": text}


def main(books_dir: str, dump: str) -> None:
    here = Path(__file__).parent
    for name in BOOKS:
        shutil.copyfile(Path(books_dir) / name, here / "books" / name)
    outputs = {name: (open(here / "wiki" / name, "w", encoding="utf-8"), [0]) for name in (TRAIN_FILE, HELD_OUT_FILE)}
    for index, article in enumerate(wiki_articles(Path(dump))):
        out, written = outputs[HELD_OUT_FILE if index % 2 else TRAIN_FILE]
        line = json.dumps(article, ensure_ascii=False) + "\n"
        if written[0] + len(line.encode()) <= MAX_BYTES:
            out.write(line)
            written[0] += len(line.encode())
    for out, _ in outputs.values():
        out.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
