"""The paper's two masks (DESIGN invariant 5) and the causal mode of the LTR ablation."""

import pytest
import torch

from bert_ds.config import model_preset
from bert_ds.model import build_model
from bert_ds.model.bert import attention_mask_to_masked_out
from bert_ds.model.loss import pretraining_loss
from tests.helpers import synthetic_batch

VOCAB = 64


def _model(layout, **overrides):
    torch.manual_seed(0)
    config = model_preset("tiny", vocab_size=VOCAB, hidden_dropout=0.0, attention_dropout=0.0, **overrides)
    return build_model(config, layout)


@pytest.mark.parametrize("position", ["post", "pre"])
def test_positions_outside_the_loss_still_get_gradient(layout, position):
    """Only positions 3 and 5 are in the loss; every other real position must still receive
    gradient through attention, and padding must receive none."""
    model = _model(layout, layer_norm_position=position)
    batch = synthetic_batch(VOCAB, batch=1, seq=12, seed=2)
    batch["attention_mask"][0, 9:] = 0
    loss_mask = torch.zeros_like(batch["loss_mask"])
    loss_mask[0, [3, 5]] = True
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], loss_mask)
    pretraining_loss(out.mlm_logits, batch["labels"][loss_mask], tp_group=layout.tp_group).loss.backward()
    # A position's row of the position embedding is touched only by the token at that position.
    row_grad = model.bert.embeddings.position_embeddings.weight.grad[:12].abs().sum(-1)
    outside_loss = [0, 1, 2, 4, 6, 7, 8]
    assert (row_grad[outside_loss] > 0).all(), row_grad
    assert (row_grad[9:] == 0).all(), "padded positions must be hidden from attention"


def _outputs_before_and_after_changing_token_6(model, batch):
    changed = batch["input_ids"].clone()
    changed[:, 6] = (changed[:, 6] + 7) % (VOCAB - 5) + 5
    with torch.no_grad():
        before = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])[0]
        after = model.bert(changed, batch["token_type_ids"], batch["attention_mask"])[0]
    return before, after  # [s, b, h]


def test_causal_mode_earlier_positions_ignore_later_tokens(layout):
    model = _model(layout, causal=True).eval()
    before, after = _outputs_before_and_after_changing_token_6(model, synthetic_batch(VOCAB, 2, 10, seed=4))
    torch.testing.assert_close(after[:6], before[:6], atol=0, rtol=0)
    assert not torch.allclose(after[6:], before[6:])


def test_bidirectional_mode_earlier_positions_see_later_tokens(layout):
    model = _model(layout).eval()
    before, after = _outputs_before_and_after_changing_token_6(model, synthetic_batch(VOCAB, 2, 10, seed=4))
    assert not torch.allclose(after[:6], before[:6])


def test_mask_builder_combines_padding_and_causal():
    attention_mask = torch.tensor([[1, 1, 1, 0]])
    padded = attention_mask_to_masked_out(attention_mask, causal=False)[0, 0]
    assert padded[:, 3].all() and not padded[:, :3].any()
    causal = attention_mask_to_masked_out(attention_mask, causal=True)[0, 0]
    expected = torch.tensor(
        [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 1]], dtype=torch.bool
    )
    assert torch.equal(causal, expected)
