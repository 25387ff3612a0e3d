"""The paper's two masks (loss_mask and attention_mask, kept apart) and the causal mode of the LTR ablation."""

import pytest
import torch

from bert_ds.config import model_preset
from bert_ds.model import build_model
from bert_ds.model.bert import attention_mask_to_masked_out
from bert_ds.model.loss import pretraining_loss
from tests.support.helpers import synthetic_batch

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


def test_a_causal_classifier_pools_the_last_real_token(layout):
    """Under the causal mask [CLS] sees only itself, so a [CLS] pooler gives every input the same
    logits; a left-to-right model pools each sequence's last real token instead (model/bert.py
    pooled_positions), and padding after it changes nothing."""
    torch.manual_seed(0)
    config = model_preset("tiny", vocab_size=VOCAB, hidden_dropout=0.0, attention_dropout=0.0, causal=True)
    model = build_model(config, layout, "classification", num_labels=2).eval()
    batch = synthetic_batch(VOCAB, batch=2, seq=10, seed=5)
    batch["input_ids"][:, 0] = 2  # the same [CLS] id in both rows, different tokens after it
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], torch.ones_like(batch["input_ids"])
    with torch.no_grad():
        logits = model(ids, types, mask)
        assert not torch.allclose(logits[0], logits[1]), "the logits ignore the input"
        padded = torch.nn.functional.pad(ids, (0, 4), value=0)
        padded_logits = model(padded, torch.nn.functional.pad(types, (0, 4)), torch.nn.functional.pad(mask, (0, 4)))
    torch.testing.assert_close(padded_logits, logits)


@pytest.mark.parametrize("kind", ["classification", "span", "multiple_choice"])
def test_the_bilstm_head_reads_every_real_token_and_ignores_padding(layout, kind):
    """--bilstm (Table 5's "+ BiLSTM"): a BiLSTM under the head, without a pooler; appending
    padding changes no output; every BiLSTM weight receives gradient."""
    torch.manual_seed(0)
    config = model_preset("tiny", vocab_size=VOCAB, hidden_dropout=0.0, attention_dropout=0.0)
    model = build_model(config, layout, kind, num_labels=3, bilstm=True)
    assert model.bert.pooler is None and model.bilstm.hidden_size == config.hidden_size // 2
    batch = synthetic_batch(VOCAB, batch=2, seq=10, seed=6)
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], torch.ones_like(batch["input_ids"])

    def pad(t):
        return torch.nn.functional.pad(t, (0, 3))

    if kind == "multiple_choice":  # two choices per example
        ids, types, mask = (t[:, None].expand(-1, 2, -1).contiguous() for t in (ids, types, mask))
    outputs = model(ids, types, mask)
    padded = model(pad(ids), pad(types), pad(mask))
    if kind == "span":
        for plain, longer in zip(outputs, padded):
            torch.testing.assert_close(longer[:, :10], plain)
            assert (longer[:, 10:] == torch.finfo(longer.dtype).min).all()  # padding is never an answer
        loss = outputs[0].sum() + outputs[1].sum()
    else:
        torch.testing.assert_close(padded, outputs)
        loss = outputs.sum()
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.bilstm.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_attention_with_dropout_gives_the_same_bits_from_any_head_layout(dtype):
    """The written-out CPU attention (with dropout) takes megatron's [s, b, heads, d] heads as
    permuted views; in bf16 it first makes them contiguous (oneDNN's batched multiply would copy
    them itself, slower). Outputs and gradients are the same bits as from contiguous inputs."""
    from types import SimpleNamespace

    from bert_ds.model.attention import SDPACoreAttention

    seq, batch, heads, dim = 16, 3, 4, 32
    attention = SDPACoreAttention(config=SimpleNamespace(attention_dropout=0.1, kv_channels=dim), layer_number=1).train()
    mixed = torch.randn(seq, batch, heads, 3 * dim).to(dtype).requires_grad_()
    mask = attention_mask_to_masked_out(torch.tensor([[1] * 16, [1] * 9 + [0] * 7, [1] * 4 + [0] * 12]), False)
    upstream = torch.randn(seq, batch, heads * dim).to(dtype)
    results = []
    for contiguous in (False, True):
        mixed.grad = None
        q, k, v = torch.split(mixed, dim, dim=-1)  # views into [s, b, heads, 3d], as megatron passes them
        if contiguous:
            q, k, v = (t.contiguous() for t in (q, k, v))
        torch.manual_seed(7)
        out = attention(q, k, v, mask)
        out.backward(upstream)
        results.append((out.detach(), mixed.grad.clone()))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert results[0][1].abs().sum() > 0


@pytest.mark.parametrize("causal", [False, True])
def test_a_batch_without_padding_needs_no_mask(layout, causal, monkeypatch):
    """attention_mask=None (what a step passes for a batch with no padding) computes what an
    all-ones mask computes, and a bidirectional model then hands SDPA no mask at all (the
    condition for FlashAttention on a GPU); the causal one keeps its causal mask."""
    import torch.nn.functional as F

    model = _model(layout, causal=causal).eval()
    batch = synthetic_batch(VOCAB, batch=2, seq=10, seed=5)
    ones = torch.ones_like(batch["attention_mask"])
    masks = []
    sdpa = F.scaled_dot_product_attention

    def recording(*args, attn_mask=None, **kwargs):
        masks.append(attn_mask)
        return sdpa(*args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    with torch.no_grad():
        unmasked = model(batch["input_ids"], batch["token_type_ids"], None, batch["loss_mask"])
        assert all((m is None) != causal for m in masks) and masks
        full = model(batch["input_ids"], batch["token_type_ids"], ones, batch["loss_mask"])
    torch.testing.assert_close(unmasked.mlm_logits, full.mlm_logits, atol=0, rtol=0)
    torch.testing.assert_close(unmasked.nsp_logits, full.nsp_logits, atol=0, rtol=0)


def test_predicted_positions_as_flat_indices_select_what_the_bool_mask_selects(layout):
    """The step passes the loss mask's flat indices (read on the host) instead of the bool mask:
    the same rows, in the same batch-major order as labels[loss_mask]."""
    import numpy as np

    from bert_ds.model.selection import selected_rows

    model = _model(layout).eval()
    batch = synthetic_batch(VOCAB, batch=3, seq=12, seed=6)
    positions = torch.from_numpy(np.flatnonzero(batch["loss_mask"].numpy()))
    with torch.no_grad():
        by_mask = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["loss_mask"])
        by_index = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], positions)
    torch.testing.assert_close(by_index.mlm_logits, by_mask.mlm_logits, atol=0, rtol=0)
    assert torch.equal(selected_rows(batch["labels"], positions), batch["labels"][batch["loss_mask"]])
