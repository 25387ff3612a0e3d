"""The Hugging Face side of the throughput benchmarks: a BertConfig of the same size as a bert_ds
ModelConfig, and torch AdamW set up as a Hugging Face user would (BERT's weight-decay groups,
foreach on CPUs, fused on GPUs: torch's fastest setting for the device, not its slow default loop)."""

from __future__ import annotations

import torch


def hf_bert_config(model_config, **extra):
    """transformers.BertConfig with `model_config`'s sizes and SDPA attention; `extra` adds fields."""
    import transformers

    return transformers.BertConfig(
        vocab_size=model_config.vocab_size, hidden_size=model_config.hidden_size,
        num_hidden_layers=model_config.num_layers, num_attention_heads=model_config.num_attention_heads,
        intermediate_size=model_config.ffn_hidden_size, attn_implementation="sdpa", **extra,
    )


def hf_adamw(model: torch.nn.Module, lr: float, weight_decay: float = 0.01, eps: float = 1e-8) -> torch.optim.AdamW:
    """AdamW over `model` with biases and LayerNorm exempt from weight decay."""
    from bert_ds.runtime.device import device, is_gpu

    exempt = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    fused = is_gpu(device().type)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": exempt, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, eps=eps, foreach=not fused, fused=fused)
