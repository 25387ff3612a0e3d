"""Layout-free ("portable") bert_ds checkpoints: full-size tensors under full parameter names.

One format serves three jobs: an imported Hugging Face model, a ZeRO checkpoint converted to move
to another (TP, PP, DP) layout, and the source of an export. Nothing in it depends on how many
processes wrote or will read it; a reader takes only its tensor-parallel slice of each tensor.

    OUT/
        portable.json           format + version, model config, contents, training progress
        model.safetensors       full (TP=1) fp32 weights, keyed like BertForPretraining.state_dict()
        optimizer.safetensors   optional: "<name>#exp_avg", "<name>#exp_avg_sq" (Adam/LAMB moments)
        tokenizer/              optional: tokenizer.model (sentencepiece) or vocab.txt (WordPiece)

safetensors, not pickle: loading a checkpoint never executes code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.config import ModelConfig

if TYPE_CHECKING:  # torch is only needed once tensors are read or written: launch plans stay light
    import torch

FORMAT = "bert_ds-portable"
VERSION = 1
MANIFEST = "portable.json"
WEIGHTS = "model.safetensors"
OPTIMIZER = "optimizer.safetensors"
TOKENIZER_DIR = "tokenizer"
MOMENTS = ("exp_avg", "exp_avg_sq")


def moment_key(name: str, moment: str) -> str:
    return f"{name}#{moment}"


@dataclass
class PortableCheckpoint:
    """An opened portable folder; tensors are read lazily (`safetensors.safe_open`)."""

    path: Path
    model_config: ModelConfig
    manifest: dict
    training: Optional[dict] = field(default=None)
    """Progress of the run that wrote it (step, schedule, optimizer step, data-stream states), or
    None for a weights-only checkpoint (an import)."""

    @property
    def has_optimizer(self) -> bool:
        return (self.path / OPTIMIZER).is_file()

    @property
    def tokenizer_dir(self) -> Optional[Path]:
        folder = self.path / TOKENIZER_DIR
        return folder if folder.is_dir() else None

    def read_weights(self) -> dict[str, torch.Tensor]:
        """Every full-size weight (for export and tests; training ranks read slices with portable_load)."""
        from safetensors.torch import load_file

        return load_file(self.path / WEIGHTS)


def is_portable(path: str | os.PathLike) -> bool:
    return (Path(path) / MANIFEST).is_file()


def write_portable(
    out: str | os.PathLike,
    model_config: ModelConfig,
    weights: dict[str, torch.Tensor],
    moments: Optional[dict[str, torch.Tensor]] = None,
    training: Optional[dict] = None,
    tokenizer=None,
    source: str = "",
    task: Optional[dict] = None,
) -> Path:
    """Write a portable folder; the manifest goes last, so a folder without it is incomplete.

    `moments` is keyed by moment_key(); `tokenizer` is a bert_ds tokenizer (it saves its files);
    `task` describes a fine-tuned head for exports (kind, num_labels, problem_type, id2label).
    """
    from safetensors.torch import save_file

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)
    save_file(_contiguous(weights), folder / WEIGHTS)
    if moments:
        save_file(_contiguous(moments), folder / OPTIMIZER)
    if tokenizer is not None:
        shutil.rmtree(folder / TOKENIZER_DIR, ignore_errors=True)
        tokenizer.save(folder / TOKENIZER_DIR)
    manifest = dict(
        format=FORMAT,
        version=VERSION,
        source=source,
        model_config=dataclasses.asdict(model_config),
        contents=dict(weights=len(weights), optimizer=bool(moments), tokenizer=tokenizer is not None),
        training=training,
    )
    if task:
        manifest["task"] = task
    temporary = folder / (MANIFEST + ".tmp")
    temporary.write_text(json.dumps(manifest, indent=1))
    os.replace(temporary, folder / MANIFEST)
    return folder


def _contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # safetensors refuses shared or strided storage (the tied decoder shares the embedding).
    return {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in tensors.items()}


def open_portable(path: str | os.PathLike) -> PortableCheckpoint:
    """Open and check a portable folder; a CheckpointError names the file that is wrong."""
    folder = Path(path)
    manifest_file = folder / MANIFEST
    if not manifest_file.is_file():
        raise CheckpointError(f"{folder} is not a bert_ds portable checkpoint (no {MANIFEST}).")
    try:
        manifest = json.loads(manifest_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{manifest_file} is unreadable: {error}") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(
            f"{manifest_file}: format {manifest.get('format')!r} version {manifest.get('version')!r}, "
            f"expected {FORMAT!r} version {VERSION}."
        )
    if not (folder / WEIGHTS).is_file():
        raise CheckpointError(f"{folder / WEIGHTS} is missing.")
    try:
        model_config = ModelConfig(**manifest["model_config"])
    except (KeyError, TypeError) as error:
        raise CheckpointError(f"{manifest_file}: bad model_config: {error}") from None
    return PortableCheckpoint(folder, model_config, manifest, manifest.get("training"))
