"""ZeRO checkpoints of a pre-training run: save, find the latest complete one, load.

Layout of `SAVE_DIR/`:
    step00001000/            DeepSpeed's files (model, ZeRO optimizer shards, LR schedule, client
                             state = run config, step, consumed samples) ...
        rank00003.pt         ... plus one file per rank: its RNG streams and data-stream position
        complete.json        written by rank 0 after every rank finished: the tag is usable
    latest                   the newest complete tag (replaced atomically after complete.json)
    tokenizer/               the run's tokenizer (for exports and conversions)

A crash mid-save leaves a tag without complete.json; it is never picked as latest.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist

COMPLETE = "complete.json"
LATEST = "latest"
TOKENIZER_DIR = "tokenizer"


class CheckpointError(RuntimeError):
    """A missing, incomplete or mismatched checkpoint; the message names the folder or file."""


def tag_for_step(step: int) -> str:
    return f"step{step:08d}"


def rank_file(tag_dir: Path, rank: int) -> Path:
    return tag_dir / f"rank{rank:05d}.pt"


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def complete_tags(save_dir: Path) -> list[str]:
    """Tags with a completion marker, oldest first."""
    if not save_dir.is_dir():
        return []
    return sorted(p.parent.name for p in save_dir.glob(f"*/{COMPLETE}"))


def save(engine, save_dir: str, step: int, client_state: dict, rank_state: dict, keep_last: Optional[int]) -> Path:
    """Collective: every rank calls it. Returns the tag folder once the checkpoint is complete."""
    root = Path(save_dir)
    tag = tag_for_step(step)
    tag_dir = root / tag
    if dist.get_rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        if (tag_dir / COMPLETE).exists():  # re-saving a step (e.g. after a resume): replace it whole
            (tag_dir / COMPLETE).unlink()
    dist.barrier()
    engine.save_checkpoint(str(root), tag=tag, client_state=client_state, save_latest=False)
    torch.save(rank_state, rank_file(tag_dir, dist.get_rank()))
    dist.barrier()  # every rank has written its files
    if dist.get_rank() == 0:
        marker = dict(step=step, world_size=dist.get_world_size(), layout=rank_state["layout"]["sizes"], time=time.time())
        _write_atomically(tag_dir / COMPLETE, json.dumps(marker))
        _write_atomically(root / LATEST, tag)
        if keep_last:
            for old in complete_tags(root)[:-keep_last]:
                shutil.rmtree(root / old, ignore_errors=True)
    dist.barrier()
    return tag_dir


def save_tokenizer(save_dir: str, tokenizer) -> None:
    """Keep the run's tokenizer beside its checkpoints (rank 0, once)."""
    folder = Path(save_dir) / TOKENIZER_DIR
    if not folder.is_dir():
        staging = folder.with_name(TOKENIZER_DIR + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        tokenizer.save(staging)
        os.replace(staging, folder)


def saved_layout(load_dir: str, tag: str) -> Optional[dict]:
    """The layout sizes (tensor/pipeline/data parallel, workers) a checkpoint was written with."""
    return json.loads((Path(load_dir) / tag / COMPLETE).read_text()).get("layout")


def latest_complete_tag(load_dir: str) -> Optional[str]:
    """The tag `latest` names if it is complete, else the newest complete tag, else None."""
    root = Path(load_dir)
    named = root / LATEST
    if named.is_file():
        tag = named.read_text().strip()
        if (root / tag / COMPLETE).is_file():
            return tag
    tags = complete_tags(root)
    return tags[-1] if tags else None


def require_latest(load_dir: str) -> str:
    """The tag to resume from, or a CheckpointError saying why there is none."""
    root = Path(load_dir)
    if not root.is_dir():
        raise CheckpointError(f"--load {load_dir}: no such folder.")
    tag = latest_complete_tag(load_dir)
    if tag is None:
        partial = sorted(p.name for p in root.iterdir() if p.is_dir())
        detail = f" (incomplete: {', '.join(partial)})" if partial else " (it is empty)"
        raise CheckpointError(f"--load {load_dir}: no complete checkpoint in this folder{detail}.")
    return tag


def load(engine, load_dir: str, tag: str, world_size: int) -> tuple[dict, dict]:
    """Collective: restore the engine (model, optimizer, schedule) and return (client state, this
    rank's own state). The layout must match the one that saved it."""
    tag_dir = Path(load_dir) / tag
    marker = json.loads((tag_dir / COMPLETE).read_text())
    if marker["world_size"] != world_size:
        raise CheckpointError(
            f"Checkpoint {tag_dir} was written by {marker['world_size']} processes, this run has {world_size}; "
            "resume with the same layout."
        )
    own_file = rank_file(tag_dir, dist.get_rank())
    if not own_file.is_file():
        raise CheckpointError(f"Checkpoint {tag_dir} lacks {own_file.name}.")
    try:
        path, client_state = engine.load_checkpoint(load_dir, tag=tag)
    except (RuntimeError, OSError, KeyError) as error:
        raise CheckpointError(f"Checkpoint {tag_dir} cannot be loaded: {error}") from None
    if path is None:
        raise CheckpointError(f"Checkpoint {tag_dir} cannot be loaded: DeepSpeed found no model states.")
    rank_state = torch.load(own_file, weights_only=True)
    return client_state, rank_state
