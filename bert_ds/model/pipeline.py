"""BertForPretraining cut into DeepSpeed PipelineModule stages, built from the modules of bert.py.

Layer list (DeepSpeed runs it like nn.Sequential, one tuple from layer to layer):

    TiedLayerSpec("word_embeddings", BertEmbeddings)        ids -> hidden            (stage 0)
    BertEncoderLayerPipe x num_layers                       post-LN or pre-LN layer  (split evenly)
    BertFinalLayerNormPipe                                  pre-LN only              (last stage)
    TiedLayerSpec("word_embeddings", TiedWordEmbedding)     appends the tied weight  (last stage)
    BertPretrainingHeadsPipe                                BertPooler, NSP Linear; the MLM decoder for
                                                            the loss function (its rows come with the labels)

Every parameter lives in a module class of bert.py (or megatron's layer spec), so weights move between
BertForPretraining and the stages by name: `full_to_pipeline_state_dict` / `pipeline_to_full_names`.
The word embedding exists on the first and on the last stage; DeepSpeed broadcasts it from stage 0 at
build time and all-reduces its gradient over the two stages after every backward (ReduceTiedGrads).

Megatron's TransformerBlock is not used here: it sizes itself from parallel_state's pipeline rank and
would cut the model a second time. DeepSpeed does the cut; megatron builds one layer at a time.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
from megatron.core.tensor_parallel import VocabParallelEmbedding
from megatron.core.transformer.spec_utils import build_module

from bert_ds.config import ConfigError, ModelConfig
from bert_ds.model.megatron_config import transformer_config
from bert_ds.model.init import initialize_weights
from bert_ds.model.bert import (
    BertEmbeddings,
    BertLMHead,
    BertPooler,
    _normal_linear,
    attention_mask_to_masked_out,
    pooled_positions,
)
from bert_ds.model.layers import layer_norm_impl
from bert_ds.model.sharding import shard_full_state_dict

TIED_KEY = "word_embeddings"
_TIED_ATTR = "word_embeddings.weight"  # the same attribute path in BertEmbeddings and TiedWordEmbedding

# Activations between stages: (hidden [s, b, h] float, attention_mask [b, s] int64).
# Why: DeepSpeed's pipe engine sends every tensor of the tuple (shape and dtype go first in a metadata
# message, once: later micro-batches must keep the shapes), marks each received *floating* tensor
# requires_grad and sends back a gradient for every floating input (asserting it has one);
# non-floating tensors cross without one. So the mask must be an integer: a float mask has no
# gradient and trips that assert. Bool passes gloo, but the engine's
# bool workaround (`has_bool_tensors`, cast to half) covers only the last tuple entry and is not
# reachable through deepspeed.initialize; int64 crosses gloo and nccl alike. The [b, s] padding mask
# is sent rather than the [b, 1, s, s] masked-out matrix (s times smaller); each layer rebuilds the
# matrix, O(b s^2) boolean work next to attention's O(b s^2 h).
# The predicted positions do not cross at all: their number changes with every batch. They reach the
# last stage with its labels (training/engine/pipeline_loss.py), read on the host like a plain step's.


class BertEmbeddingsPipe(BertEmbeddings):
    """Stage 0 entry: (input_ids, token_type_ids, attention_mask) -> activation tuple.

    The tied modules run as layers themselves (no TiedLayerSpec forward_fn): DeepSpeed saves and
    loads only layers that are modules, so a forward_fn would leave the tied weights out of every
    checkpoint.
    """

    def forward(self, inputs: tuple) -> tuple:
        if len(inputs) == 2:
            # A one-stage pipeline reuses this module at the tied head position: act as TiedWordEmbedding.
            return (*inputs, self.word_embeddings.weight)
        input_ids, token_type_ids, attention_mask = inputs
        return super().forward(input_ids, token_type_ids), attention_mask  # hidden: [s, b, h]


class TiedWordEmbedding(torch.nn.Module):
    """The last stage's copy of the word embedding (stage 0 holds the whole BertEmbeddings).

    Only the tied matrix is replicated: positions, token types and the LayerNorm stay on stage 0, so
    the last stage holds no parameter without a gradient. Same attribute name as BertEmbeddings.
    """

    def __init__(self, config: ModelConfig, tconfig, tp_group):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(
            config.vocab_size, config.hidden_size, init_method=tconfig.init_method, config=tconfig, tp_group=tp_group
        )

    def forward(self, inputs: tuple) -> tuple:
        """Hand the tied [vocab / tp, h] weight itself (not a copy) on to the MLM decoder."""
        return (*inputs, self.word_embeddings.weight)


class BertEncoderLayerPipe(torch.nn.Module):
    """One layer from the layer spec (post-LN or pre-LN), adapted to the activation tuple."""

    def __init__(self, config: ModelConfig, tconfig, spec, index: int, pg_collection):
        super().__init__()
        self.causal = config.causal
        self.layer = build_module(spec, config=tconfig, layer_number=index + 1, pg_collection=pg_collection)
        self.full_prefix = {"layer": f"bert.encoder.layers.{index}"}

    def forward(self, inputs: tuple) -> tuple:
        hidden, attention_mask = inputs  # [s, b, h], [b, s]
        masked_out = attention_mask_to_masked_out(attention_mask, self.causal)  # [b, 1, s, s], True = hidden
        hidden, _ = self.layer(hidden, attention_mask=masked_out)
        return hidden.contiguous(), attention_mask  # p2p send needs contiguous memory


class BertFinalLayerNormPipe(torch.nn.Module):
    """The pre-LN encoder's closing LayerNorm (TransformerBlock's `final_layernorm`)."""

    full_prefix = {"final_layernorm": "bert.encoder.final_layernorm"}

    def __init__(self, tconfig):
        super().__init__()
        self.final_layernorm = build_module(
            layer_norm_impl(), config=tconfig, hidden_size=tconfig.hidden_size, eps=tconfig.layernorm_epsilon
        )

    def forward(self, inputs: tuple) -> tuple:
        hidden, attention_mask = inputs
        return self.final_layernorm(hidden), attention_mask


class BertPretrainingHeadsPipe(torch.nn.Module):
    """BertLMHead (+ BertPooler and the NSP Linear), as BertForPretraining.

    Returns (hidden [s, b, h], nsp_logits [b, 2] or None, decode): `decode(rows [n, h])` is the
    MLM head on the tied weight -> [n, vocab / tp]. The loss function applies it to the predicted
    positions, which arrive with the labels (read on the host: no device read, and a row count
    padded to a repeating size as in a plain step, model/selection.py). This tuple only reaches
    loss_fn on the same rank, so None and Python values are fine here.
    """

    full_prefix = {"lm_head": "lm_head", "pooler": "bert.pooler", "nsp_head": "nsp_head"}

    def __init__(self, config: ModelConfig, tconfig, with_nsp: bool, tp_group):
        super().__init__()
        self.lm_head = BertLMHead(config, tconfig, tp_group)
        self.causal = config.causal  # pooled from the last real token, as BertModel (bert.pooled_positions)
        self.pooler = BertPooler(config) if with_nsp else None
        self.nsp_head = _normal_linear(config.hidden_size, 2, config.init_method_std) if with_nsp else None

    def forward(self, inputs: tuple) -> tuple:
        hidden, attention_mask, word_embeddings = inputs  # [s, b, h], [b, s], [vocab / tp, h]
        nsp_logits = None
        if self.nsp_head is not None:
            nsp_logits = self.nsp_head(self.pooler(hidden, pooled_positions(attention_mask, self.causal)))
        return hidden, nsp_logits, functools.partial(self.lm_head, word_embeddings=word_embeddings)


class BertPipelineModule(PipelineModule):
    """PipelineModule that tells its loss function when it switches mode: PipelineEngine.train_batch
    starts with module.train() and eval_batch with module.eval(), so a loss function with a
    `mode_changed(training)` method (training/engine/pipeline_loss.py) knows which kind of batch it scores."""

    def __init__(self, *args, layout, **kwargs):
        super().__init__(*args, **kwargs)
        self.layout = layout
        self.last_stage = self.stage_id == self.num_stages - 1

    def train(self, mode: bool = True) -> "BertPipelineModule":
        mode_changed = getattr(getattr(self, "loss_fn", None), "mode_changed", None)  # unset during __init__
        if mode_changed is not None:
            mode_changed(mode)
        return super().train(mode)


def build_pipeline_model(
    config: ModelConfig, layout, spec, loss_fn, with_nsp: bool = True, partition_method: str = "uniform",
    seed: Optional[int] = None,
) -> PipelineModule:
    """This rank's stage of BertForPretraining for `layout` (a distributed.ParallelLayout); called
    by bert_ds.model.build_model, which makes the layer `spec`.

    partition_method "uniform": num_layers / PP transformer layers per stage, embeddings on stage 0,
    heads on the last stage (checked after DeepSpeed partitions). Any other value is handed to
    DeepSpeed unchanged ("parameters", "type:regex"). `loss_fn(outputs, labels)` runs on the last
    stage (training/engine/pipeline_loss.py); `with_nsp` must match the labels it is given.
    """
    # pipeline size 1 for megatron: each stage's layers are standalone modules, and a config with
    # PP > 1 would make TransformerLayer add the stage's offset to layer numbers a second time.
    tconfig = transformer_config(config, layout.tensor_parallel, 1)
    pg, tp_group = layout.pg_collection, layout.pg_collection.tp
    layers: list = [TiedLayerSpec(TIED_KEY, BertEmbeddingsPipe, config, tconfig, tp_group, tied_weight_attr=[_TIED_ATTR])]
    layers += [LayerSpec(BertEncoderLayerPipe, config, tconfig, spec, i, pg) for i in range(config.num_layers)]
    if config.layer_norm_position == "pre":
        layers.append(LayerSpec(BertFinalLayerNormPipe, tconfig))
    layers.append(TiedLayerSpec(TIED_KEY, TiedWordEmbedding, config, tconfig, tp_group, tied_weight_attr=[_TIED_ATTR]))
    layers.append(LayerSpec(BertPretrainingHeadsPipe, config, tconfig, with_nsp, tp_group))

    uniform = partition_method == "uniform"
    # no_grad: DeepSpeed broadcasts the tied weight in place while building; recorded by autograd, that
    # broadcast makes every later backward warn about c10d::broadcast_ having no autograd kernel.
    with torch.no_grad():
        model = BertPipelineModule(
            layers,
            topology=PipeModelDataParallelTopology(
                num_pp=layout.pipeline_parallel, num_mp=layout.tensor_parallel, num_dp=layout.data_parallel
            ),
            loss_fn=loss_fn,
            # Balance only the encoder layers; the zero-weight embedding/heads join the first/last stage.
            partition_method=f"type:^{BertEncoderLayerPipe.__name__}$" if uniform else partition_method,
            layout=layout,
        )
    if uniform:
        _check_uniform(model, config.num_layers, len(layers))
    # Weights keyed by full parameter name: the same seed gives the plain model's weights.
    initialize_weights(model, config, layout.seed if seed is None else seed, layout.tp_rank, layout.tensor_parallel, pipeline_to_full_names(model))
    return model


def _check_uniform(model: BertPipelineModule, num_layers: int, num_specs: int) -> None:
    """Refuse a partition that is not num_layers / PP encoder layers per stage (one sentence)."""
    parts, stages = [int(p) for p in model.parts], model.num_stages
    per_stage = num_layers // stages
    expected = [0] + [1 + per_stage * s for s in range(1, stages)] + [num_specs]
    if parts != expected:
        raise ConfigError(f"DeepSpeed partitioned the {num_layers} layers as {parts}, not uniformly {expected}.")


def pipeline_to_full_names(pipe_model: BertPipelineModule) -> dict[str, str]:
    """This stage's state-dict names -> BertForPretraining names (TP-independent)."""
    names = {}
    for name in pipe_model.state_dict():
        head, rest = name.split(".", 1)
        if head == "tied_modules":  # tied_modules.word_embeddings.<attr of BertEmbeddings>
            names[name] = "bert.embeddings." + rest.split(".", 1)[1]
            continue
        child, rest = rest.split(".", 1)
        names[name] = f"{getattr(pipe_model, head).full_prefix[child]}.{rest}"
    return names


def full_to_pipeline_state_dict(
    full: dict[str, torch.Tensor], pipe_model: BertPipelineModule
) -> dict[str, torch.Tensor]:
    """This rank's pipeline state dict (its stage, its TP slice) from a full-size (TP=1) one."""
    # Names absent from `full` are left out here and reported by shard_full_state_dict.
    renamed = {pipe: full[name] for pipe, name in pipeline_to_full_names(pipe_model).items() if name in full}
    layout = pipe_model.layout
    return shard_full_state_dict(pipe_model, renamed, layout.tp_rank, layout.tensor_parallel)
