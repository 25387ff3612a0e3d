"""Packing a padded batch's real tokens into one sequence for the token-wise layers ("unpadding").

Fine-tuning batches are padded to their longest sequence: at GLUE's lengths a third of the tokens
are real, yet every token-wise layer (QKV, output projection, MLP, LayerNorm, dropout) would do
the padding's work too. Packed, the encoder runs its linear layers on `[T, 1, h]` (T = real tokens)
and only core attention goes back to the padded `[b, heads, s, d]` layout, where the mask keeps
padding out as before. Padding positions never reach a real token's state (their keys are masked,
so their probabilities are exactly 0), hence the packed encoder computes the same function; only
float rounding (fewer terms in the weight gradients' sums) and the dropout draws (masks drawn for
T rather than b x s rows) differ.

`PackedTokens` travels through megatron's TransformerBlock in the `attention_mask` slot: megatron
hands that argument to core attention (model/attention.py) untouched, which reads the padded mask
and the token positions from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class PackedTokens:
    """Where the real tokens of a padded `[b, s]` batch sit in the packed sequence."""

    index: torch.Tensor
    """[T] positions of the real tokens in the batch flattened batch-major ([b * s])."""
    batch: int
    seq: int
    masked_out: torch.Tensor
    """bool [b, 1, s, s], True = masked out: the padded batch's attention mask."""

    @classmethod
    def of(cls, attention_mask: torch.Tensor, masked_out: torch.Tensor) -> Optional["PackedTokens"]:
        """The packing of a `[b, s]` mask (1 = real token); None when nothing is padding (packing
        would only reorder the tokens)."""
        index = attention_mask.bool().flatten().nonzero().squeeze(1)  # one pass (and one GPU sync)
        if index.numel() == attention_mask.numel():
            return None
        batch, seq = attention_mask.shape
        return cls(index, batch, seq, masked_out)

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """[b, s, *rest] -> [T, 1, *rest]: the real tokens only."""
        return padded.flatten(0, 1).index_select(0, self.index).unsqueeze(1)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[T, 1, *rest] -> [b, s, *rest], zeros at the padding."""
        rest = packed.shape[2:]
        zeros = packed.new_zeros((self.batch * self.seq, *rest))
        return zeros.index_copy(0, self.index, packed.squeeze(1)).view(self.batch, self.seq, *rest)


def attention_inputs(mask) -> tuple[Optional[torch.Tensor], Optional[PackedTokens]]:
    """(the padded boolean mask, the packing or None) of core attention's `attention_mask` slot,
    which holds either a mask tensor or a PackedTokens."""
    if isinstance(mask, PackedTokens):
        return mask.masked_out, mask
    return mask, None
