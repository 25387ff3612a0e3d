"""Tagged sentences for token tagging (CoNLL-2003 NER) from CoNLL files or the hub's `conll2003` schema.

CoNLL files: one token per line, columns separated by white space, the word first and its tag
last (CoNLL-2003: `word POS chunk NER`; two columns `word tag` also do); a blank line ends a
sentence; `-DOCSTART-` lines mark document starts and are not sentences. A folder holds the
splits under CoNLL-2003's names: train.txt / valid.txt / test.txt (as most copies ship them),
or the original eng.train / eng.testa / eng.testb. Tags are `O` or `B-`, `I-`, `E-`, `S-` plus
an entity type, in any scheme (CoNLL-2003's own files are IOB1, the hub's copy IOB2): the
scorer (metrics.entity_metrics) reads chunks as conlleval does, so both score the same way.
A line that is not `word ... tag` is a FinetuneDataError naming the file and line.

Hub data (`--dataset ID`): the `conll2003` schema, `tokens` (list of words) and `ner_tags`
(list of ClassLabel ints); the label names come from the ClassLabel, else CONLL2003_LABELS.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from bert_ds.finetune.data.tasks import (
    FinetuneDataError, ReadReport, load_hub_split, parse_hub_spec, read_text_file, require_hub_columns,
)

CONLL_HUB_ID = "eriktks/conll2003@refs/convert/parquet"
"""The hub's CoNLL-2003, read from the Parquet copy the hub makes of every dataset (the branch
`refs/convert/parquet`, laid out `conll2003/{train,validation,test}/*.parquet`): its main branch
holds only a loading script, which `datasets` (>= 4) no longer runs."""
CONLL2003_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
"""The hub's ClassLabel order for `ner_tags` (its label ints)."""
SPLIT_FILES = {  # split -> file names tried in a folder, first match wins
    "train": ("train.txt", "eng.train"),
    "dev": ("valid.txt", "dev.txt", "eng.testa"),
    "test": ("test.txt", "eng.testb"),
}
_HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
DOCSTART = "-DOCSTART-"
_TAG = re.compile(r"^(O|[BIES]-\S+)$")


@dataclass(frozen=True)
class TaggedSentence:
    """One sentence: its words and their tags (the gold ones; None where the file has no tags)."""

    guid: str
    """"<split>-<line of its first word>" (files) or "<split>-<record>" (hub)."""
    words: tuple[str, ...]
    tags: Optional[tuple[str, ...]]


def read_conll_file(path: Path, split: str) -> tuple[list[TaggedSentence], ReadReport]:
    """The sentences of one CoNLL file. Its first token line decides whether the file is tagged
    (two or more columns) or holds words only (an unlabelled test file); every other line must agree."""
    report = ReadReport(str(path))
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    tagged: Optional[bool] = None
    first_line = 0

    def end_sentence() -> None:
        if words:
            sentences.append(TaggedSentence(f"{split}-{first_line}", tuple(words), tuple(tags) if tagged else None))
            words.clear()
            tags.clear()

    for number, line in enumerate(read_text_file(path).splitlines(), start=1):
        columns = line.split()
        if not columns or columns[0] == DOCSTART:
            end_sentence()
            continue
        if tagged is None:
            tagged = len(columns) > 1
        where = f"{path}: line {number}"
        if tagged != (len(columns) > 1):
            expected = "'word ... tag' (CoNLL columns)" if tagged else "one word (the file's first token line has no tag)"
            raise FinetuneDataError(f"{where}: expected {expected}, got {line.strip()!r}.")
        if tagged:
            if not _TAG.match(columns[-1]):
                raise FinetuneDataError(f"{where}: tag {columns[-1]!r} is not O or B-/I-/E-/S- plus an entity type.")
            tags.append(columns[-1])
        if not words:
            first_line = number
        words.append(columns[0])
    end_sentence()
    report.rows = len(sentences)
    return sentences, report


def split_file(folder: Path, split: str) -> Optional[Path]:
    """The file of `split` in a CoNLL folder (SPLIT_FILES' names), or None."""
    return next((folder / name for name in SPLIT_FILES[split] if (folder / name).is_file()), None)


def conll_from_hub(rows: Any, split: str, source: str) -> tuple[list[TaggedSentence], ReadReport, tuple[str, ...]]:
    """Sentences of a hub split in the `conll2003` schema, and the label names of its ints."""
    report = ReadReport(f"{source} {_HUB_SPLITS[split]}")
    require_hub_columns(rows, ["tokens", "ner_tags"], report.source)
    names = _hub_label_names(rows) or CONLL2003_LABELS
    sentences = []
    for position, row in enumerate(rows):
        words, ints = list(row["tokens"]), list(row["ner_tags"])
        where = f"{report.source}: record {position}"
        if len(words) != len(ints):
            raise FinetuneDataError(f"{where}: {len(words)} tokens but {len(ints)} ner_tags.")
        bad = next((i for i in ints if not (isinstance(i, int) and 0 <= i < len(names))), None)
        if bad is not None:
            raise FinetuneDataError(f"{where}: ner_tag {bad!r} is not one of 0..{len(names) - 1}.")
        if words:  # the hub's copy has had empty records
            sentences.append(TaggedSentence(f"{split}-{position}", tuple(words), tuple(names[i] for i in ints)))
    report.rows = len(sentences)
    return sentences, report, tuple(names)


def _hub_label_names(rows: Any) -> Optional[tuple[str, ...]]:
    feature = getattr(rows, "features", {}).get("ner_tags") if hasattr(rows, "features") else None
    inner = getattr(feature, "feature", None)
    names = getattr(inner, "names", None)
    return tuple(names) if names else None


def load_conll(split: str, data: str) -> tuple[list[TaggedSentence], ReadReport, Optional[tuple[str, ...]]]:
    """(sentences, report, the hub's label names or None) of `split` (train, dev, test) from `data`:
    a CoNLL folder, one CoNLL file, or `hf:ID[:CONFIG]`."""
    hub = parse_hub_spec(data)
    if hub is not None:
        return conll_from_hub(load_hub_split(hub, _HUB_SPLITS[split]), split, hub.hub_id)
    path = Path(data)
    if os.path.isdir(path):
        found = split_file(path, split)
        if found is None:
            raise FinetuneDataError(f"No CoNLL {split} file in {path}: expected one of {', '.join(SPLIT_FILES[split])}.")
        path = found
    elif not os.path.isfile(path):
        raise FinetuneDataError(f"No CoNLL {split} file: {path} does not exist.")
    sentences, report = read_conll_file(path, split)
    return sentences, report, None


def label_list(*splits: list[TaggedSentence]) -> tuple[str, ...]:
    """The tag set of local files: "O" first, then by entity type and B, I, E, S, so the same
    tags always get the same ints."""
    order = {prefix: i for i, prefix in enumerate("BIES")}
    found = {tag for sentences in splits for s in sentences for tag in (s.tags or ())} - {"O"}
    return ("O",) + tuple(sorted(found, key=lambda tag: (tag[2:], order[tag[0]])))
