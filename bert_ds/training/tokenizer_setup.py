"""The tokenizer of a run: the one given, or (for the built-in sample) one trained once and cached."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from bert_ds.config import ConfigError
from bert_ds.data.tokenizer import load_tokenizer, train_sentencepiece

SAMPLE_VOCAB_SIZE = 8000


def cache_dir() -> Path:
    return Path(os.environ.get("BERT_DS_CACHE", Path.home() / ".cache" / "bert_ds"))


def sample_tokenizer_dir() -> Path:
    return cache_dir() / f"sample-sentencepiece-{SAMPLE_VOCAB_SIZE}"


def resolve_tokenizer(run):
    """`--tokenizer` if given; else, for the built-in sample, a cached sentencepiece model.

    Several ranks may start at once: a file lock lets the first train it and the others wait.
    """
    if run.tokenizer:
        return load_tokenizer(run.tokenizer)
    if run.data != ["sample"]:
        raise ConfigError(
            "--tokenizer is required with your own --data; train one with "
            "`python -m bert_ds.data.tokenizer train --data ... --output DIR` or pass a BERT vocab.txt."
        )
    target = sample_tokenizer_dir()
    model = target / "tokenizer.model"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not model.exists():
            from bert_ds.data.sources import iter_document_texts

            staging = target.with_name(target.name + f".tmp{os.getpid()}")
            train_sentencepiece(iter_document_texts(None), staging, vocab_size=SAMPLE_VOCAB_SIZE)
            os.replace(staging, target)
    return load_tokenizer(model)
