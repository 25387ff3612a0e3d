"""megatron-core's TransformerConfig of a `ModelConfig`: built here and nowhere else."""

from __future__ import annotations

import torch

from bert_ds.config import ModelConfig
from bert_ds.runtime.compile_free_imports import import_without_compile

import_without_compile()  # before megatron is imported (runtime/compile_free_imports.py says why)


def transformer_config(
    model: ModelConfig,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    params_dtype=None,
):
    """megatron-core's TransformerConfig for `model`: built here and nowhere else.

    CPU initialisation is always used: the full master weight is drawn from the default
    generator and then sliced, so the same seed gives the same full weights at any TP size.
    """
    from megatron.core.transformer import TransformerConfig
    from megatron.core.utils import init_method_normal

    init = init_method_normal(model.init_method_std)
    return TransformerConfig(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        ffn_hidden_size=model.ffn_hidden_size,
        hidden_dropout=model.hidden_dropout,
        attention_dropout=model.attention_dropout,
        layernorm_epsilon=model.layernorm_epsilon,
        init_method=init,
        output_layer_init_method=init,  # BERT uses one std everywhere, no depth scaling
        activation_func=torch.nn.functional.gelu,  # exact (erf) GELU, as BERT and HF "gelu"
        add_bias_linear=True,
        gated_linear_unit=False,
        normalization="LayerNorm",
        tensor_model_parallel_size=tensor_parallel,
        pipeline_model_parallel_size=pipeline_parallel,
        sequence_parallel=False,  # megatron's sequence parallelism needs TE or apex LayerNorm, not torch's
        use_cpu_initialization=True,
        perform_initialization=True,
        params_dtype=torch.float32 if params_dtype is None else params_dtype,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        cuda_graph_scope=[],  # the default "full" is deprecated and warns on every build
    )
