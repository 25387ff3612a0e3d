"""ZeRO checkpoints of a pre-training run: save, find the latest complete one, load.

Layout of `SAVE_DIR/`:
    step00001000/            DeepSpeed's files (model, ZeRO optimizer shards, LR schedule, client
                             state = run config, step, consumed samples) ...
        rank00003.pt         ... plus one file per rank: its RNG streams and data-stream position
        complete.json        written by rank 0 after every rank finished: the tag is usable
    latest                   the newest complete tag (replaced atomically after complete.json)
    best.json                with --keep-best: the best evaluated tag and its held-out metrics
    tokenizer/               the run's tokenizer (for exports and conversions)

A crash mid-save leaves a tag without complete.json; it is never picked as latest.
torch is imported where tensors or collectives are used, so launch plans read markers without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Optional

from bert_ds.errors import CheckpointError  # noqa: F401 (raised here; imported from here by callers)

COMPLETE = "complete.json"
LATEST = "latest"
BEST = "best.json"
TOKENIZER_DIR = "tokenizer"




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


class SaveHooks:
    """Points inside `save` where a test injects a failure (training/loop/faults.py provides the same
    two functions from BERT_DS_FAULTS); a real run passes nothing and gets these no-ops."""

    @staticmethod
    def failing_writes(engine, step: int, rank: int):
        """A context manager around DeepSpeed's own writes."""
        return contextlib.nullcontext()

    @staticmethod
    def at(point: str, step: int, rank: int) -> None:
        """Called at "save-middle" (after DeepSpeed's files) and "save-end" (before the marker)."""


NO_FAULTS = SaveHooks()


def save(engine, save_dir: str, step: int, client_state: dict, rank_state: dict, keep_last: Optional[int],
         summary: Optional[dict] = None, best: Optional[dict] = None, hooks: Optional[SaveHooks] = None) -> Path:
    """Collective: every rank calls it. Returns the tag folder once the checkpoint is complete.

    `summary` (JSON values) goes into complete.json, where launch plans read it without opening
    DeepSpeed's files (model shape, sequence length, the step the run was to stop at).

    A write that fails on any rank (full disk, unwritable folder) fails the save on every rank
    with one CheckpointError naming the rank and the error; the partial folder is removed and
    `latest` still names the previous checkpoint, untouched.

    `best` (JSON values): this checkpoint becomes the one BEST names, before the --keep-last
    rotation runs, so the previous best can go at once. `hooks`: see SaveHooks.
    """
    import torch
    import torch.distributed as dist

    faults = hooks or NO_FAULTS
    root = Path(save_dir)
    tag = tag_for_step(step)
    tag_dir = root / tag
    rank = dist.get_rank()
    failure = ""
    if rank == 0:
        try:
            root.mkdir(parents=True, exist_ok=True)
            if (tag_dir / COMPLETE).exists():  # re-saving a step (e.g. after a resume): replace it whole
                (tag_dir / COMPLETE).unlink()
        except OSError as error:
            failure = f"{error}"
    failures = gather_failures(failure)
    if failures:
        raise CheckpointError(f"Cannot write checkpoint {tag_dir}: {'; '.join(failures)}")
    try:
        with faults.failing_writes(engine, step, rank):
            engine.save_checkpoint(str(root), tag=tag, client_state=client_state, save_latest=False)
    except (OSError, RuntimeError) as error:  # torch.save reports some write errors as RuntimeError
        failure = f"rank {rank}: {error}"
        dist.barrier()  # the barrier DeepSpeed's save ends with, so the other ranks are not left waiting
    if not failure:
        faults.at("save-middle", step, rank)
        try:
            torch.save(rank_state, rank_file(tag_dir, rank))
        except (OSError, RuntimeError) as error:
            failure = f"rank {rank}: {error}"
    failures = gather_failures(failure)
    if failures:
        if rank == 0:
            shutil.rmtree(tag_dir, ignore_errors=True)
        dist.barrier()
        previous = latest_complete_tag(str(root))
        kept = f"the previous checkpoint {root / previous} is intact" if previous else "there is no earlier checkpoint"
        raise CheckpointError(f"Saving checkpoint {tag_dir} failed ({'; '.join(failures)}); {kept}.")
    faults.at("save-end", step, rank)
    if rank == 0:
        files = {str(p.relative_to(tag_dir)): p.stat().st_size for p in sorted(tag_dir.rglob("*")) if p.is_file()}
        marker = dict(step=step, world_size=dist.get_world_size(), layout=rank_state["layout"]["sizes"],
                      time=time.time(), files=files, **(summary or {}))
        _write_atomically(tag_dir / COMPLETE, json.dumps(marker))
        _write_atomically(root / LATEST, tag)
        if best is not None:
            mark_best(str(root), tag, best)
        if keep_last:
            best = best_tag(str(root))  # --keep-best: kept apart from the newest keep_last
            for old in complete_tags(root)[:-keep_last]:
                if old != best:
                    shutil.rmtree(root / old, ignore_errors=True)
    dist.barrier()
    return tag_dir


def mark_best(save_dir: str, tag: str, record: dict) -> None:
    """Name `tag` the best evaluated checkpoint (BEST holds the tag and its metrics); rotation by
    --keep-last never removes it. The previous best falls back into rotation."""
    _write_atomically(Path(save_dir) / BEST, json.dumps(dict(tag=tag, **record)))


def best_tag(save_dir: str) -> Optional[str]:
    """The tag BEST names, if that checkpoint is complete."""
    try:
        tag = json.loads((Path(save_dir) / BEST).read_text())["tag"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return tag if (Path(save_dir) / tag / COMPLETE).is_file() else None


def gather_failures(failure: str) -> list[str]:
    """Collective: every rank's failure message (empty list: all succeeded). Work one rank does for
    all (a conversion, a folder) ends with it, so an error there is every rank's clear error, not
    a barrier the others wait at forever."""
    import torch.distributed as dist

    messages = [None] * dist.get_world_size()
    dist.all_gather_object(messages, failure)
    return [m for m in messages if m]


def verify(tag_dir: Path) -> None:
    """Every file the completion marker lists is there with its size: a CheckpointError names the
    first that is missing or truncated (a cheap check before any rank starts loading)."""
    marker_file = tag_dir / COMPLETE
    try:
        marker = json.loads(marker_file.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{marker_file} is unreadable: {error}") from None
    for name, size in marker.get("files", {}).items():
        path = tag_dir / name
        if not path.is_file():
            raise CheckpointError(f"Checkpoint file {path} is missing.")
        if path.stat().st_size != size:
            raise CheckpointError(f"Checkpoint file {path} is truncated or changed: {path.stat().st_size} bytes, {size} written.")


def prepare_save_dir(save_dir: str, tokenizer) -> None:
    """Collective: create --save and keep the run's tokenizer in it (rank 0, once), so that an
    unwritable folder is one clear error at start-up on every rank."""
    import torch.distributed as dist

    failure = ""
    if dist.get_rank() == 0:
        try:
            folder = Path(save_dir) / TOKENIZER_DIR
            folder.parent.mkdir(parents=True, exist_ok=True)
            if not folder.is_dir():
                staging = folder.with_name(TOKENIZER_DIR + ".tmp")
                shutil.rmtree(staging, ignore_errors=True)
                tokenizer.save(staging)
                os.replace(staging, folder)
        except OSError as error:
            failure = f"--save {save_dir} is not writable: {error}"
    failures = gather_failures(failure)
    if failures:
        raise CheckpointError(failures[0])


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


def read_marker(load_dir: str, tag: str) -> dict:
    """A checkpoint's complete.json (step, layout, files, and the summary of newer checkpoints)."""
    marker_file = Path(load_dir) / tag / COMPLETE
    try:
        return json.loads(marker_file.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{marker_file} is unreadable: {error}") from None


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
    import torch
    import torch.distributed as dist

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
