"""Fine-tuning models: the shared encoder plus one small task head (the paper's Figure 4).

- classification / regression: [CLS]'s pooled state -> dropout -> `classifier` [num_labels, H]
  (num_labels 1: a regression score, STS-B);
- multiple choice (SWAG): each (context, ending) pair is one sequence; its pooled state -> one
  score (`classifier` [1, H]); a softmax over the choices;
- span extraction (SQuAD): every token's state -> `qa_outputs` [2, H] -> start and end logits.

Parameter names match Hugging Face's task classes (`classifier`, `qa_outputs`), so exports map
one to one. Heads are tiny and replicated on every tensor-parallel rank (their input, the encoder
output, is the same on all of them).
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
from megatron.core.transformer.module import MegatronModule

from bert_ds.config import ModelConfig
from bert_ds.model.bert import BertModel
from bert_ds.model.dropout import Dropout

TaskKind = Literal["classification", "multiple_choice", "span"]
KINDS = ("classification", "multiple_choice", "span")


class BertForFinetuning(MegatronModule):
    """BertModel + one head; forward returns logits (see `forward`)."""

    def __init__(
        self, config: ModelConfig, transformer_config, layer_spec, kind: TaskKind, num_labels: int = 2, *, pg_collection
    ):
        super().__init__(config=transformer_config)
        if kind not in KINDS:
            raise ValueError(f"unknown task kind {kind!r}; one of {KINDS}")
        self.kind, self.model_config = kind, config
        # Hugging Face's span model has no pooler; ours follows so exported keys match.
        self.bert = BertModel(config, transformer_config, layer_spec, add_pooler=kind != "span", pg_collection=pg_collection)
        self.dropout = Dropout(config.hidden_dropout)
        if kind == "span":
            self.qa_outputs = torch.nn.Linear(config.hidden_size, 2)
        else:
            self.classifier = torch.nn.Linear(config.hidden_size, num_labels if kind == "classification" else 1)

    def forward(
        self,
        input_ids: torch.Tensor,  # [b, s], or [b, choices, s] for multiple choice
        token_type_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
    ):
        """classification: [b, num_labels]; multiple choice: [b, choices]; span: ([b, s], [b, s])."""
        if self.kind == "multiple_choice":
            batch, choices, seq = input_ids.shape
            flat = [t.reshape(batch * choices, seq) if t is not None else None for t in (input_ids, token_type_ids, attention_mask)]
            sequence_output, pooled = self.bert(*flat)
            return self.classifier(self.dropout(pooled)).view(batch, choices)
        sequence_output, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        if self.kind == "classification":
            return self.classifier(self.dropout(pooled))
        logits = self.qa_outputs(sequence_output).transpose(0, 1)  # [s, b, 2] -> [b, s, 2]
        if attention_mask is not None:  # padding can never be a start or an end
            logits = logits.masked_fill(~attention_mask.bool().unsqueeze(-1), torch.finfo(logits.dtype).min)
        start, end = logits.unbind(-1)
        return start.contiguous(), end.contiguous()


def finetuning_loss(kind: TaskKind, logits, batch: dict, regression: bool = False) -> torch.Tensor:
    """Cross-entropy over labels, choices, or (start + end) / 2 positions; MSE for regression."""
    if kind == "span":
        start, end = logits
        ce = torch.nn.functional.cross_entropy
        return (ce(start.float(), batch["start_positions"]) + ce(end.float(), batch["end_positions"])) / 2
    if regression:
        return torch.nn.functional.mse_loss(logits.float().squeeze(-1), batch["labels"].float())
    return torch.nn.functional.cross_entropy(logits.float(), batch["labels"])
