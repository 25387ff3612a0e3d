"""Load a portable checkpoint's weights into a model of any (TP, PP) layout.

Each rank reads only the tensors its stage holds and only its tensor-parallel slice of them. The
word-embedding rows may be fewer in the checkpoint than in the model (an imported Hugging Face
vocabulary of 30522 against our padding to a multiple of 128): the extra rows are zero, and
they are never a target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

import torch

from bert_ds.checkpoint.portable import MOMENTS, OPTIMIZER, WEIGHTS, PortableCheckpoint, moment_key
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.runtime.partitioned import full_shape, writable

# Full names whose first dimension is the vocabulary (padded in the model).
VOCAB_ROWS = ("bert.embeddings.word_embeddings.weight", "lm_head.decoder.bias")


def partition_dim(param: torch.Tensor) -> Optional[int]:
    """The dimension megatron split `param` along for tensor parallelism, None if replicated."""
    return param.partition_dim if getattr(param, "tensor_model_parallel", False) else None


def full_parameter_names(model: torch.nn.Module, full_names: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """{model parameter name: BertForPretraining name}; pipeline stages pass their mapping."""
    return {name: (full_names or {}).get(name, name) for name, _ in model.named_parameters()}


@dataclass
class LoadReport:
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Model parameters the checkpoint lacks (left as initialised), only those allowed."""
    padded_vocab: Optional[tuple[int, int]] = None
    """(checkpoint rows, model rows) when the vocabulary was padded."""


def read_model_slices(
    model: torch.nn.Module,
    checkpoint: PortableCheckpoint,
    tp_rank: int,
    tp_size: int,
    full_names: Optional[Mapping[str, str]] = None,
    allow_missing: Iterable[str] = (),
    moments: bool = False,
) -> tuple[dict[str, dict[str, torch.Tensor]], LoadReport]:
    """{model parameter name: {"weight": this rank's fp32 slice, and with `moments` each of
    MOMENTS}} plus a report. Only the slices are kept in memory, one tensor at a time.

    A parameter the checkpoint lacks is a CheckpointError naming it, unless its full name starts
    with one of `allow_missing` (e.g. a fine-tuning head); checkpoint tensors the model has no
    place for (an NSP head when training MLM only) are ignored.
    """
    from safetensors import safe_open

    names = full_parameter_names(model, full_names)
    params = dict(model.named_parameters())
    report = LoadReport()
    allowed = tuple(allow_missing)
    files = [(checkpoint.path / WEIGHTS, {"weight": lambda full: full})]
    if moments:
        if not checkpoint.has_optimizer:
            raise CheckpointError(f"{checkpoint.path} holds no optimizer state ({OPTIMIZER} is missing).")
        files.append((checkpoint.path / OPTIMIZER, {m: (lambda full, m=m: moment_key(full, m)) for m in MOMENTS}))
    with safe_open(checkpoint.path / WEIGHTS, "pt") as weights:
        stored = set(weights.keys())
    skipped = {local for local, full in names.items() if full not in stored and allowed and full.startswith(allowed)}
    report.missing = sorted(names[local] for local in skipped)
    wanted = {local: full for local, full in names.items() if local not in skipped}
    slices: dict[str, dict[str, torch.Tensor]] = {local: {} for local in wanted}
    for path, keys in files:
        with safe_open(path, "pt") as tensors:
            present = set(tensors.keys())
            absent = sorted(key(full) for full in wanted.values() for key in keys.values() if key(full) not in present)
            if absent:
                raise CheckpointError(f"{path} lacks {len(absent)} tensor(s) this model needs: {', '.join(absent[:5])}.")
            for local, full in wanted.items():
                param, dim = params[local], partition_dim(params[local])
                for kind, key_of in keys.items():
                    value = _model_sized(tensors.get_tensor(key_of(full)), full, param, dim, tp_size, path, report)
                    if dim is not None and tp_size > 1:
                        value = value.chunk(tp_size, dim=dim)[tp_rank]
                    if value.shape != full_shape(param):
                        raise CheckpointError(
                            f"{path}: {key_of(full)} has shape {tuple(value.shape)} for this rank, "
                            f"the model {tuple(full_shape(param))}."
                        )
                    slices[local][kind] = value.float()
    report.loaded = sorted(wanted.values())
    return slices, report


@torch.no_grad()
def load_portable_weights(
    model: torch.nn.Module,
    checkpoint: PortableCheckpoint,
    tp_rank: int,
    tp_size: int,
    full_names: Optional[Mapping[str, str]] = None,
    allow_missing: Iterable[str] = (),
) -> LoadReport:
    """Copy this rank's slices of the checkpoint's weights into `model`'s parameters."""
    slices, report = read_model_slices(model, checkpoint, tp_rank, tp_size, full_names, allow_missing)
    params = dict(model.named_parameters())
    for local, kinds in slices.items():
        with writable(params[local]):
            params[local].copy_(kinds["weight"].to(params[local].dtype))
    return report


def _model_sized(value: torch.Tensor, full: str, param, dim, tp_size: int, path, report: LoadReport) -> torch.Tensor:
    """The full tensor, its vocabulary rows zero-padded up to the model's."""
    if full not in VOCAB_ROWS:
        return value
    rows = full_shape(param)[0] * (tp_size if dim == 0 else 1)
    if value.shape[0] > rows:
        raise CheckpointError(f"{path}: {full} has {value.shape[0]} vocabulary rows, the model only {rows}.")
    if value.shape[0] < rows:
        report.padded_vocab = (value.shape[0], rows)
        padding = value.new_zeros((rows - value.shape[0], *value.shape[1:]))
        value = torch.cat([value, padding])
    return value
