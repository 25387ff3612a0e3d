"""Raw document text -> clean sentences, counting every repair.

Real corpora carry dirty bytes: invalid UTF-8 (decoded leniently upstream to U+FFFD), byte-order
marks, CR line ends, empty documents and enormous lines. Nothing here raises on dirty text: each
repair is counted in `TextStats`, which the loader reports and checkpoints.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from bert_ds.data.text.splitters import DEFAULT_SPLITTER, get_splitter

# Longest sentence kept in one piece: a 10 MB line without punctuation is cut into pieces of this
# size (at a space where possible) so tokenizing and pairing stay bounded.
MAX_SENTENCE_CHARS = 2_000

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n+")
_WHITESPACE = re.compile(r"\s+")


@dataclass
class TextStats:
    """Counters of what cleaning saw and repaired; summed over ranks and workers for reporting."""

    documents: int = 0
    empty_documents: int = 0
    invalid_characters: int = 0  # U+FFFD from undecodable bytes (dropped)
    byte_order_marks: int = 0
    carriage_returns: int = 0
    split_long_sentences: int = 0
    sentences: int = 0
    gutenberg_licences: int = 0  # books whose Project Gutenberg header/footer was cut (data/text/gutenberg.py)

    def add(self, other: "TextStats") -> "TextStats":
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)
        return self

    def as_dict(self) -> dict:
        return asdict(self)

    def load_dict(self, values: dict) -> None:
        """Overwrite the counters in place (streams share one TextStats among their readers)."""
        for name, value in values.items():
            setattr(self, name, value)


def clean_document(text: str, stats: TextStats, strip_licence: bool = False) -> str:
    """Drop BOMs and undecodable-byte markers, unify line ends; count each repair. With
    `strip_licence` (books: the `book` layout) also cut a Project Gutenberg header and footer."""
    stats.documents += 1
    if "\ufeff" in text:
        stats.byte_order_marks += text.count("\ufeff")
        text = text.replace("\ufeff", "")
    if "\ufffd" in text:
        stats.invalid_characters += text.count("\ufffd")
        text = text.replace("\ufffd", "")
    if "\r" in text:
        stats.carriage_returns += text.count("\r")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if strip_licence:
        from bert_ds.data.text.gutenberg import strip_gutenberg

        text, stripped = strip_gutenberg(text)
        stats.gutenberg_licences += stripped
    if not text.strip():
        stats.empty_documents += 1
        return ""
    return text


def _cut_long(sentence: str, stats: TextStats) -> list[str]:
    if len(sentence) <= MAX_SENTENCE_CHARS:
        return [sentence]
    stats.split_long_sentences += 1
    pieces, start = [], 0
    while start < len(sentence):
        end = min(start + MAX_SENTENCE_CHARS, len(sentence))
        if end < len(sentence):
            space = sentence.rfind(" ", start + MAX_SENTENCE_CHARS // 2, end)
            end = space if space > start else end
        pieces.append(sentence[start:end].strip())
        start = end
    return [piece for piece in pieces if piece]


# How a document's text is cut into paragraphs before sentence splitting (data/text/layouts.py picks one
# per source): "blank_line" joins hard-wrapped lines (Gutenberg books are wrapped at ~70 chars);
# "line" makes every line a paragraph (the hub's Wikipedia: headings and paragraphs one per line);
# "sentence_per_line" takes every line as one sentence, unsplit (Google's create_pretraining_data.py
# input, and one-sentence records such as the hub's BookCorpus).
PARAGRAPH_MODES = ("blank_line", "line", "sentence_per_line")
_LINE_BREAK = re.compile(r"\n+")


def split_sentences(text: str, stats: TextStats, splitter: str = DEFAULT_SPLITTER, paragraphs: str = "blank_line") -> list[str]:
    """Clean text -> sentences, in order. Paragraphs never share a sentence; `paragraphs` says
    where they end (PARAGRAPH_MODES) and `splitter` names the sentence splitter."""
    if paragraphs == "blank_line":
        blocks = _PARAGRAPH_BREAK.split(text)
    elif paragraphs in ("line", "sentence_per_line"):
        blocks = _LINE_BREAK.split(text)
    else:
        raise ValueError(f"paragraphs must be one of {PARAGRAPH_MODES}, got {paragraphs!r}")
    split = None if paragraphs == "sentence_per_line" else get_splitter(splitter)
    sentences = []
    for paragraph in blocks:
        paragraph = _WHITESPACE.sub(" ", paragraph).strip()
        if not paragraph:
            continue
        for sentence in ([paragraph] if split is None else split(paragraph)):
            sentences.extend(_cut_long(sentence, stats))
    stats.sentences += len(sentences)
    return sentences
