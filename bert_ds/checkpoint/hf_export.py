"""Export a portable bert_ds checkpoint as a Hugging Face BERT folder `from_pretrained` loads.

    OUT/  config.json         BertConfig: architectures, true vocab size, pad id, task labels
          model.safetensors   fp32, HF names, tied decoder omitted (as save_pretrained writes it)
          vocab.txt + tokenizer_config.json          a WordPiece tokenizer (BertTokenizer), or
          tokenizer.model + tokenizer.json + ...     a sentencepiece one (the .json loads with
                                                     AutoTokenizer / PreTrainedTokenizerFast)

The class follows the checkpoint: a pre-training run with NSP becomes `BertForPreTraining`, an
MLM-only run `BertForMaskedLM`, and a fine-tuned model whose portable.json holds
`"task": {"kind": ..., "num_labels": N, "problem_type": ..., "id2label": {...}}` becomes
`BertForSequenceClassification`, `BertForMultipleChoice`, `BertForQuestionAnswering` or
`BertForTokenClassification` (with the tag names as id2label).
Only post-LN, bidirectional models have a Hugging Face counterpart.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Optional


from bert_ds.checkpoint.hf_weights import HEADS, TIED, bert_ds_names, bert_ds_to_hf, hf_config
from bert_ds.checkpoint.portable import PortableCheckpoint, is_portable, open_portable
from bert_ds.checkpoint.portable_load import VOCAB_ROWS
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.config import ModelConfig
from bert_ds.data.tokenizer.load import BertTokenizer, WordPieceTokenizer, load_tokenizer

TASKS = {  # manifest task kind -> (HF class, heads, rows of the head's weight or None = num_labels)
    "sequence_classification": ("BertForSequenceClassification", ("pooler", "classifier"), None),
    "multiple_choice": ("BertForMultipleChoice", ("pooler", "classifier"), 1),
    "question_answering": ("BertForQuestionAnswering", ("qa_outputs",), 2),  # start and end logits
    "token_classification": ("BertForTokenClassification", ("classifier",), None),  # no pooler, as HF's
}
PROBLEM_TYPES = ("regression", "single_label_classification")


def export_hf(checkpoint: PortableCheckpoint, out: str | os.PathLike, notes: Optional[list[str]] = None) -> Path:
    """Write `checkpoint` as a HF BERT folder `out` and return it.

    `notes`, if given, receives one line per thing the export left out (vocabulary padding rows,
    a head the HF class has no place for). Raises CheckpointError for a model without a HF
    counterpart (pre-LN, causal, a BiLSTM head), a malformed task entry, or a tensor that fits nowhere.
    """
    notes = notes if notes is not None else []
    config = checkpoint.model_config
    manifest_file = checkpoint.path / "portable.json"
    task = checkpoint.manifest.get("task")
    if isinstance(task, dict) and task.get("bilstm"):
        raise CheckpointError(
            f"{manifest_file}: the model has a BiLSTM between the encoder and its head (fine-tuning's --bilstm, "
            "Table 5's '+ BiLSTM' row); Hugging Face BERT has no such model, so it has no HF counterpart."
        )
    if config.layer_norm_position != "post" or config.causal:
        kind = "pre-LN" if config.layer_norm_position != "post" else "causal (left-to-right)"
        raise CheckpointError(
            f"{manifest_file}: the model is {kind}; Hugging Face BERT is post-LN and bidirectional, "
            "so it has no HF counterpart."
        )
    ours = checkpoint.read_weights()
    architecture, heads, task_fields = _architecture(task, ours, config, manifest_file)
    tokenizer = load_tokenizer(checkpoint.tokenizer_dir) if checkpoint.tokenizer_dir else None
    vocab_size = _strip_vocab_padding(ours, tokenizer, manifest_file, notes)
    config = config.replace(vocab_size=vocab_size)
    _check_contents(ours, config, heads, checkpoint.path / "model.safetensors", notes)
    hf = {name: t for name, t in bert_ds_to_hf(ours, config, heads).items() if name not in TIED}

    from safetensors.torch import save_file

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    pad_id = tokenizer.pad_id if tokenizer is not None else 0
    hf_config(config, architecture, pad_id, **task_fields).save_pretrained(folder)
    contiguous = {name: t.detach().float().contiguous().clone() for name, t in hf.items()}
    save_file(contiguous, folder / "model.safetensors", metadata={"format": "pt"})
    if tokenizer is not None:
        _write_tokenizer(tokenizer, folder, config.max_position_embeddings)
    else:
        notes.append("the checkpoint holds no tokenizer; none was written")
    return folder


def export_hf_path(checkpoint: str | os.PathLike, out: str | os.PathLike, notes: Optional[list[str]] = None) -> Path:
    """`export_hf` for a portable folder or a ZeRO pre-training checkpoint folder (converted first)."""
    if is_portable(checkpoint):
        return export_hf(open_portable(checkpoint), out, notes)
    if not Path(checkpoint).exists():
        raise CheckpointError(f"{checkpoint}: no such checkpoint folder.")
    from bert_ds.checkpoint.convert import zero_to_portable  # lazily: only this path needs DeepSpeed

    with tempfile.TemporaryDirectory(prefix="bert_ds-export-") as scratch:
        portable = zero_to_portable(str(checkpoint), str(Path(scratch) / "portable"), optimizer=False)
        return export_hf(open_portable(portable), out, notes)


def _architecture(task, ours: dict, config: ModelConfig, manifest_file: Path) -> tuple[str, tuple, dict]:
    """(HF class, heads to write, BertConfig task fields) for the manifest's task entry."""
    if task is None:
        if "nsp_head.weight" in ours:
            return "BertForPreTraining", ("pooler", "mlm", "nsp"), {}
        return "BertForMaskedLM", ("mlm",), {}  # an MLM-only run (HF's BertForMaskedLM has no pooler)
    kind = task.get("kind") if isinstance(task, dict) else None
    if kind not in TASKS:
        raise CheckpointError(f"{manifest_file}: task kind {kind!r} is not one of {', '.join(TASKS)}.")
    architecture, heads, rows = TASKS[kind]
    num_labels = task.get("num_labels", 1 if kind == "multiple_choice" else 2)
    if not isinstance(num_labels, int) or num_labels < 1:
        raise CheckpointError(f"{manifest_file}: task num_labels {num_labels!r} is not a positive integer.")
    fields = dict(num_labels=num_labels)
    if kind == "sequence_classification":
        problem_type = task.get("problem_type", "regression" if num_labels == 1 else "single_label_classification")
        if problem_type not in PROBLEM_TYPES:
            raise CheckpointError(f"{manifest_file}: task problem_type {problem_type!r} is not one of {PROBLEM_TYPES}.")
        fields["problem_type"] = problem_type
    id2label = task.get("id2label")
    if id2label and kind in ("sequence_classification", "token_classification"):
        try:
            fields["id2label"] = {int(i): str(label) for i, label in id2label.items()}
        except (AttributeError, ValueError) as error:
            raise CheckpointError(f"{manifest_file}: task id2label is not {{id: label}}: {error}") from None
        if sorted(fields["id2label"]) != list(range(num_labels)):
            raise CheckpointError(f"{manifest_file}: task id2label does not name labels 0..{num_labels - 1}.")
        fields["label2id"] = {label: i for i, label in fields["id2label"].items()}
    weight, bias = HEADS[heads[-1]].values()  # the task head: [rows, hidden] and [rows]
    rows = rows or num_labels
    for name, shape in ((weight, (rows, config.hidden_size)), (bias, (rows,))):
        if name in ours and tuple(ours[name].shape) != shape:
            raise CheckpointError(
                f"{manifest_file}: {name} has shape {tuple(ours[name].shape)}, a {kind} head with these labels {shape}."
            )
    return architecture, heads, fields


def _strip_vocab_padding(ours: dict, tokenizer: Optional[BertTokenizer], manifest_file: Path, notes: list) -> int:
    """Drop the word-embedding rows beyond the tokenizer's vocabulary (our TP padding); the true vocab size."""
    rows = ours["bert.embeddings.word_embeddings.weight"].shape[0]
    if tokenizer is None:
        return rows
    if rows < tokenizer.vocab_size:
        raise CheckpointError(
            f"{manifest_file}: the word embeddings have {rows} rows, "
            f"fewer than the tokenizer's {tokenizer.vocab_size} tokens."
        )
    if rows > tokenizer.vocab_size:
        for name in VOCAB_ROWS:
            if name in ours:
                ours[name] = ours[name][: tokenizer.vocab_size]
        size = tokenizer.vocab_size
        notes.append(f"dropped {rows - size} vocabulary padding rows ({rows} -> {size})")
    return tokenizer.vocab_size


def _check_contents(ours: dict, config: ModelConfig, heads: tuple, path: Path, notes: list) -> None:
    """Every tensor the HF class needs is present; tensors it has no place for are known heads (noted)."""
    needed = {name for head in heads for name in HEADS[head].values()}
    encoder = set(bert_ds_names(config, heads=()))
    missing = sorted((needed | encoder) - set(ours))
    if missing:
        raise CheckpointError(f"{path} lacks {len(missing)} tensor(s) the export needs: {', '.join(missing[:5])}.")
    droppable = {name: head for head, names in HEADS.items() if head not in heads for name in names.values()}
    unknown = sorted(set(ours) - needed - encoder - set(droppable))
    if unknown:
        raise CheckpointError(f"{path} holds tensor(s) no Hugging Face BERT has a place for: {', '.join(unknown[:5])}.")
    dropped = sorted({droppable[name] for name in ours if name in droppable})
    if dropped:
        notes.append(f"left out the {', '.join(dropped)} head(s): the Hugging Face class has no place for them")


def _write_tokenizer(tokenizer: BertTokenizer, folder: Path, max_length: int) -> None:
    tokenizer.save(folder)  # vocab.txt + tokenizer_config.json, or tokenizer.model
    if isinstance(tokenizer, WordPieceTokenizer):
        config_file = folder / "tokenizer_config.json"
        settings = json.loads(config_file.read_text(encoding="utf-8"))
        settings["model_max_length"] = max_length
        config_file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    else:
        _write_fast_sentencepiece(tokenizer, folder, max_length)


def _write_fast_sentencepiece(tokenizer: BertTokenizer, folder: Path, max_length: int) -> None:
    """tokenizer.json (+ tokenizer_config.json) converted from tokenizer.model by transformers'
    SpmConverter, with BERT's [CLS] A [SEP] B [SEP] template. Unlike bert_ds's own tokenizer, HF's
    treats a literal "[MASK]" (etc.) in text as the special token."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import SpmConverter

    fast = SpmConverter(SimpleNamespace(vocab_file=str(folder / "tokenizer.model"))).converted()
    fast.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tokenizer.cls_id), ("[SEP]", tokenizer.sep_id)],
    )
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=fast,
        unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        model_max_length=max_length,
    )
    wrapped.save_pretrained(folder)
