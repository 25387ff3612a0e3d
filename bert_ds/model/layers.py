"""Transformer layer specs: post-LN (original BERT, every Google/HF checkpoint) and pre-LN.

Each spec function returns a fresh megatron `ModuleSpec`; tensor parallelism arrives through the
Column/RowParallelLinear submodules and the core-attention builder passed in, so the model code
never looks at ranks. megatron's own TransformerLayer is pre-LN, so post-LN gets a small layer
class of ours built from the same submodules (weights therefore map 1:1 between the two).

Activation checkpointing is ours too, per layer (`run_layer_forward`): megatron's recompute uses
its CUDA-only RNG tracker, while ours also replays the CPU-capable tracker's dropout stream.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Union

import torch
from torch.utils.checkpoint import checkpoint
from megatron.core.models.backends import LocalSpecProvider
from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.mlp import MLP, MLPSubmodules
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.spec_utils import ModuleSpec, build_module
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_layer import (
    BaseTransformerLayer,
    TransformerLayer,
    TransformerLayerSubmodules,
)

from bert_ds.model.attention import sdpa_core_attention
from bert_ds.model.dropout import get_bias_dropout_add
from bert_ds.model.norms import MegatronLayerNorm

_LOCAL = LocalSpecProvider()


# megatron's TransformerLayer builds its MLP without `ffn_hidden_size` and MLP then warns that it
# falls back to config.ffn_hidden_size, which is exactly BERT's 4H: the warning carries no news.
warnings.filterwarnings("ignore", message="MLP requires ffn_hidden_size", category=DeprecationWarning)


@dataclass
class PostLNLayerSubmodules:
    """Submodules of a post-LN layer: x = LN(x + attn(x)); x = LN(x + mlp(x))."""

    self_attention: Union[ModuleSpec, type] = IdentityOp
    self_attn_bda: Union[ModuleSpec, type] = IdentityOp
    post_attention_layernorm: Union[ModuleSpec, type] = IdentityOp
    mlp: Union[ModuleSpec, type] = IdentityOp
    mlp_bda: Union[ModuleSpec, type] = IdentityOp
    post_mlp_layernorm: Union[ModuleSpec, type] = IdentityOp


class _ReplayTrackerStates:
    """Runs a block on saved model-parallel RNG states, then puts the live states back.

    Re-enterable, so a second backward through a retained graph replays the same masks again.
    """

    def __init__(self, rng_tracker) -> None:
        self.rng_tracker = rng_tracker
        self.saved = rng_tracker.state_dict()  # taken before the original forward draws anything
        self.live = None

    def __enter__(self) -> None:
        self.live = self.rng_tracker.state_dict()
        self.rng_tracker.load_state_dict(self.saved)

    def __exit__(self, *exc) -> None:
        # The live streams have moved on since the forward (later layers drew from them); the
        # recomputation must not rewind them, or the next step would repeat this step's masks.
        self.rng_tracker.load_state_dict(self.live)


def tracker_checkpoint_contexts(rng_tracker):
    """checkpoint's `context_fn`: (forward context, recompute context) for the tracker's streams.

    torch's checkpoint replays only the default generators; attention dropout draws from the
    tracker's model-parallel stream, so the recomputation must see that stream's state as it
    was before the original forward, or its dropout masks (and so the gradients) would differ.
    """
    if rng_tracker is None:
        return contextlib.nullcontext(), contextlib.nullcontext()
    return contextlib.nullcontext(), _ReplayTrackerStates(rng_tracker)


def run_layer_forward(layer, forward, *args, **kwargs):
    """`forward(*args, **kwargs)` of `layer`, checkpointed when `layer.activation_checkpointing`
    is set and an autograd graph is being built in training mode.

    Checkpointed, the layer keeps only its inputs and recomputes its activations in backward,
    with the same dropout masks: torch restores the default generator, and `layer.rng_tracker`
    (the RNGStatesTracker whose stream the core attention forks, None if it forks none) is
    replayed by `tracker_checkpoint_contexts`.
    """
    if not (layer.activation_checkpointing and layer.training and torch.is_grad_enabled()):
        return forward(*args, **kwargs)
    return checkpoint(
        forward,
        *args,
        use_reentrant=False,  # the reentrant variant accepts neither kwargs nor a context_fn
        # Looked up at call time, so a test can swap it for a no-op and see the replay matter.
        context_fn=lambda: tracker_checkpoint_contexts(layer.rng_tracker),
        **kwargs,
    )


class PostLNTransformerLayer(MegatronModule, BaseTransformerLayer):
    """The original BERT layer: LayerNorm after each residual add.

    Called by megatron's TransformerBlock with its keyword interface; returns (hidden, context).
    `activation_checkpointing` and `rng_tracker` are as for `run_layer_forward`.
    """

    def __init__(
        self,
        config,
        submodules: PostLNLayerSubmodules,
        layer_number: int = 1,
        pg_collection=None,
        activation_checkpointing: bool = False,
        rng_tracker=None,
        **_,
    ):
        super().__init__(config=config)
        self.activation_checkpointing = activation_checkpointing
        self.rng_tracker = rng_tracker
        self.layer_number = layer_number
        self.hidden_dropout = config.hidden_dropout
        norm_args = dict(config=config, hidden_size=config.hidden_size, eps=config.layernorm_epsilon)
        self.self_attention = build_module(
            submodules.self_attention, config=config, layer_number=layer_number, pg_collection=pg_collection
        )
        self.self_attn_bda = build_module(submodules.self_attn_bda)
        self.post_attention_layernorm = build_module(submodules.post_attention_layernorm, **norm_args)
        self.mlp = build_module(
            submodules.mlp,
            config=config,
            ffn_hidden_size=config.ffn_hidden_size,
            tp_group=pg_collection.tp if pg_collection is not None else None,
        )
        self.mlp_bda = build_module(submodules.mlp_bda)
        self.post_mlp_layernorm = build_module(submodules.post_mlp_layernorm, **norm_args)

    def forward(self, hidden_states: torch.Tensor, attention_mask=None, context=None, **_):
        return run_layer_forward(self, self._forward, hidden_states, attention_mask, context)

    def _forward(self, hidden_states: torch.Tensor, attention_mask, context):
        # hidden_states: [s, b, h]; the attention and MLP return (output, bias) for a fused add.
        bias_dropout_add = self.self_attn_bda(self.training, self.config.bias_dropout_fusion)
        attention_out = self.self_attention(hidden_states, attention_mask=attention_mask)
        hidden_states = bias_dropout_add(attention_out, hidden_states, self.hidden_dropout)
        hidden_states = self.post_attention_layernorm(hidden_states)

        bias_dropout_add = self.mlp_bda(self.training, self.config.bias_dropout_fusion)
        mlp_out = self.mlp(hidden_states)
        hidden_states = bias_dropout_add(mlp_out, hidden_states, self.hidden_dropout)
        return self.post_mlp_layernorm(hidden_states), context


class PreLNTransformerLayer(TransformerLayer):
    """megatron's (pre-LN) TransformerLayer, unchanged but for optional activation checkpointing.

    Only the forward is wrapped, so parameter names (and HF weight mapping) stay megatron's.
    """

    def __init__(self, *args, activation_checkpointing: bool = False, rng_tracker=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.activation_checkpointing = activation_checkpointing
        self.rng_tracker = rng_tracker

    def forward(self, *args, **kwargs):
        return run_layer_forward(self, super().forward, *args, **kwargs)


def _self_attention_spec(core_attention) -> ModuleSpec:
    return ModuleSpec(
        module=SelfAttention,
        # The mask the model builds already holds padding and (optionally) causal structure.
        params={"attn_mask_type": AttnMaskType.padding},
        submodules=SelfAttentionSubmodules(
            linear_qkv=_LOCAL.column_parallel_linear(),
            core_attention=core_attention,
            linear_proj=_LOCAL.row_parallel_linear(),
            q_layernorm=IdentityOp,
            k_layernorm=IdentityOp,
        ),
    )


def _mlp_spec() -> ModuleSpec:
    return ModuleSpec(
        module=MLP,
        submodules=MLPSubmodules(
            linear_fc1=_LOCAL.column_parallel_linear(), linear_fc2=_LOCAL.row_parallel_linear()
        ),
    )


def layer_norm_impl():
    """megatron's LayerNorm choice: apex's fused kernel where installed; otherwise torch's, as
    model/norms.py's MegatronLayerNorm (fp32 sums for a bf16 model on a CPU)."""
    chosen = _LOCAL.layer_norm(rms_norm=False, for_qk=False)
    return MegatronLayerNorm if chosen is WrappedTorchNorm else chosen


def _checkpoint_params(activation_checkpointing: bool, rng_tracker) -> dict:
    return {"activation_checkpointing": activation_checkpointing, "rng_tracker": rng_tracker}


def post_ln_layer_spec(core_attention=None, activation_checkpointing=False, rng_tracker=None) -> ModuleSpec:
    """Original BERT layer; `core_attention` defaults to SDPA without a TP dropout stream.

    With `activation_checkpointing`, pass the RNGStatesTracker whose stream `core_attention`
    forks as `rng_tracker`, so that recomputed attention dropout draws the same masks.
    """
    return ModuleSpec(
        module=PostLNTransformerLayer,
        params=_checkpoint_params(activation_checkpointing, rng_tracker),
        submodules=PostLNLayerSubmodules(
            self_attention=_self_attention_spec(core_attention or sdpa_core_attention()),
            self_attn_bda=get_bias_dropout_add,
            post_attention_layernorm=layer_norm_impl(),
            mlp=_mlp_spec(),
            mlp_bda=get_bias_dropout_add,
            post_mlp_layernorm=layer_norm_impl(),
        ),
    )


def pre_ln_layer_spec(core_attention=None, activation_checkpointing=False, rng_tracker=None) -> ModuleSpec:
    """Pre-LN layer (megatron's TransformerLayer); the encoder then adds a final LayerNorm.

    `activation_checkpointing` and `rng_tracker` as for `post_ln_layer_spec`.
    """
    return ModuleSpec(
        module=PreLNTransformerLayer,
        params=_checkpoint_params(activation_checkpointing, rng_tracker),
        submodules=TransformerLayerSubmodules(
            input_layernorm=layer_norm_impl(),
            self_attention=_self_attention_spec(core_attention or sdpa_core_attention()),
            self_attn_bda=get_bias_dropout_add,
            pre_mlp_layernorm=layer_norm_impl(),
            mlp=_mlp_spec(),
            mlp_bda=get_bias_dropout_add,
        ),
    )


def layer_spec(
    layer_norm_position: str, core_attention=None, activation_checkpointing=False, rng_tracker=None
) -> ModuleSpec:
    """The spec for a ModelConfig.layer_norm_position ("post" or "pre"); other arguments as for
    `post_ln_layer_spec`."""
    spec_fn = post_ln_layer_spec if layer_norm_position == "post" else pre_ln_layer_spec
    return spec_fn(core_attention, activation_checkpointing, rng_tracker)
