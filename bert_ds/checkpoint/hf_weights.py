"""Hugging Face BERT <-> bert_ds weight names and layouts (full, TP=1 tensors).

Only post-LN (original BERT) models have a Hugging Face counterpart. The one layout change is the
attention input projection: HF keeps separate query/key/value matrices, megatron one fused
`linear_qkv` whose rows are grouped per head as [q_h; k_h; v_h] (so a row-wise TP split hands
whole heads to each rank).
"""

from __future__ import annotations

import torch

from bert_ds.config import ModelConfig

_EMBEDDINGS = {
    "embeddings.word_embeddings.weight": "bert.embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight": "bert.embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight": "bert.embeddings.token_type_embeddings.weight",
    "embeddings.LayerNorm.weight": "bert.embeddings.layernorm.weight",
    "embeddings.LayerNorm.bias": "bert.embeddings.layernorm.bias",
}
_LAYER = {  # HF suffix under encoder.layer.{i}. -> ours under bert.encoder.layers.{i}.
    "attention.output.dense": "self_attention.linear_proj",
    "attention.output.LayerNorm": "post_attention_layernorm",
    "intermediate.dense": "mlp.linear_fc1",
    "output.dense": "mlp.linear_fc2",
    "output.LayerNorm": "post_mlp_layernorm",
}
_HEADS = {  # HF BertForPreTraining name (without "bert.") -> ours
    "pooler.dense.weight": "bert.pooler.dense.weight",
    "pooler.dense.bias": "bert.pooler.dense.bias",
    "cls.predictions.transform.dense.weight": "lm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "lm_head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "lm_head.layernorm.weight",
    "cls.predictions.transform.LayerNorm.bias": "lm_head.layernorm.bias",
    "cls.predictions.bias": "lm_head.decoder.bias",
    "cls.seq_relationship.weight": "nsp_head.weight",
    "cls.seq_relationship.bias": "nsp_head.bias",
}


def _name_pairs(config: ModelConfig) -> list[tuple[str, str]]:
    """(HF name without the "bert." prefix, bert_ds name) for every 1:1 tensor."""
    pairs = list(_EMBEDDINGS.items()) + list(_HEADS.items())
    for i in range(config.num_layers):
        for hf, ours in _LAYER.items():
            for kind in ("weight", "bias"):
                pairs.append((f"encoder.layer.{i}.{hf}.{kind}", f"bert.encoder.layers.{i}.{ours}.{kind}"))
    return pairs


def _hf_key(name: str) -> str:
    """HF BertForPreTraining keeps the encoder under "bert." and the heads under "cls."."""
    return name if name.startswith("cls.") else f"bert.{name}"


def _fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    # each [H, ...] -> [heads, 3 * head_dim, ...] -> [3H, ...]
    per_head = [t.reshape(heads, t.shape[0] // heads, *t.shape[1:]) for t in (q, k, v)]
    return torch.cat(per_head, dim=1).reshape(-1, *q.shape[1:])


def _split_qkv(qkv: torch.Tensor, heads: int) -> tuple[torch.Tensor, ...]:
    grouped = qkv.reshape(heads, 3, qkv.shape[0] // (3 * heads), *qkv.shape[1:])
    return tuple(grouped[:, j].reshape(-1, *qkv.shape[1:]) for j in range(3))


def hf_to_bert_ds(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """A full bert_ds BertForPretraining state dict from a HF BertForPreTraining state dict."""
    if config.layer_norm_position != "post":
        raise ValueError("Hugging Face BERT is post-LN; this model config is pre-LN")
    ours = {o: hf[_hf_key(h)] for h, o in _name_pairs(config)}
    for i in range(config.num_layers):
        base = f"bert.encoder.layer.{i}.attention.self"
        for kind in ("weight", "bias"):
            ours[f"bert.encoder.layers.{i}.self_attention.linear_qkv.{kind}"] = _fuse_qkv(
                hf[f"{base}.query.{kind}"],
                hf[f"{base}.key.{kind}"],
                hf[f"{base}.value.{kind}"],
                config.num_attention_heads,
            )
    return ours


def bert_ds_to_hf(ours: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """The inverse of `hf_to_bert_ds` (the tied decoder weight is written as HF names it)."""
    hf = {_hf_key(h): ours[o] for h, o in _name_pairs(config)}
    hf["cls.predictions.decoder.weight"] = ours["bert.embeddings.word_embeddings.weight"]
    hf["cls.predictions.decoder.bias"] = ours["lm_head.decoder.bias"]
    for i in range(config.num_layers):
        qkv = f"bert.encoder.layers.{i}.self_attention.linear_qkv"
        for kind in ("weight", "bias"):
            q, k, v = _split_qkv(ours[f"{qkv}.{kind}"], config.num_attention_heads)
            base = f"bert.encoder.layer.{i}.attention.self"
            hf[f"{base}.query.{kind}"], hf[f"{base}.key.{kind}"], hf[f"{base}.value.{kind}"] = q, k, v
    return hf


def model_config_from_hf(hf_config, **overrides) -> ModelConfig:
    """The ModelConfig matching a transformers BertConfig."""
    return ModelConfig(
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        num_attention_heads=hf_config.num_attention_heads,
        vocab_size=hf_config.vocab_size,
        max_position_embeddings=hf_config.max_position_embeddings,
        type_vocab_size=hf_config.type_vocab_size,
        hidden_dropout=hf_config.hidden_dropout_prob,
        attention_dropout=hf_config.attention_probs_dropout_prob,
        layernorm_epsilon=hf_config.layer_norm_eps,
        init_method_std=hf_config.initializer_range,
    ).replace(**overrides)
