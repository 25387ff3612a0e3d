"""The tokenizer contract the data pipeline relies on (`BertTokenizer`), BERT's special tokens and
the user-facing `TokenizerError`. The implementations live in tokenizer.py (sentencepiece) and
wordpiece.py (Google/Hugging Face `vocab.txt`)."""

from __future__ import annotations

import abc
import os
import re
from typing import Iterable, Sequence

import numpy as np

from bert_ds.errors import TokenizerError  # noqa: F401 (raised here; imported from here by callers)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Google's vocabularies reserve "[unused0]".."[unused993]" and friends; no bracket token is text.
# A lone "[" or "]" is ordinary punctuation, hence at least one character inside the brackets.
BRACKET_TOKEN = re.compile(r"\[[^\s\[\]]+\]")




class BertTokenizer(abc.ABC):
    """What the data pipeline needs from a tokenizer: ids for text, and which ids are special.

    Contract: ids lie in [0, vocab_size); `special_ids` (sorted int64) holds PAD/UNK/CLS/SEP/MASK and
    every reserved id that is never real text, so masking must neither select nor insert them;
    `replacement_ids` (sorted int64) is exactly its complement; `is_special[i]` is True iff i is in
    `special_ids`.
    """

    name: str
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    special_ids: np.ndarray
    replacement_ids: np.ndarray
    is_special: np.ndarray

    def _set_ids(self, name: str, vocab_size: int, specials: Sequence[int], reserved: Iterable[int]) -> None:
        """Fill the shared attributes; `specials` are the ids of SPECIAL_TOKENS, in that order."""
        self.name = name
        self.vocab_size = vocab_size
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (int(i) for i in specials)
        self.is_special = np.zeros(vocab_size, dtype=bool)
        self.is_special[list(specials)] = True
        self.is_special[list(reserved)] = True
        self.special_ids = np.flatnonzero(self.is_special).astype(np.int64)
        self.replacement_ids = np.flatnonzero(~self.is_special).astype(np.int64)

    @abc.abstractmethod
    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text, without any special tokens added."""

    @abc.abstractmethod
    def ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        """The vocabulary entry (piece) of each id, for inspection."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text for ids; special ids are shown as their token (e.g. "[MASK]"), not dropped."""

    @abc.abstractmethod
    def save(self, directory: str | os.PathLike) -> None:
        """Write into `directory` the files `load_tokenizer(directory)` needs to load it again."""

    def content_digest(self) -> str:
        """A digest of what decides the ids of a text: the class, the casing and every piece (for
        caches keyed by what a tokenizer does, not where it was loaded from)."""
        import hashlib

        text = "\n".join([type(self).__name__, self.casing(), *self.ids_to_tokens(range(self.vocab_size))])
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def casing(self) -> str:
        """How text is normalised before lookup, and who decided it (printed at start)."""
        return "as the model was trained (sentencepiece normalises text itself)"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, vocab_size={self.vocab_size})"
