"""The tokenizer of a run: the one given; for the built-in sample, a small sentencepiece model
trained once and cached; for real corpora with the base/large presets, Google's uncased BERT
vocabulary (built in), so the model shares ids with every Google/Hugging Face BERT."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from bert_ds.runtime.cache import cache_dir, exclusive, publish, staging_path
from bert_ds.config import ConfigError
from bert_ds.data.tokenizer.load import load_tokenizer, train_sentencepiece

SAMPLE_VOCAB_SIZE = 8000
REAL_CORPUS_TOKENIZER = {"base": "bert-base-uncased", "large": "bert-base-uncased"}
"""Preset -> the tokenizer used with your own --data when --tokenizer is not given."""


def sample_tokenizer_dir() -> Path:
    """The cached sample tokenizer; its name changes with the sample's files, so a cache made from
    an earlier sample is never used with a newer one."""
    import hashlib

    from bert_ds.data.sources import SAMPLE_DIR

    files = sorted(p for p in SAMPLE_DIR.rglob("*") if p.suffix in {".txt", ".jsonl"})
    listing = "".join(f"{p.relative_to(SAMPLE_DIR)}:{p.stat().st_size};" for p in files)
    return cache_dir() / f"sample-sentencepiece-{SAMPLE_VOCAB_SIZE}-{hashlib.sha256(listing.encode()).hexdigest()[:8]}"


def tokenizer_choice(run) -> Optional[str]:
    """The tokenizer a run uses: --tokenizer, the preset's default for real corpora, or None for
    the sample's cached sentencepiece model. A small preset on real data must name one."""
    if run.data.tokenizer:
        return run.data.tokenizer
    from bert_ds.data.sources import is_sample

    if is_sample(run.data.sources):
        return None
    if run.model.preset in REAL_CORPUS_TOKENIZER:
        return REAL_CORPUS_TOKENIZER[run.model.preset]
    raise ConfigError(
        f"--tokenizer is required with your own --data and preset {run.model.preset}: pass bert-base-uncased or "
        "bert-base-cased (built in), a BERT vocab.txt, or a sentencepiece model trained with "
        "`python -m bert_ds.data.tokenizer train --data ... --output DIR`."
    )


def resolve_tokenizer(run, train: bool = True):
    """The run's tokenizer (see `tokenizer_choice`); the sample's is trained on first use, or
    without `train` (a dry run trains nothing) None while it is not cached yet."""
    choice = tokenizer_choice(run)
    if choice is not None:
        return load_tokenizer(choice, run.data.lowercase)
    refuse_lowercase_for_sample(run)
    return sample_tokenizer() if train else cached_sample_tokenizer()


def sample_tokenizer():
    """The sample's sentencepiece model from the cache, trained on first use (a file lock lets the
    first process train it and the others wait)."""
    target = sample_tokenizer_dir()
    model = target / "tokenizer.model"
    with exclusive(target.parent / f"{target.name}.lock"):
        if not model.exists():
            from bert_ds.data.sources import iter_document_texts

            staging = staging_path(target)
            train_sentencepiece(iter_document_texts(None), staging, vocab_size=SAMPLE_VOCAB_SIZE)
            publish(staging, target)
            if not model.exists():  # a folder left there by something else: publish kept it
                raise ConfigError(f"{target} exists without tokenizer.model; remove it and start again.")
    return load_tokenizer(model)


def refuse_lowercase_for_sample(run) -> None:
    if run.data.lowercase is not None:
        raise ConfigError("--lowercase/--no-lowercase apply to WordPiece vocabularies; the sample's tokenizer is sentencepiece.")


def cached_sample_tokenizer():
    """The sample's sentencepiece model if it was trained already, else None (a dry run trains nothing)."""
    model = sample_tokenizer_dir() / "tokenizer.model"
    return load_tokenizer(model) if model.is_file() else None


def describe_tokenizer(tokenizer) -> tuple[object, str, int]:
    """(tokenizer, its description for the plan, its vocabulary size)."""
    return tokenizer, f"{tokenizer.name}: {tokenizer.vocab_size:,} entries, {tokenizer.casing()}", tokenizer.vocab_size


def planned_tokenizer(run) -> tuple[object, str, int]:
    """`describe_tokenizer` of the run's tokenizer for a plan made without it (a dry run): loaded,
    but never trained; the sample's, when not cached yet, is described by its size limit."""
    tokenizer = resolve_tokenizer(run, train=False)
    if tokenizer is None:
        return None, f"sentencepiece, trained on the sample at start (at most {SAMPLE_VOCAB_SIZE} entries)", SAMPLE_VOCAB_SIZE
    return describe_tokenizer(tokenizer)
