"""Hugging Face BERT <-> bert_ds weight names and layouts (full, TP=1 tensors), encoder and heads.

Only post-LN (original BERT) models have a Hugging Face counterpart. The one layout change is the
attention input projection: HF keeps separate query/key/value matrices, megatron one fused
`linear_qkv` whose rows are grouped per head as [q_h; k_h; v_h] (so a row-wise TP split hands
whole heads to each rank).
"""

from __future__ import annotations

import torch

from bert_ds.config import ModelConfig

_EMBEDDINGS = {
    "bert.embeddings.word_embeddings.weight": "bert.embeddings.word_embeddings.weight",
    "bert.embeddings.position_embeddings.weight": "bert.embeddings.position_embeddings.weight",
    "bert.embeddings.token_type_embeddings.weight": "bert.embeddings.token_type_embeddings.weight",
    "bert.embeddings.LayerNorm.weight": "bert.embeddings.layernorm.weight",
    "bert.embeddings.LayerNorm.bias": "bert.embeddings.layernorm.bias",
}
_LAYER = {  # HF suffix under bert.encoder.layer.{i}. -> ours under bert.encoder.layers.{i}.
    "attention.output.dense": "self_attention.linear_proj",
    "attention.output.LayerNorm": "post_attention_layernorm",
    "intermediate.dense": "mlp.linear_fc1",
    "output.dense": "mlp.linear_fc2",
    "output.LayerNorm": "post_mlp_layernorm",
}
_QKV = ("query", "key", "value")
HEADS: dict[str, dict[str, str]] = {  # head -> {HF name: bert_ds name}, both full names
    "pooler": {
        "bert.pooler.dense.weight": "bert.pooler.dense.weight",
        "bert.pooler.dense.bias": "bert.pooler.dense.bias",
    },
    "mlm": {
        "cls.predictions.transform.dense.weight": "lm_head.dense.weight",
        "cls.predictions.transform.dense.bias": "lm_head.dense.bias",
        "cls.predictions.transform.LayerNorm.weight": "lm_head.layernorm.weight",
        "cls.predictions.transform.LayerNorm.bias": "lm_head.layernorm.bias",
        "cls.predictions.bias": "lm_head.decoder.bias",
    },
    "nsp": {"cls.seq_relationship.weight": "nsp_head.weight", "cls.seq_relationship.bias": "nsp_head.bias"},
    # Fine-tuning heads keep HF's names: BertForSequenceClassification / BertForMultipleChoice ...
    "classifier": {"classifier.weight": "classifier.weight", "classifier.bias": "classifier.bias"},
    # ... and BertForQuestionAnswering (start/end logits).
    "qa_outputs": {"qa_outputs.weight": "qa_outputs.weight", "qa_outputs.bias": "qa_outputs.bias"},
}
PRETRAINING_HEADS = ("pooler", "mlm", "nsp")
TIED = {  # HF names that are another HF tensor (the MLM decoder is tied to the word embeddings)
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}


def _name_pairs(config: ModelConfig, heads) -> list[tuple[str, str]]:
    """(HF name, bert_ds name) for every 1:1 tensor of the encoder and `heads`."""
    pairs = list(_EMBEDDINGS.items())
    for head in heads:
        pairs += list(HEADS[head].items())
    for i in range(config.num_layers):
        for hf, ours in _LAYER.items():
            for kind in ("weight", "bias"):
                pairs.append((f"bert.encoder.layer.{i}.{hf}.{kind}", f"bert.encoder.layers.{i}.{ours}.{kind}"))
    return pairs


def _qkv_names(i: int, kind: str) -> tuple[list[str], str]:
    """HF's [query, key, value] names of layer i and our fused name."""
    hf = [f"bert.encoder.layer.{i}.attention.self.{part}.{kind}" for part in _QKV]
    return hf, f"bert.encoder.layers.{i}.self_attention.linear_qkv.{kind}"


def hf_names(config: ModelConfig, heads=PRETRAINING_HEADS) -> list[str]:
    """Every HF tensor name of the encoder and `heads` (tied duplicates excluded)."""
    names = [hf for hf, _ in _name_pairs(config, heads)]
    for i in range(config.num_layers):
        for kind in ("weight", "bias"):
            names += _qkv_names(i, kind)[0]
    return names


def bert_ds_names(config: ModelConfig, heads=PRETRAINING_HEADS) -> list[str]:
    """Every bert_ds tensor name of the encoder and `heads`."""
    names = [ours for _, ours in _name_pairs(config, heads)]
    for i in range(config.num_layers):
        names += [_qkv_names(i, kind)[1] for kind in ("weight", "bias")]
    return names


def hf_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """{HF name: shape} for the encoder and the pre-training heads of `config`."""
    hidden, ffn = config.hidden_size, config.ffn_hidden_size
    shapes = {
        "bert.embeddings.word_embeddings.weight": (config.vocab_size, hidden),
        "bert.embeddings.position_embeddings.weight": (config.max_position_embeddings, hidden),
        "bert.embeddings.token_type_embeddings.weight": (config.type_vocab_size, hidden),
        "cls.predictions.bias": (config.vocab_size,),
    }
    linears = {"bert.pooler.dense": (hidden, hidden), "cls.predictions.transform.dense": (hidden, hidden)}
    linears["cls.seq_relationship"] = (2, hidden)
    norms = ["bert.embeddings.LayerNorm", "cls.predictions.transform.LayerNorm"]
    for i in range(config.num_layers):
        layer = f"bert.encoder.layer.{i}"
        for part in (*(f"attention.self.{p}" for p in _QKV), "attention.output.dense"):
            linears[f"{layer}.{part}"] = (hidden, hidden)
        linears[f"{layer}.intermediate.dense"] = (ffn, hidden)
        linears[f"{layer}.output.dense"] = (hidden, ffn)
        norms += [f"{layer}.attention.output.LayerNorm", f"{layer}.output.LayerNorm"]
    for name, (rows, columns) in linears.items():
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (rows, columns), (rows,)
    for name in norms:
        shapes[f"{name}.weight"] = shapes[f"{name}.bias"] = (hidden,)
    return shapes


def _fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    # each [H, ...] -> [heads, 3 * head_dim, ...] -> [3H, ...]
    per_head = [t.reshape(heads, t.shape[0] // heads, *t.shape[1:]) for t in (q, k, v)]
    return torch.cat(per_head, dim=1).reshape(-1, *q.shape[1:])


def _split_qkv(qkv: torch.Tensor, heads: int) -> tuple[torch.Tensor, ...]:
    grouped = qkv.reshape(heads, 3, qkv.shape[0] // (3 * heads), *qkv.shape[1:])
    return tuple(grouped[:, j].reshape(-1, *qkv.shape[1:]) for j in range(3))


def hf_to_bert_ds(
    hf: dict[str, torch.Tensor], config: ModelConfig, heads=PRETRAINING_HEADS
) -> dict[str, torch.Tensor]:
    """bert_ds tensors of the encoder and `heads` from a HF state dict (BertForPreTraining names by
    default; tied duplicates are not read)."""
    if config.layer_norm_position != "post":
        raise ValueError("Hugging Face BERT is post-LN; this model config is pre-LN")
    ours = {o: hf[h] for h, o in _name_pairs(config, heads)}
    for i in range(config.num_layers):
        for kind in ("weight", "bias"):
            parts, fused = _qkv_names(i, kind)
            ours[fused] = _fuse_qkv(*(hf[name] for name in parts), config.num_attention_heads)
    return ours


def bert_ds_to_hf(
    ours: dict[str, torch.Tensor], config: ModelConfig, heads=PRETRAINING_HEADS
) -> dict[str, torch.Tensor]:
    """The inverse of `hf_to_bert_ds`; with the MLM head, the tied decoder is written as HF names it."""
    hf = {h: ours[o] for h, o in _name_pairs(config, heads)}
    if "mlm" in heads:
        hf.update({tied: hf[source] for tied, source in TIED.items()})
    for i in range(config.num_layers):
        for kind in ("weight", "bias"):
            parts, fused = _qkv_names(i, kind)
            hf.update(zip(parts, _split_qkv(ours[fused], config.num_attention_heads)))
    return hf


HF_CONFIG_FIELDS = (
    # (ModelConfig field, transformers BertConfig field): the one mapping, read both ways.
    ("num_layers", "num_hidden_layers"),
    ("hidden_size", "hidden_size"),
    ("num_attention_heads", "num_attention_heads"),
    ("vocab_size", "vocab_size"),
    ("max_position_embeddings", "max_position_embeddings"),
    ("type_vocab_size", "type_vocab_size"),
    ("hidden_dropout", "hidden_dropout_prob"),
    ("attention_dropout", "attention_probs_dropout_prob"),
    ("layernorm_epsilon", "layer_norm_eps"),
    ("init_method_std", "initializer_range"),
)
"""What BertConfig adds is fixed by bert_ds's model: intermediate_size = 4 x hidden (ModelConfig's
ffn_hidden_size) and hidden_act "gelu" (exact erf GELU); hf_import.read_hf_config refuses others."""


def model_config_from_hf(hf_config, **overrides) -> ModelConfig:
    """The ModelConfig matching a transformers BertConfig."""
    return ModelConfig(**{ours: getattr(hf_config, theirs) for ours, theirs in HF_CONFIG_FIELDS}).replace(**overrides)


def hf_config(config: ModelConfig, architecture: str, pad_token_id: int, **task_fields):
    """The transformers BertConfig of `config` (the inverse of `model_config_from_hf`)."""
    from transformers import BertConfig

    return BertConfig(
        architectures=[architecture],
        intermediate_size=config.ffn_hidden_size,
        hidden_act="gelu",  # exact (erf) GELU, what bert_ds computes
        pad_token_id=pad_token_id,
        **{theirs: getattr(config, ours) for ours, theirs in HF_CONFIG_FIELDS},
        **task_fields,
    )
