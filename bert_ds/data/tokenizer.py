"""Tokenizers for BERT pre-training: a trained sentencepiece model or a Google/HF WordPiece vocab.

Both sit behind `BertTokenizer`, so the data pipeline only sees ids: `encode_batch` never adds
[CLS]/[SEP] (the pipeline packs sentence pairs itself), and `special_ids`/`replacement_ids` tell
masking which ids it may pick. Special tokens are never produced from raw text, as in Google's
original pipeline: a document containing the literal string "[MASK]" cannot forge a mask token.

CLI:  python -m bert_ds.data.tokenizer train --data SPEC [SPEC ...] --vocab-size N --output DIR
      python -m bert_ds.data.tokenizer encode --tokenizer PATH TEXT [TEXT ...]
"""

from __future__ import annotations

import abc
import argparse
import itertools
import json
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Google's vocabularies reserve "[unused0]".."[unused993]" and friends; no bracket token is text.
# A lone "[" or "]" is ordinary punctuation, hence at least one character inside the brackets.
_BRACKET_TOKEN = re.compile(r"\[[^\s\[\]]+\]")


class TokenizerError(ValueError):
    """A user-facing tokenizer problem; the message names the file or path involved."""


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

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, vocab_size={self.vocab_size})"


class SentencePieceTokenizer(BertTokenizer):
    """A sentencepiece model whose ids 0..4 are exactly [PAD] [UNK] [CLS] [SEP] [MASK]."""

    def __init__(self, model_file: str | os.PathLike) -> None:
        import sentencepiece as spm

        path = Path(model_file)
        try:
            # Loading from bytes keeps file errors ours and works for any path encoding.
            self._sp = spm.SentencePieceProcessor(model_proto=path.read_bytes())
        except (OSError, RuntimeError, ValueError, TypeError) as error:
            raise TokenizerError(f"Cannot load sentencepiece model {path}: {error}") from None
        size = self._sp.get_piece_size()
        found = [self._sp.id_to_piece(i) for i in range(min(size, len(SPECIAL_TOKENS)))]
        if tuple(found) != SPECIAL_TOKENS:
            raise TokenizerError(
                f"Sentencepiece model {path} must have {list(SPECIAL_TOKENS)} at ids 0-4, found {found}; "
                "train it with `python -m bert_ds.data.tokenizer train`."
            )
        # Control/unknown/unused pieces are never emitted for text, so they are never valid replacements.
        sp = self._sp
        reserved = [i for i in range(size) if sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i)]
        self._set_ids(f"sentencepiece:{path.resolve()}", size, range(len(SPECIAL_TOKENS)), reserved)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(list(texts), out_type=int) if texts else []

    def ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self._sp.id_to_piece(int(i)) for i in ids]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        # sp.decode drops control pieces and prints UNK as " ⁇ ", which makes masked examples
        # unreadable: decode each run of ordinary ids and show special ids by their piece.
        parts: list[str] = []
        flat: list[int] = np.asarray(ids, dtype=np.int64).reshape(-1).tolist()
        for special, run in itertools.groupby(flat, lambda i: bool(self.is_special[i])):
            parts += self.ids_to_tokens(list(run)) if special else [self._sp.decode(list(run))]
        return " ".join(part for part in parts if part)

    def save(self, directory: str | os.PathLike) -> None:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "tokenizer.model").write_bytes(self._sp.serialized_model_proto())


class WordPieceTokenizer(BertTokenizer):
    """A Google/Hugging Face BERT `vocab.txt` (one token per line, id = line number) with BERT's
    normalisation: clean control characters, space out CJK characters, and, when lowercasing,
    strip accents and lowercase.

    `lowercase=None` takes `do_lower_case` from a `tokenizer_config.json` beside the vocab if there
    is one, else infers it: uncased iff no non-bracket entry contains an uppercase letter. Ids come
    from the file (Google's uncased vocab: [PAD]=0, [unused0..98]=1-99, [UNK]=100 ... [MASK]=103).
    """

    lowercase: bool

    def __init__(self, vocab_file: str | os.PathLike, lowercase: bool | None = None) -> None:
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
        if lowercase is None:
            lowercase = _configured_lowercase(path.parent / "tokenizer_config.json")
        if lowercase is None:
            lowercase = not any(
                ch.isupper() for t in self._tokens if not _BRACKET_TOKEN.fullmatch(t) for ch in t
            )
        self.lowercase = lowercase
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        # Google's BasicTokenizer strips accents only together with lowercasing.
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
        )
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        # No token is registered as an added/special token, so "[MASK]" in text splits into "[", "mask", "]".
        self._tok = tok
        reserved = [vocab[t] for t in vocab if _BRACKET_TOKEN.fullmatch(t)]
        specials = [vocab[t] for t in SPECIAL_TOKENS]
        self._set_ids(f"wordpiece:{path.resolve()}", len(self._tokens), specials, reserved)

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
        # Recorded so an explicit `lowercase` survives reloading; the keys are the ones HF reads.
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


def load_tokenizer(path: str | os.PathLike) -> BertTokenizer:
    """Load a `.model` (sentencepiece), a `vocab.txt` (WordPiece), or a directory holding
    `tokenizer.model`, `spm.model`, a single `*.model`, or `vocab.txt` (checked in that order)."""
    expected = "a sentencepiece .model file, a WordPiece vocab.txt, or a directory holding one"
    p = Path(path)
    if p.is_dir():
        models = sorted(p.glob("*.model"))
        named = [p / n for n in ("tokenizer.model", "spm.model") if (p / n).is_file()]
        if named or len(models) == 1:
            return SentencePieceTokenizer((named or models)[0])
        if len(models) > 1:
            names = [m.name for m in models]
            raise TokenizerError(f"Tokenizer directory {p} holds several .model files {names}; pass one.")
        if (p / "vocab.txt").is_file():
            return WordPieceTokenizer(p / "vocab.txt")
        raise TokenizerError(f"Tokenizer directory {p} holds no tokenizer; expected {expected}.")
    if not p.exists():
        raise TokenizerError(f"Tokenizer path {p} does not exist; expected {expected}.")
    if p.suffix == ".model":
        return SentencePieceTokenizer(p)
    if p.suffix == ".txt":
        return WordPieceTokenizer(p)
    raise TokenizerError(f"Tokenizer path {p} is not recognised; expected {expected}.")


def train_sentencepiece(
    texts: Iterable[str],
    output_dir: str | os.PathLike,
    vocab_size: int = 30522,
    model_type: str = "unigram",
    max_sentences: int = 2_000_000,
    seed: int = 0,
) -> SentencePieceTokenizer:
    """Train a sentencepiece model on the non-empty lines of `texts` (at most `max_sentences`) and
    write `output_dir/tokenizer.model` (+ `.vocab`) with SPECIAL_TOKENS at ids 0..4.

    `vocab_size` is an upper bound: a corpus too small for it yields a smaller vocabulary instead
    of failing. Errors raised while iterating `texts` propagate unchanged.
    """
    import sentencepiece as spm

    if vocab_size <= len(SPECIAL_TOKENS):
        raise TokenizerError(f"Vocab size must exceed the 5 special tokens, got {vocab_size}.")
    if model_type not in ("unigram", "bpe"):
        raise TokenizerError(f"Model type must be 'unigram' or 'bpe', got {model_type!r}.")
    if max_sentences < 1:
        raise TokenizerError(f"max_sentences must be at least 1, got {max_sentences}.")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    fed = 0
    failure: list[BaseException] = []

    def lines() -> Iterator[str]:
        nonlocal fed
        try:
            for text in texts:
                for line in text.split("\n"):
                    line = line.strip()
                    if line:
                        fed += 1
                        yield line
                    if fed >= max_sentences:
                        return  # stop pulling documents: the corpus may be far larger than the cap
        except (Exception, KeyboardInterrupt) as error:  # sentencepiece would flatten it to RuntimeError
            failure.append(error)

    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=lines(),
            model_prefix=str(out / "tokenizer"),
            model_type=model_type,
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            character_coverage=0.9999,
            # Wikipedia/book paragraphs often exceed the 4192-byte default and would be skipped.
            max_sentence_length=16384,
            pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
            # Control symbols (not user-defined ones) so raw text can never produce these ids.
            control_symbols=list(SPECIAL_TOKENS[2:]),
            minloglevel=1,
        )
    except RuntimeError as error:
        if failure:
            raise failure[0] from None
        if fed == 0:
            raise TokenizerError("No non-empty lines to train the tokenizer on.") from None
        raise TokenizerError(f"Sentencepiece training failed: {error}") from None
    if failure:
        raise failure[0]
    tokenizer = SentencePieceTokenizer(out / "tokenizer.model")
    summary = f"{model_type} on {fed} lines, vocab size {tokenizer.vocab_size} (asked {vocab_size})"
    print(f"tokenizer: trained sentencepiece {summary} -> {out / 'tokenizer.model'}", file=sys.stderr)
    return tokenizer


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; user errors print one `error: ...` line on stderr and return 2."""
    parser = argparse.ArgumentParser(prog="python -m bert_ds.data.tokenizer", description="BERT tokenizers.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a sentencepiece tokenizer with BERT's special tokens")
    train.add_argument("--data", nargs="+", required=True, help="data sources (paths, globs, hub ids)")
    train.add_argument("--vocab-size", type=int, default=30522)
    train.add_argument("--output", required=True, help="directory for tokenizer.model")
    train.add_argument("--model-type", choices=("unigram", "bpe"), default="unigram")
    train.add_argument("--max-sentences", type=int, default=2_000_000, help="cap on lines fed to the trainer")
    train.add_argument("--max-documents", type=int, default=None, help="cap on documents read")
    train.add_argument("--seed", type=int, default=0)
    encode = commands.add_parser("encode", help="print the ids and pieces of some text")
    encode.add_argument("--tokenizer", required=True, help=".model, vocab.txt, or a directory holding one")
    encode.add_argument("text", nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            from bert_ds.data.sources import iter_document_texts  # lazy: pulls in the dataset stack

            documents = iter_document_texts(args.data, max_documents=args.max_documents, seed=args.seed)
            train_sentencepiece(
                documents, args.output, args.vocab_size, args.model_type, args.max_sentences, args.seed
            )
        else:
            tokenizer = load_tokenizer(args.tokenizer)
            print(f"{tokenizer.name} (vocab size {tokenizer.vocab_size})")
            for ids in tokenizer.encode_batch(args.text):
                print(f"ids:     {ids}\npieces:  {tokenizer.ids_to_tokens(ids)}")
                print(f"decoded: {tokenizer.decode(ids)}")
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
