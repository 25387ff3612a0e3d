"""Fine-tuning models: the shared encoder plus one small task head (the paper's Figure 4).

- classification / regression: [CLS]'s pooled state -> dropout -> `classifier` [num_labels, H]
  (num_labels 1: a regression score, STS-B);
- multiple choice (SWAG): each (context, ending) pair is one sequence; its pooled state -> one
  score (`classifier` [1, H]); a softmax over the choices;
- span extraction (SQuAD): every token's state -> `qa_outputs` [2, H] -> start and end logits;
- token tagging (CoNLL-2003 NER, Figure 4d): every token's state -> dropout -> `classifier`
  [num_labels, H] (the tagger reads each word's first sub-token; finetune/ner.py).

With `bilstm` (Table 5's "+ BiLSTM" row: fine-tuning's `--bilstm`) a randomly initialised
one-layer bidirectional LSTM (H/2 per direction) reads the encoder's token states first: span
extraction and tagging score its per-token outputs, classification and multiple choice read its two final
states (forward at the last real token, backward at [CLS]) instead of the pooler. Padding changes
nothing (model/bilstm.py). Hugging Face has no such model (checkpoint/hf_export.py refuses it).

Parameter names match Hugging Face's task classes (`classifier`, `qa_outputs`), so exports map
one to one. Heads are tiny and replicated on every tensor-parallel rank (their input, the encoder
output, is the same on all of them).
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
from megatron.core.transformer.module import MegatronModule

from bert_ds.config import POOLED_KINDS, TASK_KINDS, ModelConfig
from bert_ds.model.bert import BertModel
from bert_ds.model.bilstm import PaddedBiLSTM
from bert_ds.model.dropout import Dropout

TaskKind = Literal["classification", "multiple_choice", "span", "tagging"]  # config.TASK_KINDS
IGNORE_INDEX = -100
"""A tagging target that is not scored ([CLS], [SEP], a word's later sub-tokens, padding)."""


class BertForFinetuning(MegatronModule):
    """BertModel + one head; forward returns logits (see `forward`)."""

    def __init__(
        self, config: ModelConfig, transformer_config, layer_spec, kind: TaskKind, num_labels: int = 2, *, pg_collection,
        bilstm: bool = False, unpad: bool = False,
    ):
        super().__init__(config=transformer_config)
        if kind not in TASK_KINDS:
            raise ValueError(f"unknown task kind {kind!r}; one of {TASK_KINDS}")
        if bilstm and config.hidden_size % 2:
            raise ValueError(f"--bilstm needs an even hidden size, got {config.hidden_size}")
        self.kind, self.model_config = kind, config
        # Hugging Face's span and token models have no pooler; ours follow so exported keys match.
        # With the BiLSTM the classifier reads the LSTM's final states, so no pooler either.
        pooler = kind in POOLED_KINDS and not bilstm
        self.bert = BertModel(config, transformer_config, layer_spec, add_pooler=pooler, pg_collection=pg_collection,
                              unpad=unpad)
        self.bilstm = PaddedBiLSTM(config.hidden_size, config.hidden_size // 2) if bilstm else None
        self.dropout = Dropout(config.hidden_dropout)
        if kind == "span":
            self.qa_outputs = torch.nn.Linear(config.hidden_size, 2)
        else:
            self.classifier = torch.nn.Linear(config.hidden_size, 1 if kind == "multiple_choice" else num_labels)

    def forward(
        self,
        input_ids: torch.Tensor,  # [b, s], or [b, choices, s] for multiple choice
        token_type_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
    ):
        """classification: [b, num_labels]; multiple choice: [b, choices]; span: ([b, s], [b, s]);
        tagging: [b, s, num_labels]."""
        if self.kind == "multiple_choice":
            batch, choices, seq = input_ids.shape
            flat = [t.reshape(batch * choices, seq) if t is not None else None for t in (input_ids, token_type_ids, attention_mask)]
            sequence_output, pooled = self._encode(*flat)
            return self.classifier(self.dropout(pooled)).view(batch, choices)
        sequence_output, pooled = self._encode(input_ids, token_type_ids, attention_mask)
        if self.kind == "classification":
            return self.classifier(self.dropout(pooled))
        if self.kind == "tagging":
            return self.classifier(self.dropout(sequence_output)).transpose(0, 1).contiguous()  # [b, s, num_labels]
        logits = self.qa_outputs(sequence_output).transpose(0, 1)  # [s, b, 2] -> [b, s, 2]
        if attention_mask is not None:  # padding can never be a start or an end
            logits = logits.masked_fill(~attention_mask.bool().unsqueeze(-1), torch.finfo(logits.dtype).min)
        start, end = logits.unbind(-1)
        return start.contiguous(), end.contiguous()

    def _encode(self, input_ids, token_type_ids, attention_mask):
        """(token states [s, b, h], sentence representation [b, h] or None): the encoder's, or
        with the BiLSTM its per-token outputs and its final forward and backward states."""
        sequence_output, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        if self.bilstm is None:
            return sequence_output, pooled
        seq = sequence_output.shape[0]
        lengths = attention_mask.sum(1) if attention_mask is not None else torch.full((input_ids.shape[0],), seq)
        return self.bilstm(sequence_output, lengths)  # [s, b, h] (zeros at padding), [b, h]


def finetuning_loss(kind: TaskKind, logits, batch: dict, regression: bool = False) -> torch.Tensor:
    """Cross-entropy over labels, choices, (start + end) / 2 positions, or the tagged tokens
    (targets IGNORE_INDEX are not scored); MSE for regression."""
    if kind == "tagging":
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(),
                                                 ignore_index=IGNORE_INDEX)
    if kind == "span":
        start, end = logits
        ce = torch.nn.functional.cross_entropy
        return (ce(start.float(), batch["start_positions"]) + ce(end.float(), batch["end_positions"])) / 2
    if regression:
        return torch.nn.functional.mse_loss(logits.float().squeeze(-1), batch["labels"].float())
    return torch.nn.functional.cross_entropy(logits.float(), batch["labels"])
