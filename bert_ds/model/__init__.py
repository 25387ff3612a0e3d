"""The BERT encoder and heads on megatron-core blocks; `build_model` is the one place a model is
made for a layout: pre-training (plain or cut into pipeline stages) and the fine-tuning heads."""

from __future__ import annotations

from bert_ds.runtime.compile_free_imports import import_without_compile

import_without_compile()  # before any model module imports megatron (bert_ds/runtime/compile_free_imports.py says why)

from bert_ds.config import ModelConfig  # noqa: E402
from bert_ds.model.megatron_config import transformer_config  # noqa: E402
from bert_ds.model.attention import sdpa_core_attention  # noqa: E402
from bert_ds.model.bert import BertForPretraining, BertModel, PretrainingOutput  # noqa: E402
from bert_ds.model.init import initialize_weights  # noqa: E402
from bert_ds.model.layers import layer_spec  # noqa: E402
from bert_ds.model.construction import PLAIN, Construction  # noqa: E402

PRETRAINING = "pretraining"


def build_model(config: ModelConfig, layout, head: str = PRETRAINING, *, with_nsp: bool = True,
                num_labels: int = 2, seed: int | None = None, pipeline_loss=None, bilstm: bool = False,
                unpad: bool = False, construction: Construction = PLAIN):
    """The model for this process's place in `layout` (a distributed.ParallelLayout).

    head: "pretraining" (BertForPretraining, with the NSP head when `with_nsp`) or a fine-tuning
    TaskKind of model/heads.py ("classification" with `num_labels`, "span", "multiple_choice"),
    with a BiLSTM between encoder and head when `bilstm` (Table 5's "+ BiLSTM"), and with `unpad`
    an encoder that runs padded batches on their real tokens only (model/unpadding.py).
    With `pipeline_loss` a pre-training model is this rank's DeepSpeed pipeline stage
    (model/pipeline.py; needed with layout.pipeline_parallel > 1, possible with one stage), whose
    last stage scores with `pipeline_loss(outputs, labels)` (training/engine/pipeline_loss.py).

    The layout supplies the TP size and group and the model-parallel RNG stream of attention
    dropout; weights are drawn per parameter name from `seed` (default: the layout's) by
    model/init.py, so equal seeds give equal full weights at any TP/PP size.

    `construction` says how parameters are created (model/construction.py): plainly, then moved to
    the layout's device, or partitioned as they are built (ZeRO-3, runtime/partitioned.py) and
    left where that put them.
    """
    spec = layer_spec(
        config.layer_norm_position,
        sdpa_core_attention(rng_fork=layout.rng_tracker.fork),
        activation_checkpointing=config.activation_checkpointing,
        rng_tracker=layout.rng_tracker,  # replayed when checkpointed layers recompute attention dropout
    )
    seed = layout.seed if seed is None else seed
    if layout.pipeline_parallel > 1 and pipeline_loss is None:
        raise ValueError("pipeline parallelism needs the last stage's pipeline_loss")
    if head == PRETRAINING and (bilstm or unpad):
        raise ValueError("the BiLSTM and unpadding are fine-tuning options")
    if pipeline_loss is not None:
        if head != PRETRAINING:
            raise ValueError("pipeline stages are built for pre-training only")
        from bert_ds.model.pipeline import build_pipeline_model

        return build_pipeline_model(config, layout, spec, pipeline_loss, with_nsp=with_nsp, seed=seed)
    # Pipeline size 1 for megatron in every case: DeepSpeed, not megatron, cuts the stages.
    tconfig = transformer_config(config, layout.tensor_parallel, 1)
    with construction.context():
        if head == PRETRAINING:
            model = BertForPretraining(config, tconfig, spec, with_nsp=with_nsp, pg_collection=layout.pg_collection)
        else:
            from bert_ds.model.heads import BertForFinetuning

            model = BertForFinetuning(config, tconfig, spec, head, num_labels, pg_collection=layout.pg_collection,
                                      bilstm=bilstm, unpad=unpad)
    initialize_weights(model, config, seed, layout.tp_rank, layout.tensor_parallel, construction=construction)
    return model if construction.partitioned else model.to(layout.device)


__all__ = ["BertForPretraining", "BertModel", "PretrainingOutput", "build_model"]
