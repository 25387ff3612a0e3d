"""What a fine-tuning job starts from: `--init` as a portable checkpoint, plus tokenizer and model shape.

`--init` may be a portable folder, a Hugging Face BERT folder (imported on the fly) or a ZeRO
pre-training checkpoint of any layout (its weights converted); the converted copy is written once
by rank 0 into OUTPUT/init/ and read by every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bert_ds.checkpoint.portable import PortableCheckpoint, is_portable, open_portable
from bert_ds.checkpoint.zero import COMPLETE, LATEST, CheckpointError, gather_failures
from bert_ds.config import ConfigError, ModelConfig, model_preset, padded_vocab_size
from bert_ds.data.tokenizer import load_tokenizer

CONVERTED_SUBDIR = "init"


@dataclass
class StartingPoint:
    checkpoint: Optional[PortableCheckpoint]
    tokenizer: object
    model_config: ModelConfig
    description: str


def _kind(path: Path) -> str:
    if is_portable(path):
        return "portable"
    if (path / "config.json").is_file():
        return "huggingface"
    if (path / COMPLETE).is_file() or (path / LATEST).is_file() or any(path.glob(f"*/{COMPLETE}")):
        return "zero"
    raise CheckpointError(
        f"--init {path}: not a bert_ds checkpoint (ZeRO or portable) nor a Hugging Face folder (config.json)."
    )


def _portable(init: str, output: Path, rank: int) -> PortableCheckpoint:
    """Collective: the portable form of --init (converted by rank 0 when needed)."""
    path = Path(init)
    if not path.is_dir():
        raise CheckpointError(f"--init {init}: no such folder.")
    kind = _kind(path)
    if kind == "portable":
        return open_portable(path)
    target = output / CONVERTED_SUBDIR
    failure = ""
    if rank == 0:
        try:
            if kind == "huggingface":
                from bert_ds.checkpoint.hf_import import import_hf

                report = import_hf(path, target)
                if report.initialised:
                    print(f"--init {init}: not in the source, initialised: {', '.join(report.initialised)}", flush=True)
            else:
                from bert_ds.checkpoint.convert import zero_to_portable

                zero_to_portable(str(path), str(target), optimizer=False)
        except (CheckpointError, ConfigError, OSError) as error:
            failure = str(error)
    failures = gather_failures(failure)
    if failures:
        raise CheckpointError(failures[0])
    return open_portable(target)


def resolve(job, rank: int) -> StartingPoint:
    """Collective: the checkpoint, tokenizer and model config of `job` (a FinetuneConfig)."""
    output = Path(job.output)
    checkpoint = _portable(job.init, output, rank) if job.init else None
    if job.tokenizer:
        tokenizer = load_tokenizer(job.tokenizer)
    elif checkpoint is not None and checkpoint.tokenizer_dir is not None:
        tokenizer = load_tokenizer(checkpoint.tokenizer_dir)
    else:
        raise ConfigError("--tokenizer is required: --init is missing or stores no tokenizer.")
    if checkpoint is not None:
        config, description = checkpoint.model_config, f"{job.init} ({checkpoint.manifest.get('source', 'portable')})"
    else:
        config, description = model_preset(job.preset), f"random weights (preset {job.preset}; no --init)"
    if tokenizer.vocab_size > config.vocab_size and checkpoint is not None:
        raise ConfigError(
            f"The tokenizer has {tokenizer.vocab_size} entries, the checkpoint's vocabulary only {config.vocab_size}."
        )
    # Pad like pre-training (rows beyond the tokenizer are never used); the loader zero-fills them.
    vocab = padded_vocab_size(max(tokenizer.vocab_size, config.vocab_size if checkpoint else 0))
    overrides = dict(vocab_size=vocab, activation_checkpointing=False)  # causal stays: an LTR model fine-tunes as LTR
    if job.dropout is not None:
        overrides.update(hidden_dropout=job.dropout, attention_dropout=job.dropout)
    if job.max_seq_length > config.max_position_embeddings:
        raise ConfigError(
            f"--max-seq-length {job.max_seq_length} exceeds the model's {config.max_position_embeddings} positions."
        )
    return StartingPoint(checkpoint, tokenizer, config.replace(**overrides), description)
