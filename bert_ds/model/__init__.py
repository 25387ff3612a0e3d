"""The BERT encoder and heads on megatron-core blocks; `build_pretraining_model` wires them to a layout."""

from __future__ import annotations

from bert_ds.config import ModelConfig, transformer_config
from bert_ds.model.attention import sdpa_core_attention
from bert_ds.model.init import initialize_weights
from bert_ds.model.bert import BertForPretraining, BertModel, PretrainingOutput
from bert_ds.model.layers import layer_spec


def build_pretraining_model(config: ModelConfig, layout, with_nsp: bool = True) -> BertForPretraining:
    """BertForPretraining for this process's place in `layout` (a distributed.ParallelLayout).

    The layout supplies the TP size and the model-parallel RNG stream for attention dropout;
    weights are drawn per parameter name from the layout's seed (model/init.py), so equal seeds
    give equal full weights at any TP/PP size.
    """
    core_attention = sdpa_core_attention(rng_fork=layout.rng_tracker.fork)
    spec = layer_spec(
        config.layer_norm_position,
        core_attention,
        activation_checkpointing=config.activation_checkpointing,
        rng_tracker=layout.rng_tracker,  # replayed when checkpointed layers recompute attention dropout
    )
    model = BertForPretraining(
        config,
        transformer_config(config, layout.tensor_parallel, layout.pipeline_parallel),
        spec,
        with_nsp=with_nsp,
        pg_collection=layout.pg_collection,
    )
    initialize_weights(model, config, layout.seed, layout.tp_rank, layout.tensor_parallel)
    return model.to(layout.device)


__all__ = ["BertForPretraining", "BertModel", "PretrainingOutput", "build_pretraining_model"]
