"""Import a Hugging Face BERT folder as a portable bert_ds checkpoint (then it loads at any TP/PP).

    SRC/  config.json, model.safetensors | pytorch_model.bin (or their sharded *.index.json),
          vocab.txt, optional tokenizer_config.json (do_lower_case)

Accepted: `BertForPreTraining`, `BertForMaskedLM` and a bare `BertModel` (names with or without
the "bert." prefix), in fp32/fp16/bf16 (stored as fp32). A head the source lacks (the pooler and NSP
head of a BertForMaskedLM, every head of a BertModel) gets BERT's initialisation, seeded per name as
in model/init.py, and is reported by name. Everything else that does not fit is a CheckpointError
naming the file and the tensor or field: nothing is silently dropped or guessed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bert_ds.checkpoint.hf_weights import (
    HEADS, PRETRAINING_HEADS, TIED, hf_names, hf_shapes, hf_to_bert_ds, model_config_from_hf,
)
from bert_ds.checkpoint.portable import write_portable
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.config import ModelConfig
from bert_ds.data.tokenizer.load import WordPieceTokenizer
from bert_ds.model.init import initial_full_tensor

ARCHITECTURES = {  # HF class -> the heads its checkpoints always carry
    "BertForPreTraining": PRETRAINING_HEADS,
    "BertForMaskedLM": ("mlm",),
    "BertModel": (),
}
# Non-parameter buffers some HF versions save; they are recomputed, never weights.
BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# In load order: the first one present is read.
WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
)


@dataclass
class ImportReport:
    """What `import_hf` wrote and where each tensor came from."""

    path: Path
    """The portable folder written."""
    architecture: str
    """The HF class named by config.json (or inferred from the heads present)."""
    model_config: ModelConfig
    weights_file: Path
    """The weight file (or shard index) read."""
    source_dtypes: list[str] = field(default_factory=list)
    """Dtypes found in the source (everything is stored as fp32)."""
    loaded: list[str] = field(default_factory=list)
    """bert_ds names taken from the source."""
    initialised: list[str] = field(default_factory=list)
    """bert_ds names of heads the source lacks, BERT-initialised from the seed."""
    ignored_buffers: list[str] = field(default_factory=list)
    """Source names of non-parameter buffers (e.g. bert.embeddings.position_ids)."""


def import_hf(src: str | os.PathLike, out: str | os.PathLike, seed: int = 1234) -> ImportReport:
    """Write the HF BERT folder `src` as a portable checkpoint `out` (weights, config, WordPiece tokenizer).

    Raises CheckpointError (or TokenizerError for a bad vocab.txt) naming the file and field or
    tensor that does not fit; `out` is then not a valid portable folder.
    """
    folder = Path(src)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder; expected a Hugging Face BERT model folder.")
    raw, hf_config = read_hf_config(folder / "config.json")
    config = model_config_from_hf(hf_config)
    tokenizer = _read_vocab(folder, config.vocab_size)
    weights_file = _weights_file(folder)
    tensors = _read_tensors(weights_file)
    report = ImportReport(Path(out), "", config, weights_file)
    report.source_dtypes = sorted({str(t.dtype).replace("torch.", "") for t in tensors.values()})
    hf = _canonical_names(tensors, weights_file, report)
    _check_tied(hf, weights_file)
    _check_names_and_shapes(hf, config, weights_file)
    present = _present_heads(hf, weights_file)
    report.architecture = (raw.get("architectures") or [_inferred_architecture(present)])[0]
    lacking = [h for h in ARCHITECTURES[report.architecture] if h not in present]
    if lacking:
        names = [n for h in lacking for n in HEADS[h]]
        raise CheckpointError(
            f"{weights_file} lacks the {', '.join(lacking)} head(s) a {report.architecture} has: {_listed(names)}."
        )
    ours = hf_to_bert_ds(hf, config, heads=present)
    report.loaded = sorted(ours)
    shapes = hf_shapes(config)
    for head in PRETRAINING_HEADS:
        if head not in present:
            for hf_name, name in HEADS[head].items():
                ours[name] = initial_full_tensor(name, shapes[hf_name], config.init_method_std, seed)
                report.initialised.append(name)
    write_portable(out, config, ours, tokenizer=tokenizer, source=f"hf:{folder.resolve()}")
    return report


def read_hf_config(path: Path):
    """(raw dict, transformers BertConfig) of a config.json that describes a BERT bert_ds can run."""
    from transformers import BertConfig

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing; a Hugging Face model folder has a config.json.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is unreadable: {error}") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} is not a JSON object.")
    problems = []
    if raw.get("model_type") != "bert":
        problems.append(f"model_type is {raw.get('model_type')!r}, not 'bert'")
    unknown = [a for a in raw.get("architectures") or [] if a not in ARCHITECTURES]
    if unknown:
        problems.append(f"architectures {unknown} are not supported (import one of {', '.join(ARCHITECTURES)})")
    if raw.get("hidden_act", "gelu") != "gelu":
        problems.append(f"hidden_act is {raw['hidden_act']!r}; bert_ds uses exact (erf) GELU, HF's 'gelu'")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        kind = raw["position_embedding_type"]
        problems.append(f"position_embedding_type is {kind!r}; bert_ds has absolute positions")
    if raw.get("is_decoder") or raw.get("add_cross_attention"):
        problems.append("it is a decoder (is_decoder/add_cross_attention); bert_ds is an encoder")
    try:
        hf_config = BertConfig.from_dict(raw)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: not a valid BertConfig: {error}") from None
    hidden, heads = hf_config.hidden_size, hf_config.num_attention_heads
    if hf_config.intermediate_size != 4 * hidden:
        ffn = hf_config.intermediate_size
        problems.append(f"intermediate_size {ffn} is not 4 x hidden_size {hidden} as bert_ds builds")
    if heads < 1 or hidden % heads:
        problems.append(f"hidden_size {hidden} is not divisible by num_attention_heads {heads}")
    if problems:
        raise CheckpointError(f"{path}: cannot import: " + "; ".join(problems) + ".")
    return raw, hf_config


def _read_vocab(folder: Path, vocab_size: int) -> WordPieceTokenizer:
    vocab = folder / "vocab.txt"
    if not vocab.is_file():
        raise CheckpointError(f"{folder} has no vocab.txt; bert_ds imports BERT's WordPiece vocabulary too.")
    tokenizer = WordPieceTokenizer(vocab)  # reads do_lower_case from tokenizer_config.json beside it
    if tokenizer.vocab_size != vocab_size:
        raise CheckpointError(
            f"{folder / 'config.json'}: vocab_size is {vocab_size} but {vocab} has {tokenizer.vocab_size} tokens."
        )
    return tokenizer


def _weights_file(folder: Path) -> Path:
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"{folder} has no weights: expected one of {', '.join(WEIGHT_FILES)}.")


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a weight file or of the shards an index names."""
    if path.name.endswith(".index.json"):
        try:
            shards = sorted(set(json.loads(path.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, AttributeError) as error:
            raise CheckpointError(f"{path} is not a shard index: {error!r}") from None
        tensors = {}
        for shard in shards:
            tensors.update(_read_tensors(path.parent / shard))
        return tensors
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(path)
        # weights_only: a pickle that would run code is refused, not executed.
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # safetensors, pickle and zip errors share no base class
        raise CheckpointError(f"{path} cannot be read: {error}") from None


def _canonical_names(tensors: dict[str, torch.Tensor], path: Path, report: ImportReport) -> dict[str, torch.Tensor]:
    """BertForPreTraining names ("bert." prefix, LayerNorm weight/bias) in fp32, buffers set aside."""
    hf = {}
    for name, tensor in tensors.items():
        if name.endswith(BUFFERS):
            report.ignored_buffers.append(name)
            continue
        canonical = f"bert.{name}" if name.split(".")[0] in ("embeddings", "encoder", "pooler") else name
        # TF-converted checkpoints name LayerNorm parameters gamma/beta.
        canonical = canonical.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if canonical in hf:
            raise CheckpointError(f"{path} holds {canonical} twice (with and without the 'bert.' prefix).")
        hf[canonical] = tensor.float()
    return hf


def _check_tied(hf: dict[str, torch.Tensor], path: Path) -> None:
    """Tied copies (older HF versions save them) must equal what they are tied to; then drop them."""
    decoder_bias = "cls.predictions.decoder.bias"
    if decoder_bias in hf and TIED[decoder_bias] not in hf:
        hf[TIED[decoder_bias]] = hf.pop(decoder_bias)
    for tied, source in TIED.items():
        if tied in hf:
            if source in hf and not torch.equal(hf[tied], hf[source]):
                raise CheckpointError(
                    f"{path}: {tied} differs from {source}; bert_ds ties the MLM decoder, so it cannot hold both."
                )
            del hf[tied]


def _check_names_and_shapes(hf: dict[str, torch.Tensor], config: ModelConfig, path: Path) -> None:
    shapes = hf_shapes(config)
    unexpected = sorted(set(hf) - set(shapes))
    if unexpected:
        raise CheckpointError(f"{path} holds tensor(s) a BERT of this config.json lacks: {_listed(unexpected)}.")
    missing = [name for name in hf_names(config, heads=()) if name not in hf]
    if missing:
        raise CheckpointError(f"{path} lacks encoder tensor(s): {_listed(missing)}.")
    for name, tensor in hf.items():
        if tuple(tensor.shape) != shapes[name]:
            shape = tuple(tensor.shape)
            raise CheckpointError(f"{path}: {name} has shape {shape}, config.json implies {shapes[name]}.")


def _present_heads(hf: dict[str, torch.Tensor], path: Path) -> tuple[str, ...]:
    """The pre-training heads the source holds whole; a partial head is an error naming what it lacks."""
    present = []
    for head in PRETRAINING_HEADS:
        found = [name in hf for name in HEADS[head]]
        if all(found):
            present.append(head)
        elif any(found):
            lacking = [name for name in HEADS[head] if name not in hf]
            raise CheckpointError(f"{path} has part of the {head} head but lacks {', '.join(lacking)}.")
    return tuple(present)


def _inferred_architecture(present: tuple[str, ...]) -> str:
    """For a config.json without `architectures`: the HF class whose heads are present."""
    if "mlm" in present:
        return "BertForPreTraining" if "nsp" in present else "BertForMaskedLM"
    return "BertModel"


def _listed(names: list[str], most: int = 5) -> str:
    """The first `most` names and how many more there are."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more
