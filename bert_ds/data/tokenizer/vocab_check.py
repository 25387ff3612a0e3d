"""A wrong tokenizer made impossible to miss: the [UNK] rate of each source's first documents.

Silent corruption is the failure that costs most: an uncased vocabulary read as cased turns every
capitalised word into [UNK] and the run trains on it for days; a corpus of one-sentence records
read as one document per record gives NSP no IsNext pairs and sequences half padding. So every
run (and the dry run, for local sources) reads the first block of documents of each source with
the training stream's own reader (same seed, first epoch, the source's layout), and reports
documents, sentences and tokens per document and the [UNK] share. It warns above
`UNK_WARNING_SHARE` [UNK]s and below `MIN_SENTENCES_PER_DOCUMENT`. Google's uncased vocabulary on
the built-in English sample stays far below the [UNK] threshold (see docs/data.md).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from bert_ds.config import DataConfig
from bert_ds.data.sources import DataSource
from bert_ds.data.text.splitters import DEFAULT_SPLITTER
from bert_ds.data.text.cleaning import TextStats

UNK_WARNING_SHARE = 0.01
"""[UNK] share of a source's sampled tokens above which the start-up prints a warning."""
SAMPLE_DOCUMENTS = 64
"""Documents sampled per source: one block of the training stream (DataConfig.block_documents)."""
SAMPLE_CHARACTERS = 10_000
"""Characters read from the start of each sampled document (a book is one document of ~0.5 MB)."""
MIN_SENTENCES_PER_DOCUMENT = 2.0
"""Mean sentences per document below which the start-up warns (NSP pairs need two and more)."""


@dataclass(frozen=True)
class SourceSample:
    """What the first documents of one source look like through the tokenizer."""

    name: str
    documents: int
    sentences: int
    tokens: int
    unk_tokens: int
    layout: str = "book"
    cut_documents: int = 0
    """Documents longer than SAMPLE_CHARACTERS, read only that far (their tokens are undercounted)."""
    gutenberg_licences: int = 0
    """Books whose Project Gutenberg licence header/footer was cut (data/text/gutenberg.py)."""

    @property
    def unk_share(self) -> float:
        return self.unk_tokens / self.tokens if self.tokens else 0.0

    def describe(self) -> str:
        per = max(self.documents, 1)
        cut = f", {self.cut_documents} read to {SAMPLE_CHARACTERS:,} characters only" if self.cut_documents else ""
        licences = (f"; Project Gutenberg licence header/footer cut from {self.gutenberg_licences}"
                    if self.gutenberg_licences else "")
        return (f"{self.name} (layout {self.layout}): {self.documents} documents, {self.sentences / per:,.1f} sentences "
                f"and {self.tokens / per:,.0f} tokens per document{cut}; [UNK] {100 * self.unk_share:.2f}% of "
                f"{self.tokens:,} tokens{licences}")

    def warning(self) -> str:
        """A loud message when the tokenizer does not fit this text or documents are single
        sentences, else ''."""
        return "\n".join(text for text in (self._unk_warning(), self._layout_warning()) if text)

    def _layout_warning(self) -> str:
        if not self.documents or self.sentences / self.documents >= MIN_SENTENCES_PER_DOCUMENT:
            return ""
        return (
            f"WARNING: the documents of source {self.name!r} hold {self.sentences / self.documents:.1f} sentences "
            f"on average (layout {self.layout}). NSP pairs consecutive sentences of one document and packs "
            "sequences from them: with one-sentence documents there are no real IsNext pairs and sequences "
            "are mostly padding. If each record is one sentence (the hub's BookCorpus is), read runs of "
            f"records as documents: --data '{self.name}=LOCATION#sentences:256' (bert_ds/data/text/layouts.py)."
        )

    def _unk_warning(self) -> str:
        if self.unk_share <= UNK_WARNING_SHARE:
            return ""
        return (
            f"WARNING: {100 * self.unk_share:.1f}% of the tokens of source {self.name!r} are [UNK] "
            f"(first {self.documents} documents; above {100 * UNK_WARNING_SHARE:g}%). The tokenizer does not fit "
            "this text: a cased vocabulary read as uncased or the reverse (see --lowercase/--no-lowercase), "
            "another language, or the wrong --tokenizer. Training on it would corrupt the model."
        )


def sample_source(source: DataSource, tokenizer, seed: int, max_documents: int = SAMPLE_DOCUMENTS,
                  max_characters: int = SAMPLE_CHARACTERS, sentence_splitter: str = DEFAULT_SPLITTER,
                  txt_documents: str = "file") -> SourceSample:
    """The first documents of `source` as the training stream reads them (its SourceReader, its
    layout, its `.txt` documents; raises DataError as the training stream would), each cut at
    `max_characters`."""
    from bert_ds.data.stream import SourceReader

    config = DataConfig(seed=seed, sentence_splitter=sentence_splitter, txt_documents=txt_documents)
    reader = SourceReader(source, tokenizer, config, 0, 1, TextStats())
    reader.max_characters = max_characters
    documents, cut, licences = [], 0, 0
    for document in itertools.islice(reader.first_epoch_documents(), max_documents):
        documents.append(document)
        cut = reader.cut_documents  # not the dropped document that would start the next epoch
        licences = reader.stats.gutenberg_licences
    ids = [i for document in documents for sentence in document for i in sentence]
    unk = sum(1 for i in ids if i == tokenizer.unk_id)
    return SourceSample(source.name, len(documents), sum(len(d) for d in documents), len(ids), unk,
                        str(reader.layout), cut, licences)
