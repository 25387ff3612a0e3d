"""Tokenizers for BERT pre-training: a trained sentencepiece model or a Google/HF WordPiece vocab.

Both sit behind `BertTokenizer`, so the data pipeline only sees ids: `encode_batch` never adds
[CLS]/[SEP] (the pipeline packs sentence pairs itself), and `special_ids`/`replacement_ids` tell
masking which ids it may pick. Special tokens are never produced from raw text, as in Google's
original pipeline: a document containing the literal string "[MASK]" cannot forge a mask token.

CLI:  python -m bert_ds.data.tokenizer train --data SPEC [SPEC ...] --vocab-size N --output DIR
      python -m bert_ds.data.tokenizer encode --tokenizer PATH|bert-base-uncased TEXT [TEXT ...]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np

from bert_ds.data.tokenizer.base import SPECIAL_TOKENS, BertTokenizer, TokenizerError
from bert_ds.data.tokenizer.wordpiece import BUILTIN_VOCABS, WordPieceTokenizer, builtin_vocab

__all__ = [
    "SPECIAL_TOKENS", "BUILTIN_VOCABS", "BertTokenizer", "SentencePieceTokenizer", "TokenizerError",
    "WordPieceTokenizer", "load_tokenizer", "train_sentencepiece",
]


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

    def content_digest(self) -> str:
        # The model file: its pieces and its normalisation rules, which sentencepiece applies itself.
        import hashlib

        return hashlib.sha1(self._sp.serialized_model_proto()).hexdigest()

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


def load_tokenizer(path: str | os.PathLike, lowercase: Optional[bool] = None) -> BertTokenizer:
    """Load a `.model` (sentencepiece), a `vocab.txt` (WordPiece), a directory holding
    `tokenizer.model`, `spm.model`, a single `*.model`, or `vocab.txt` (checked in that order), or
    a built-in vocabulary by name (`bert-base-uncased`, `bert-base-cased`; an existing path of
    that name wins, as with Hugging Face's `from_pretrained`).

    `lowercase` overrides a WordPiece vocabulary's casing (see wordpiece.py); sentencepiece models
    normalise text themselves, so it is refused for them.
    """
    expected = (
        "a sentencepiece .model file, a WordPiece vocab.txt, a directory holding one, or a built-in "
        f"vocabulary ({', '.join(BUILTIN_VOCABS)})"
    )
    p = Path(path)
    if not p.exists() and builtin_vocab(str(path)) is not None:
        return WordPieceTokenizer(builtin_vocab(str(path)), lowercase, display_name=str(path))
    if p.is_dir():
        models = sorted(p.glob("*.model"))
        named = [p / n for n in ("tokenizer.model", "spm.model") if (p / n).is_file()]
        if named or len(models) == 1:
            return _sentencepiece((named or models)[0], lowercase)
        if len(models) > 1:
            names = [m.name for m in models]
            raise TokenizerError(f"Tokenizer directory {p} holds several .model files {names}; pass one.")
        if (p / "vocab.txt").is_file():
            return WordPieceTokenizer(p / "vocab.txt", lowercase)
        raise TokenizerError(f"Tokenizer directory {p} holds no tokenizer; expected {expected}.")
    if not p.exists():
        if os.sep in str(path) or p.suffix:
            raise TokenizerError(f"Tokenizer path {p} does not exist; expected {expected}.")
        raise TokenizerError(f"Tokenizer {str(path)!r} is neither an existing path nor a built-in name; expected {expected}.")
    if p.suffix == ".model":
        return _sentencepiece(p, lowercase)
    if p.suffix == ".txt":
        return WordPieceTokenizer(p, lowercase)
    raise TokenizerError(f"Tokenizer path {p} is not recognised; expected {expected}.")


def _sentencepiece(path: Path, lowercase: Optional[bool]) -> "SentencePieceTokenizer":
    if lowercase is not None:
        raise TokenizerError(
            f"--lowercase/--no-lowercase apply to WordPiece vocabularies; the sentencepiece model {path} "
            "normalises text as it was trained."
        )
    return SentencePieceTokenizer(path)


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


def add_lowercase_argument(parser: argparse.ArgumentParser) -> None:
    """`--lowercase/--no-lowercase` (default: decided per vocabulary, see wordpiece.py)."""
    parser.add_argument(
        "--lowercase", action=argparse.BooleanOptionalAction, default=None,
        help="lowercase and strip accents before WordPiece lookup (default: the vocabulary's own casing)",
    )


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
    encode.add_argument("--tokenizer", required=True, help=".model, vocab.txt, a directory holding one, or a built-in name")
    add_lowercase_argument(encode)
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
            tokenizer = load_tokenizer(args.tokenizer, args.lowercase)
            print(f"{tokenizer.name} (vocab size {tokenizer.vocab_size}, {tokenizer.casing()})")
            for ids in tokenizer.encode_batch(args.text):
                print(f"ids:     {ids}\npieces:  {tokenizer.ids_to_tokens(ids)}")
                print(f"decoded: {tokenizer.decode(ids)}")
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
