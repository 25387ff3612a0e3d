"""ZeRO checkpoint (any TP, PP, DP) -> portable checkpoint, offline, in one process.

DeepSpeed's ZeRO-1/2 optimizer files hold, per rank, flat fp32 partitions of its parameter
groups plus `param_slice_mappings` (where each parameter's piece lies in the partition). Pieces
of one parameter, taken in data-parallel order, concatenate to this tensor-parallel rank's whole
parameter; the TP slices then concatenate along the dimension megatron split. Without ZeRO
(stage 0, the fp32 default at DP=1) the weights are in DeepSpeed's model file and the moments in
torch's optimizer state, by position in the parameter groups. ZeRO-3 partitions are put back
together by DeepSpeed's own consolidation (checkpoint/zero3_consolidate.py), one TP rank at a
time. Each rank file of ours records what this needs (its place in the layout, parameter names -> full names, shapes, TP
dimensions), so no model has to be built here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch

from bert_ds.checkpoint import zero
from bert_ds.checkpoint.portable import MOMENTS, moment_key, write_portable
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.checkpoint.zero3_consolidate import zero3_tp_local_tensors
from bert_ds.config import ModelConfig

STATES = ("fp32",) + MOMENTS


def resolve_tag_dir(path: str) -> Path:
    """A tag folder (has complete.json), or the newest complete tag of a save folder."""
    folder = Path(path)
    if (folder / zero.COMPLETE).is_file():
        return folder
    return folder / zero.require_latest(str(folder))


def read_checkpoint_file(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"Checkpoint file {path} is missing.")
    try:
        # DeepSpeed's own files hold numpy/argparse objects; ours are weights_only-safe.
        return torch.load(path, map_location="cpu", weights_only=path.name.startswith("rank"))
    except Exception as error:  # truncated zip, unpickling error, ...: say which file
        raise CheckpointError(f"Checkpoint file {path} is unreadable: {error}") from None


def read_rank_files(tag_dir: Path) -> list[dict]:
    marker = json.loads((tag_dir / zero.COMPLETE).read_text())
    states = [read_checkpoint_file(zero.rank_file(tag_dir, rank)) for rank in range(marker["world_size"])]
    for rank, state in enumerate(states):
        if "layout" not in state:
            raise CheckpointError(
                f"{zero.rank_file(tag_dir, rank)} records no parallel layout (written by an older bert_ds); "
                "resume it with the layout that wrote it."
            )
    return states


def _tp_local_tensors(tag_dir: Path, ranks: list[dict], with_moments: bool) -> tuple[dict, dict]:
    """{full name: {state: tensor}} of one (PP stage, TP rank) from its DP ranks' optimizer files,
    and the Adam step count."""
    pieces: dict[str, dict[str, list[torch.Tensor]]] = {}
    step = None
    for record in sorted(ranks, key=lambda r: r["layout"]["dp_rank"]):
        layout = record["layout"]
        optim = read_checkpoint_file(tag_dir / layout["optimizer_file"])["optimizer_state_dict"]
        groups = optim["base_optimizer_state"]["state"]
        for group, mapping in enumerate(optim["param_slice_mappings"]):
            flat = dict(fp32=optim["single_partition_of_fp32_groups"][group])
            if with_moments:
                flat.update({m: groups[group][m] for m in MOMENTS})
            if "step" in groups[group]:
                step = int(groups[group]["step"])
            for name, address in mapping.items():
                per_state = pieces.setdefault(layout["names"][name], {s: [] for s in flat})
                for key, tensor in flat.items():
                    per_state[key].append(tensor.narrow(0, address.start, address.numel))
    shapes = {}
    for record in ranks:
        shapes.update({record["layout"]["names"][n]: s for n, s in record["layout"]["shapes"].items()})
    tensors = {
        full: {key: torch.cat(parts).view(shapes[full]) for key, parts in per_state.items()}
        for full, per_state in pieces.items()
    }
    return tensors, dict(step=step)


def _tp_local_tensors_without_zero(tag_dir: Path, ranks: list[dict], with_moments: bool) -> tuple[dict, dict]:
    """The same for a run without ZeRO: weights in DeepSpeed's model file (written by DP rank 0),
    Adam moments in its torch optimizer state, keyed by position in the parameter groups."""
    record = min(ranks, key=lambda r: r["layout"]["dp_rank"])["layout"]
    states = read_checkpoint_file(tag_dir / record["model_file"])
    module, optimizer = states["module"], states.get("optimizer")
    if with_moments and (optimizer is None or record.get("optimizer_order") is None):
        raise CheckpointError(f"{tag_dir / record['model_file']} holds no optimizer state to convert.")
    tensors = {full: {"fp32": module[local].float()} for local, full in record["names"].items()}
    if optimizer is not None and "fp32_groups" in optimizer:
        # bf16/fp16 without ZeRO: the model file holds 16-bit weights, the optimizer the fp32
        # masters (and torch's own state one level down).
        masters = [t for group in optimizer["fp32_groups"] for t in group]
        for full, master in zip((f for group in record["optimizer_order"] for f in group), masters):
            tensors[full]["fp32"] = master.float()
        optimizer = optimizer["optimizer_state_dict"]
    step = None
    if with_moments:
        order = [full for group in record["optimizer_order"] for full in group]
        for index, full in enumerate(order):
            state = optimizer["state"].get(index, {})
            for moment in MOMENTS:
                tensors[full][moment] = state[moment] if moment in state else torch.zeros_like(tensors[full]["fp32"])
            if "step" in state:
                step = int(state["step"])
    return tensors, dict(step=step)


def read_full_state(tag_dir: Path, with_moments: bool = True) -> tuple[dict, Optional[int], list[dict]]:
    """({full name: {"fp32": t, "exp_avg": t, ...}} at full size, Adam step, rank records)."""
    records = read_rank_files(tag_dir)
    first = records[0]["layout"]
    stage = first["zero_stage"]
    if stage == 0 and first["pipeline_parallel"] > 1:
        raise CheckpointError(
            f"Checkpoint {tag_dir} uses pipeline stages without ZeRO; only ZeRO-1 pipeline checkpoints can be "
            "converted (resume it with the layout that wrote it)."
        )
    read_place = {0: _tp_local_tensors_without_zero, 3: zero3_tp_local_tensors}.get(stage, _tp_local_tensors)
    by_place: dict[tuple[int, int], list[dict]] = {}
    for record in records:
        place = (record["layout"]["pp_rank"], record["layout"]["tp_rank"])
        by_place.setdefault(place, []).append(record)
    full: dict[str, dict[str, torch.Tensor]] = {}
    step = None
    for pp_rank in range(first["pipeline_parallel"]):
        slices = [read_place(tag_dir, by_place[(pp_rank, tp)], with_moments) for tp in range(first["tensor_parallel"])]
        step = slices[0][1]["step"] if step is None else step
        dims = {}
        for record in by_place[(pp_rank, 0)]:
            dims.update(record["layout"]["dims"])
        for name in slices[0][0]:
            if name in full:  # a tied tensor held by the first and last stage: identical copies
                continue
            dim = dims.get(name)
            full[name] = {
                key: (torch.cat([s[0][name][key] for s in slices], dim=dim) if dim is not None else slices[0][0][name][key])
                for key in slices[0][0][name]
            }
    return full, step, records


def zero_to_portable(checkpoint_dir: str, out: str, optimizer: bool = False) -> Path:
    """Write the portable form of a ZeRO checkpoint: weights (the fp32 masters), and with
    `optimizer` also the Adam moments and everything a resume needs (step, LR schedule, the data
    stream's position on every old DP rank). Returns `out`."""
    from bert_ds.data.tokenizer.load import load_tokenizer

    tag_dir = resolve_tag_dir(checkpoint_dir)
    full, adam_step, records = read_full_state(tag_dir, with_moments=optimizer)
    # Rank 0's model file (DeepSpeed names it differently under ZeRO-3) holds our client state.
    model_file = tag_dir / records[0]["layout"]["model_file"]
    model_states = read_checkpoint_file(model_file)
    for key in ("model_config", "state", "run"):
        if key not in model_states:
            raise CheckpointError(f"{model_file} lacks {key!r}; not a bert_ds checkpoint.")
    weights = {name: states["fp32"] for name, states in full.items()}
    moments = {moment_key(n, m): states[m] for n, states in full.items() for m in MOMENTS} if optimizer else None
    training = None
    if optimizer:
        first = records[0]["layout"]
        training = dict(
            state=model_states["state"],
            run=model_states["run"],
            scheduler=model_states["lr_scheduler"],
            engine=dict(
                global_steps=model_states["global_steps"],
                global_samples=model_states["global_samples"],
                skipped_steps=model_states["skipped_steps"],
            ),
            optimizer_step=adam_step,
            layout={k: first[k] for k in ("tensor_parallel", "pipeline_parallel", "data_parallel", "zero_stage")},
            # One loader state per old DP rank (all TP/PP ranks of a DP rank read the same data).
            loader_states=[
                r["loader"] for r in sorted(records, key=lambda r: r["layout"]["dp_rank"])
                if r["layout"]["tp_rank"] == 0 and r["layout"]["pp_rank"] == 0
            ],
        )
    tokenizer_dir = tag_dir.parent / zero.TOKENIZER_DIR
    tokenizer = load_tokenizer(tokenizer_dir) if tokenizer_dir.is_dir() else None
    config = ModelConfig(**model_states["model_config"])
    return write_portable(out, config, weights, moments, training, tokenizer, source=f"zero:{tag_dir}")
