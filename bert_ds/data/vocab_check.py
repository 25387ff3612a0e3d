"""A wrong tokenizer made impossible to miss: the [UNK] rate of each source's first documents.

Silent corruption is the failure that costs most: an uncased vocabulary read as cased turns every
capitalised word into [UNK] and the run trains on it for days. So every run (and the dry run, for
local sources) reads the first documents of each source in the order the training stream reads
them (same seed, first epoch), cleans, splits and tokenizes them exactly as the pipeline does,
and reports documents, sentences, tokens and the [UNK] share; above `UNK_WARNING_SHARE` it warns.
Google's uncased vocabulary on the built-in English sample stays far below (see the README).
"""

from __future__ import annotations

from dataclasses import dataclass

from bert_ds.data.sources import DataSource, document_stream, record_text
from bert_ds.data.text import TextStats, clean_document, split_sentences

UNK_WARNING_SHARE = 0.01
"""[UNK] share of a source's sampled tokens above which the start-up prints a warning."""
SAMPLE_DOCUMENTS = 64
"""Documents sampled per source: one block of the training stream (DataConfig.block_documents)."""
SAMPLE_CHARACTERS = 10_000
"""Characters read from the start of each sampled document (a book is one document of ~0.5 MB)."""


@dataclass(frozen=True)
class SourceSample:
    """What the first documents of one source look like through the tokenizer."""

    name: str
    documents: int
    sentences: int
    tokens: int
    unk_tokens: int

    @property
    def unk_share(self) -> float:
        return self.unk_tokens / self.tokens if self.tokens else 0.0

    def describe(self) -> str:
        return (f"{self.name}: [UNK] {100 * self.unk_share:.2f}% of {self.tokens:,} tokens "
                f"({self.documents} documents, {self.sentences:,} sentences read)")

    def warning(self) -> str:
        """A loud message when the tokenizer does not fit this text, else ''."""
        if self.unk_share <= UNK_WARNING_SHARE:
            return ""
        return (
            f"WARNING: {100 * self.unk_share:.1f}% of the tokens of source {self.name!r} are [UNK] "
            f"(first {self.documents} documents; above {100 * UNK_WARNING_SHARE:g}%). The tokenizer does not fit "
            "this text: a cased vocabulary read as uncased or the reverse (see --lowercase/--no-lowercase), "
            "another language, or the wrong --tokenizer. Training on it would corrupt the model."
        )


def sample_source(source: DataSource, tokenizer, seed: int, max_documents: int = SAMPLE_DOCUMENTS,
                  max_characters: int = SAMPLE_CHARACTERS) -> SourceSample:
    """Read, clean, split and tokenize the first documents of `source` (raises DataError as the
    training stream would)."""
    stats, documents, sentences = TextStats(), 0, []
    for position, record in enumerate(document_stream(source, seed=seed, epoch=0)):
        if documents >= max_documents:
            break
        text = clean_document(record_text(record, source, position), stats)[:max_characters]
        if text:
            documents += 1
            sentences += split_sentences(text, stats)
    ids = [i for sentence in tokenizer.encode_batch(sentences) for i in sentence]
    unk = sum(1 for i in ids if i == tokenizer.unk_id)
    return SourceSample(source.name, documents, len(sentences), len(ids), unk)
