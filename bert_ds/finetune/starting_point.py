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
from bert_ds.data.tokenizer.load import load_tokenizer

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
    checkpoint = _portable(job.start.init, Path(job.start.output), rank) if job.start.init else None
    if job.start.tokenizer:
        tokenizer = load_tokenizer(job.start.tokenizer, job.start.lowercase)
    elif checkpoint is not None and checkpoint.tokenizer_dir is not None:
        tokenizer = load_tokenizer(checkpoint.tokenizer_dir, job.start.lowercase)
    else:
        raise ConfigError("--tokenizer is required: --init is missing or stores no tokenizer.")
    if checkpoint is not None:
        config, description = checkpoint.model_config, f"{job.start.init} ({checkpoint.manifest.get('source', 'portable')})"
    else:
        config, description = _random_model(job)
    return StartingPoint(checkpoint, tokenizer, finetuning_model_config(job, config, tokenizer, checkpoint is not None), description)


def _random_model(job) -> tuple[ModelConfig, str]:
    """The config and description of random starting weights (no --init): the preset's shape."""
    config = model_preset(job.start.preset)
    if job.start.layer_norm_position:
        config = config.replace(layer_norm_position=job.start.layer_norm_position)
    return config, f"random weights (preset {job.start.preset}, {config.layer_norm_position}-LN; no --init)"


def finetuning_model_config(job, config: ModelConfig, tokenizer, from_checkpoint: bool) -> ModelConfig:
    """The model a job fine-tunes: the starting point's shape, its vocabulary padded as in
    pre-training, the job's dropout; refused when the tokenizer or --max-seq-length do not fit."""
    if tokenizer.vocab_size > config.vocab_size and from_checkpoint:
        raise ConfigError(
            f"The tokenizer has {tokenizer.vocab_size} entries, the checkpoint's vocabulary only {config.vocab_size}."
        )
    # Pad like pre-training (rows beyond the tokenizer are never used); the loader zero-fills them.
    vocab = padded_vocab_size(max(tokenizer.vocab_size, config.vocab_size if from_checkpoint else 0))
    overrides = dict(vocab_size=vocab, activation_checkpointing=False)  # causal stays: an LTR model fine-tunes as LTR
    if job.recipe.dropout is not None:
        overrides.update(hidden_dropout=job.recipe.dropout, attention_dropout=job.recipe.dropout)
    if job.recipe.max_seq_length > config.max_position_embeddings:
        raise ConfigError(
            f"--max-seq-length {job.recipe.max_seq_length} exceeds the model's {config.max_position_embeddings} positions."
        )
    return config.replace(**overrides)


def describe_init(job) -> tuple[ModelConfig, object, str]:
    """(model config, tokenizer, description) of `job`'s starting point, read from manifests only:
    no weights loaded, nothing converted or written (the dry run's view of `resolve`)."""
    if not job.start.init:
        if not job.start.tokenizer:
            raise ConfigError("--tokenizer is required: --init is missing or stores no tokenizer.")
        tokenizer = load_tokenizer(job.start.tokenizer, job.start.lowercase)
        config, description = _random_model(job)
        return finetuning_model_config(job, config, tokenizer, False), tokenizer, description
    path = Path(job.start.init)
    if not path.is_dir():
        raise CheckpointError(f"--init {job.start.init}: no such folder.")
    kind = _kind(path)
    if kind == "portable":
        checkpoint = open_portable(path)
        config, tokenizer_dir = checkpoint.model_config, checkpoint.tokenizer_dir
    elif kind == "huggingface":
        from bert_ds.checkpoint.hf_import import read_hf_config
        from bert_ds.checkpoint.hf_weights import model_config_from_hf

        config, tokenizer_dir = model_config_from_hf(read_hf_config(path / "config.json")[1]), path
    else:
        config, tokenizer_dir = _zero_model_config(path)
    if job.start.tokenizer:
        tokenizer = load_tokenizer(job.start.tokenizer, job.start.lowercase)
    elif tokenizer_dir is not None and tokenizer_dir.is_dir():
        tokenizer = load_tokenizer(tokenizer_dir, job.start.lowercase)
    else:
        raise ConfigError(f"--tokenizer is required: --init {job.start.init} stores no tokenizer.")
    return finetuning_model_config(job, config, tokenizer, True), tokenizer, f"{job.start.init} ({kind} checkpoint)"


def _zero_model_config(path: Path) -> tuple[ModelConfig, Path]:
    """A ZeRO checkpoint's model config from its completion marker (older checkpoints: from
    DeepSpeed's model-states file), and its save folder's tokenizer folder."""
    from bert_ds.checkpoint import zero

    if (path / COMPLETE).is_file():
        save_dir, tag = path.parent, path.name
    else:
        save_dir, tag = path, zero.require_latest(str(path))
    zero.verify(save_dir / tag)
    stored = zero.read_marker(str(save_dir), tag).get("model_config")
    if stored is None:
        from bert_ds.checkpoint.convert import read_checkpoint_file

        stored = read_checkpoint_file(save_dir / tag / "mp_rank_00_model_states.pt").get("model_config")
    try:
        return ModelConfig(**stored), save_dir / zero.TOKENIZER_DIR
    except TypeError as error:
        raise CheckpointError(f"Checkpoint {save_dir / tag}: bad model_config: {error}") from None
