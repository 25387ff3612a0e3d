"""The one engine factory: how the model is constructed for the engine (ZeRO-3 or not), then
optimizer, LR schedule and deepspeed.initialize, for every entrypoint.

Pre-training (bert_ds/pretrain.py) and fine-tuning (finetune/core.py) both come here with a
model from `bert_ds.model.build_model`, a `DeepSpeedSetup` (training/engine/ds_config.py: the JSON,
the precision and the effective ZeRO stage, decided once) and `OptimizerSettings`. What is
decided here holds for both: BERT's weight-decay groups, the fused or skipping optimizer by ZeRO
stage, the shared clipping norm, the single-replica all-reduce skip and CPU malloc tuning.
"""

from __future__ import annotations

from typing import Optional

from bert_ds.training.engine.ds_config import DeepSpeedSetup
from bert_ds.training.engine.optim import OptimizerSettings


def model_construction(deepspeed_config: Optional[dict], layout):
    """How to build a model for this DeepSpeed config (model/construction.py): partitioned over
    `layout`'s data-parallel group as it is built when the config enables ZeRO-3, else plainly."""
    from bert_ds.model.construction import PLAIN
    from bert_ds.runtime.partitioned import ZeroInitConstruction, builds_partitioned

    return ZeroInitConstruction(deepspeed_config, layout) if builds_partitioned(deepspeed_config) else PLAIN


def build_engine(model, layout, deepspeed_setup: DeepSpeedSetup, settings: OptimizerSettings):
    """The DeepSpeed engine training `model` on this rank of `layout` (a distributed.ParallelLayout)."""
    import deepspeed

    from bert_ds.runtime.distributed import DeepSpeedMPU
    from bert_ds.runtime.host_memory import tune_malloc_for_training
    from bert_ds.model import BertForPretraining
    from bert_ds.training.engine.ds_config import skip_single_replica_allreduce
    from bert_ds.training.engine import master_weights
    from bert_ds.training.engine.optim import build_optimizer, build_scheduler, optimizer_over, parameter_groups, share_clip_norm

    stage = deepspeed_setup.zero_stage
    if stage == 3 and isinstance(model, BertForPretraining):
        # The MLM decoder reads the word-embedding matrix outside the embedding's own forward.
        deepspeed.zero.register_external_parameter(model.lm_head, model.bert.embeddings.word_embeddings.weight)
    masters = None
    if deepspeed_setup.keeps_own_masters:
        masters = master_weights.MasterWeightsOptimizer.over(
            model, parameter_groups(model, settings.weight_decay), deepspeed_setup.config["gradient_clipping"],
            lambda groups: optimizer_over(settings, groups, layout.device.type))
        optimizer = masters.optimizer
    else:
        optimizer = build_optimizer(settings, model, layout.device.type, deepspeed_setup.offloaded, stage)
    # A pipeline engine builds its own grid from the PipelineModule's topology; it takes no mpu.
    mpu = None if layout.pipeline_parallel > 1 else DeepSpeedMPU(layout)
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=build_scheduler(settings), config=deepspeed_setup.config, mpu=mpu
    )
    skip_single_replica_allreduce(engine, layout.data_parallel)
    if masters is not None:
        master_weights.attach(engine, masters)
    share_clip_norm(engine)
    tune_malloc_for_training(layout.device.type, stage, layout.data_parallel)  # CPU steps stop page-faulting big buffers
    return engine
