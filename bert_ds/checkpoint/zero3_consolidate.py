"""One tensor-parallel rank's ZeRO-3 checkpoint files -> its whole tensors, by DeepSpeed's own
consolidation (deepspeed/checkpoint/ds_to_universal.py), not a second one written here.

A ZeRO-3 optimizer file holds, per parameter group, a flat fp32 partition and the Adam moments'
partitions, each parameter padded to a multiple of DP. DeepSpeed's universal-checkpoint converter
puts them back together (fp32 weights and both moments; its `zero_to_fp32` would give the weights
only). With TP > 1 it wants AutoTP's slicing metadata, which megatron layers do not record; each
TP rank's files are independent ZeRO-3 partitions of that rank's slices, though, so each rank is
converted on its own through a scratch folder of links named as a TP=1 checkpoint, and
checkpoint/convert.py concatenates the TP slices along the dimensions our rank files record.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import tempfile
from pathlib import Path

import torch

from bert_ds.checkpoint.portable import MOMENTS
from bert_ds.checkpoint.zero import CheckpointError


def _as_tp_rank_zero(name: str) -> str:
    return re.sub(r"mp_rank_\d+", "mp_rank_00", name)


def zero3_tp_local_tensors(tag_dir: Path, ranks: list[dict], with_moments: bool) -> tuple[dict, dict]:
    """{full name: {state: tensor}} of one TP rank from its DP ranks' ZeRO-3 files, and the Adam
    step count. `ranks` are that TP rank's records (rank files, checkpoint/pretraining.py)."""
    from deepspeed.checkpoint.ds_to_universal import main as to_universal

    layouts = sorted((r["layout"] for r in ranks), key=lambda layout: layout["dp_rank"])
    # Scratch space beside the checkpoint (the whole model's fp32 weights and moments pass
    # through it), not /tmp, which is small on many cluster nodes.
    with tempfile.TemporaryDirectory(prefix=".zero3-consolidation-", dir=tag_dir.parent) as scratch:
        view = Path(scratch) / "view"
        view.mkdir()
        for layout in layouts:
            for name in (layout["model_file"], layout["optimizer_file"]):
                source = tag_dir / name
                if not source.is_file():
                    raise CheckpointError(f"Checkpoint file {source} is missing.")
                (view / _as_tp_rank_zero(name)).symlink_to(source.resolve())
        universal = Path(scratch) / "universal" / tag_dir.name
        arguments = argparse.Namespace(input_folder=str(view), output_folder=str(universal), num_extract_workers=1,
                                       num_merge_workers=1, keep_temp_folder=False, strict=True, inject_missing_state=False)
        log = io.StringIO()  # DeepSpeed's progress lines and bars, shown only if it fails
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                to_universal(arguments)
        except Exception as error:  # a damaged or foreign file: say which folder, with DeepSpeed's words
            raise CheckpointError(f"DeepSpeed could not consolidate the ZeRO-3 files of {tag_dir} "
                                  f"(TP rank {layouts[0]['tp_rank']}): {error}") from None
        states = ("fp32",) + (MOMENTS if with_moments else ())
        zero = universal / "zero"
        names, shapes = layouts[0]["names"], layouts[0]["shapes"]
        tensors = {
            names[local]: {state: torch.load(zero / local / f"{state}.pt", weights_only=True).view(shape)
                           for state in states}
            for local, shape in shapes.items()
        }
        optimizer = torch.load(zero / "optimizer_state.pt", weights_only=False)["optimizer_state_dict"]["state"]
        step = optimizer[0].get("step") if optimizer else None
    return tensors, dict(step=int(step) if step is not None else None)
