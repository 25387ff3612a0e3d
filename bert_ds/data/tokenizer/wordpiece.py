"""Google/Hugging Face BERT WordPiece vocabularies (`vocab.txt`), two of them built in.

`bert-base-uncased` and `bert-base-cased` (Google's original files, see vocab/LICENSE.md) can be
named wherever a tokenizer is taken, so a model pre-trained here shares ids with every Google and
Hugging Face BERT of that casing.

Casing decides whether text is lowercased and stripped of accents before lookup; a wrong choice
silently turns every capitalised word into [UNK] (a cased reading of an uncased vocabulary) or
never uses half the vocabulary. It is taken, in this order, from: an explicit `lowercase`
argument (`--lowercase/--no-lowercase`); the built-in name; `do_lower_case` in a
`tokenizer_config.json` beside the file; the vocabulary itself. The last rule: an uncased
vocabulary was built from lowercased, accent-stripped text, so its entries are unchanged by that
normalisation; the vocabulary is read as cased when more than 1% of its entries change under it.
Google's uncased vocabulary: 0 of its 29,523 non-bracket entries change (its `ℝ` is an uppercase
letter without a lowercase form, which broke an "any uppercase letter" rule); the cased one:
8,826 of 28,890.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bert_ds.data.tokenizer.base import BRACKET_TOKEN, SPECIAL_TOKENS, BertTokenizer, TokenizerError

VOCAB_DIR = Path(__file__).parents[1] / "vocab"
BUILTIN_VOCABS = {"bert-base-uncased": True, "bert-base-cased": False}
"""Built-in vocabulary name -> lowercase (vocab/<name>.txt)."""
CASED_SHARE = 0.01
"""Share of entries changed by lowercasing + accent stripping above which a vocabulary is cased."""


def builtin_vocab(name: str) -> Optional[Path]:
    """The file of a built-in vocabulary name, or None."""
    return VOCAB_DIR / f"{name}.txt" if name in BUILTIN_VOCABS else None


def uncased_form(token: str) -> str:
    """What BERT's uncased normalisation makes of `token`: lowercase, then NFD without accents
    (combining marks), as Google's BasicTokenizer does."""
    return "".join(ch for ch in unicodedata.normalize("NFD", token.lower()) if unicodedata.category(ch) != "Mn")


def infer_lowercase(tokens: Sequence[str]) -> tuple[bool, int, int]:
    """(uncased?, entries changed by the uncased normalisation, entries looked at); bracket
    tokens ([CLS], [unused7], ...) are not text and are skipped."""
    text = [t for t in tokens if not BRACKET_TOKEN.fullmatch(t)]
    changed = sum(1 for t in text if uncased_form(t) != t)
    return changed <= CASED_SHARE * len(text), changed, len(text)


class WordPieceTokenizer(BertTokenizer):
    """A Google/Hugging Face BERT `vocab.txt` (one token per line, id = line number) with BERT's
    normalisation: clean control characters, space out CJK characters, and, when lowercasing,
    strip accents and lowercase.

    `lowercase=None` decides the casing as the module docstring says; `casing()` reports the
    decision and its reason. Ids come from the file (Google's uncased vocab: [PAD]=0,
    [unused0..98]=1-99, [UNK]=100 ... [MASK]=103).
    """

    lowercase: bool

    def __init__(self, vocab_file: str | os.PathLike, lowercase: bool | None = None, display_name: str | None = None) -> None:
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

        path = Path(vocab_file)
        try:
            self._tokens = path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as error:
            raise TokenizerError(f"Cannot read WordPiece vocab {path}: {error}") from None
        if self._tokens and self._tokens[-1] == "":
            self._tokens.pop()  # the final newline ends the last token; it is not an empty token
        # As Google's and HF's loaders do, a repeated token keeps its last line number.
        vocab = {token: i for i, token in enumerate(self._tokens)}
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            tsv = "\t" in "".join(self._tokens[:5])
            hint = " (it looks like a sentencepiece .vocab; pass the .model)" if tsv else ""
            raise TokenizerError(f"WordPiece vocab {path} lacks the special tokens {missing}{hint}.")
        self.lowercase, self._casing_reason = self._decide_casing(path, lowercase, display_name)
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        # Google's BasicTokenizer strips accents only together with lowercasing.
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=self.lowercase, lowercase=self.lowercase
        )
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        # No token is registered as an added/special token, so "[MASK]" in text splits into "[", "mask", "]".
        self._tok = tok
        reserved = [vocab[t] for t in vocab if BRACKET_TOKEN.fullmatch(t)]
        specials = [vocab[t] for t in SPECIAL_TOKENS]
        self._set_ids(display_name or f"wordpiece:{path.resolve()}", len(self._tokens), specials, reserved)

    def _decide_casing(self, path: Path, lowercase: bool | None, display_name: str | None) -> tuple[bool, str]:
        if lowercase is not None:
            return lowercase, "--lowercase" if lowercase else "--no-lowercase"
        if display_name in BUILTIN_VOCABS:
            return BUILTIN_VOCABS[display_name], f"built-in {display_name}"
        config_file = path.parent / "tokenizer_config.json"
        configured = _configured_lowercase(config_file)
        if configured is not None:
            return configured, f"do_lower_case in {config_file}"
        uncased, changed, looked_at = infer_lowercase(self._tokens)
        return uncased, f"inferred: {changed} of {looked_at} entries change under lowercasing"

    def casing(self) -> str:
        return f"{'uncased' if self.lowercase else 'cased'} ({self._casing_reason})"

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast skips computing character offsets, which the pipeline never uses.
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        return [e.ids for e in encode(list(texts), add_special_tokens=False)] if texts else []

    def ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self._tokens[int(i)] for i in ids]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._tok.decode(np.asarray(ids, dtype=np.int64).tolist(), skip_special_tokens=False)

    def save(self, directory: str | os.PathLike) -> None:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "vocab.txt").write_text("".join(t + "\n" for t in self._tokens), encoding="utf-8")
        # The casing decision travels with the file (the keys are the ones HF reads).
        config = {"do_lower_case": self.lowercase, "tokenizer_class": "BertTokenizer"}
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def _configured_lowercase(config_file: Path) -> bool | None:
    """`do_lower_case` from an HF tokenizer_config.json, or None when there is no such setting."""
    if not config_file.is_file():
        return None
    try:
        value = json.loads(config_file.read_text(encoding="utf-8")).get("do_lower_case")
    except (OSError, ValueError, AttributeError) as error:
        raise TokenizerError(f"Cannot read {config_file}: {error}") from None
    return value if isinstance(value, bool) else None
