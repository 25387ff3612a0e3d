"""BERT: embeddings + megatron TransformerBlock encoder + pre-training heads.

This file is about BERT, not ranks: it reads no environment variables and no parallel state.
Tensor parallelism arrives through the layer spec (Column/RowParallelLinear, the core-attention
builder) and through megatron's VocabParallelEmbedding / ColumnParallelLinear used below, which
shard by the TP group they were built under. Shapes: megatron works in [seq, batch, hidden].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from megatron.core.tensor_parallel import ColumnParallelLinear, copy_to_tensor_model_parallel_region
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_block import TransformerBlock, TransformerBlockSubmodules

from bert_ds.config import ModelConfig
from bert_ds.model.dropout import Dropout
from bert_ds.model import norms
from bert_ds.model.layers import layer_norm_impl
from bert_ds.model.selection import selected_rows
from bert_ds.model.unpadding import PackedTokens


def _normal_linear(in_features: int, out_features: int, std: float) -> torch.nn.Linear:
    """A replicated (not tensor-parallel) Linear with BERT's N(0, std) weights and zero bias."""
    linear = torch.nn.Linear(in_features, out_features)
    torch.nn.init.normal_(linear.weight, mean=0.0, std=std)
    torch.nn.init.zeros_(linear.bias)
    return linear


def attention_mask_to_masked_out(attention_mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """[b, s] with 1 = real token  ->  bool [b, 1, s, s] with True = masked out (megatron's convention).

    Padded keys are hidden from every query; in causal mode key j is also hidden from query i < j.
    Row i always keeps key 0 ([CLS]) or itself, so no row is fully masked.
    """
    seq = attention_mask.shape[1]
    masked = ~attention_mask.bool()[:, None, None, :]  # [b, 1, 1, s]: the key is padding
    if causal:
        future = torch.ones(seq, seq, dtype=torch.bool, device=attention_mask.device).triu(1)
        masked = masked | future  # [b, 1, s, s]
    return masked.expand(-1, 1, seq, seq)


class BertEmbeddings(MegatronModule):
    """word (vocab-parallel) + position + token type -> LayerNorm -> dropout."""

    def __init__(self, config: ModelConfig, transformer_config, tp_group):
        super().__init__(config=transformer_config)
        std = config.init_method_std
        self.word_embeddings = norms.VocabParallelEmbedding(
            config.vocab_size,
            config.hidden_size,
            init_method=transformer_config.init_method,
            config=transformer_config,
            tp_group=tp_group,
        )
        self.position_embeddings = norms.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = norms.Embedding(config.type_vocab_size, config.hidden_size)
        torch.nn.init.normal_(self.position_embeddings.weight, std=std)
        torch.nn.init.normal_(self.token_type_embeddings.weight, std=std)
        self.layernorm = norms.LayerNorm(config.hidden_size, eps=config.layernorm_epsilon)
        self.dropout = Dropout(config.hidden_dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        """[b, s] ids -> [s, b, h] (megatron's layout)."""
        return self.batch_major(input_ids, token_type_ids).transpose(0, 1).contiguous()

    def batch_major(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        """[b, s] ids -> [b, s, h]."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        embeddings = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)[None]
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.layernorm(embeddings))


def pooled_positions(attention_mask: torch.Tensor, causal: bool) -> Optional[torch.Tensor]:
    """Which token's state a sequence is pooled from: [CLS] (None: position 0) for a bidirectional
    model; for a causal (left-to-right) one the last real token, the only one that has seen the
    whole input (position 0 sees only itself there, so a [CLS] pooler would give every input the
    same logits), as GPT's classifiers do. [b, s] mask with 1 = real token -> [b] positions."""
    if not causal:
        return None
    return (attention_mask.long().sum(dim=1) - 1).clamp(min=0)


class BertPooler(torch.nn.Module):
    """tanh(W h + b) of [CLS] (or, for a causal model, of each sequence's last real token): the
    sentence representation NSP and classification heads read."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = _normal_linear(config.hidden_size, config.hidden_size, config.init_method_std)

    def forward(self, sequence_output: torch.Tensor, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        if positions is None:
            return torch.tanh(self.dense(sequence_output[0]))  # [s, b, h] -> [b, h]
        batch = torch.arange(sequence_output.shape[1], device=sequence_output.device)
        return torch.tanh(self.dense(sequence_output[positions, batch]))


def _tp_group(pg_collection):
    return pg_collection.tp


class BertModel(MegatronModule):
    """The encoder every task shares: embeddings, transformer layers, pooler.

    `pg_collection` (megatron's ProcessGroupCollection) names the groups to shard over; it comes
    from the caller's ParallelLayout, never from global state read here. With `unpad` a padded
    batch's encoder layers run on its real tokens only (model/unpadding.py); padding positions of
    `sequence_output` are then zeros.
    """

    def __init__(
        self, config: ModelConfig, transformer_config, layer_spec, add_pooler: bool = True, *, pg_collection,
        unpad: bool = False,
    ):
        super().__init__(config=transformer_config)
        self.model_config = config
        self.unpad = unpad
        self.embeddings = BertEmbeddings(config, transformer_config, _tp_group(pg_collection))
        post_ln = config.layer_norm_position == "post"
        self.encoder = TransformerBlock(
            config=transformer_config,
            spec=TransformerBlockSubmodules(
                layer_specs=[layer_spec] * config.num_layers,
                # Post-LN layers end in a LayerNorm already; pre-LN needs a final one.
                layer_norm=None if post_ln else layer_norm_impl(),
            ),
            post_layer_norm=not post_ln,
            pg_collection=pg_collection,
        )
        self.pooler = BertPooler(config) if add_pooler else None

    def forward(
        self,
        input_ids: torch.Tensor,  # [b, s]
        token_type_ids: Optional[torch.Tensor] = None,  # [b, s], 0 = segment A, 1 = segment B
        attention_mask: Optional[torch.Tensor] = None,  # [b, s], 1 = real token, 0 = padding; None: no padding
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Returns (sequence_output [s, b, h], pooled_output [b, h] or None).

        Without `attention_mask` (a batch with no padding) a bidirectional model's attention gets
        no mask at all, which lets SDPA choose FlashAttention on a GPU."""
        causal = self.model_config.causal
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        unpadded = attention_mask is None
        if unpadded:
            attention_mask = torch.ones_like(input_ids)
        masked_out = None if unpadded and not causal else attention_mask_to_masked_out(attention_mask, causal)
        packing = PackedTokens.of(attention_mask, masked_out) if self.unpad and not unpadded else None
        if packing is None:
            hidden = self.embeddings(input_ids, token_type_ids)  # [s, b, h]
            sequence_output = self.encoder(hidden, attention_mask=masked_out)
        else:
            hidden = packing.pack(self.embeddings.batch_major(input_ids, token_type_ids))  # [T, 1, h]
            packed_output = self.encoder(hidden, attention_mask=packing)
            sequence_output = packing.unpack(packed_output).transpose(0, 1)  # [s, b, h]
        if self.pooler is None:
            return sequence_output, None
        return sequence_output, self.pooler(sequence_output, pooled_positions(attention_mask, causal))


class BertLMHead(MegatronModule):
    """dense -> GELU -> LayerNorm -> decoder tied to the word embeddings (+ own bias).

    The decoder is vocab-parallel: each TP rank produces logits for its slice of the vocabulary.
    """

    def __init__(self, config: ModelConfig, transformer_config, tp_group):
        super().__init__(config=transformer_config)
        self.dense = _normal_linear(config.hidden_size, config.hidden_size, config.init_method_std)
        self.layernorm = norms.LayerNorm(config.hidden_size, eps=config.layernorm_epsilon)
        self.decoder = ColumnParallelLinear(
            config.hidden_size,
            config.vocab_size,
            config=transformer_config,
            init_method=transformer_config.init_method,
            bias=True,
            gather_output=False,
            skip_weight_param_allocation=True,  # the weight is the word embedding matrix
            tp_group=tp_group,
        )

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        # hidden: [n, h] -> logits [n, vocab / tp]
        hidden = self.layernorm(torch.nn.functional.gelu(self.dense(hidden)))
        # The decoder's maths as megatron's ColumnParallelLinear does it (input copied into the TP
        # region: identity forward, all-reduced gradient), but with the bias inside the matrix
        # multiply (F.linear: addmm) instead of a second pass over the [n, vocab / tp] output and a
        # second buffer of its size: for a left-to-right model, which decodes every position, ~5%
        # of a step's CPU time and 0.23 GB of its peak at 32 x 128 tokens (docs/benchmarks.md).
        # The module keeps its parameter and TP attributes, so checkpoints and sharding are unchanged.
        hidden = copy_to_tensor_model_parallel_region(hidden, group=self.decoder.tp_group)
        return torch.nn.functional.linear(hidden, word_embeddings, self.decoder.bias)


@dataclass
class PretrainingOutput:
    """What BertForPretraining returns."""

    mlm_logits: torch.Tensor
    """[n_selected, vocab / tp], rows in the order of `input_ids[loss_mask]` (batch-major)."""
    nsp_logits: Optional[torch.Tensor]
    """[b, 2]: IsNext (0) vs NotNext (1); None without the NSP head."""
    sequence_output: torch.Tensor
    """[s, b, h] final hidden states."""


class BertForPretraining(MegatronModule):
    """BertModel + masked-LM head (+ next-sentence head unless `with_nsp=False`)."""

    def __init__(
        self, config: ModelConfig, transformer_config, layer_spec, with_nsp: bool = True, *, pg_collection
    ):
        super().__init__(config=transformer_config)
        self.bert = BertModel(config, transformer_config, layer_spec, with_nsp, pg_collection=pg_collection)
        self.lm_head = BertLMHead(config, transformer_config, _tp_group(pg_collection))
        self.nsp_head = _normal_linear(config.hidden_size, 2, config.init_method_std) if with_nsp else None

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: Optional[torch.Tensor],
        attention_mask: Optional[torch.Tensor],
        loss_mask: torch.Tensor,  # [b, s] bool: positions whose token is predicted, or their flat indices
    ) -> PretrainingOutput:
        sequence_output, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        # Only the selected positions go through the vocabulary decoder (about 15% of them).
        selection = loss_mask if loss_mask.dim() == 1 else loss_mask.bool()
        selected = selected_rows(sequence_output, selection, seq_first=True)  # [n_selected, h]
        mlm_logits = self.lm_head(selected, self.bert.embeddings.word_embeddings.weight)
        nsp_logits = self.nsp_head(pooled) if self.nsp_head is not None else None
        return PretrainingOutput(mlm_logits, nsp_logits, sequence_output)
