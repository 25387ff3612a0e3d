"""Unpadding (model/unpadding.py): the encoder on a padded batch's real tokens only computes the
same outputs and gradients as on the padded batch, for every fine-tuning head, both layer
orders, the causal mask and recomputed layers, in fp32 and bf16."""

import pytest
import torch

from bert_ds.config import model_preset
from bert_ds.model import build_model
from bert_ds.model.bert import attention_mask_to_masked_out
from bert_ds.model.unpadding import PackedTokens
from tests.support.helpers import synthetic_batch

VOCAB = 64
LENGTHS = [10, 4, 7]  # real tokens of each sequence; the batch is padded to 12


def _batch(seq=12, choices=None):
    batch = synthetic_batch(VOCAB, batch=len(LENGTHS), seq=seq, seed=3)
    for row, length in enumerate(LENGTHS):
        batch["attention_mask"][row, length:] = 0
        batch["input_ids"][row, length:] = 0
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    if choices:  # multiple choice: [b, choices, s], each choice its own length
        ids, types, mask = (t[:, None].repeat(1, choices, 1) for t in (ids, types, mask))
        mask[:, 1, 2:] = 0
    return ids, types, mask


def _twins(layout, kind, dtype=torch.float32, **overrides):
    """The same model twice (same seed, same weights), padded and unpadded."""
    config = model_preset("tiny", vocab_size=VOCAB, hidden_dropout=0.0, attention_dropout=0.0, **overrides)
    padded, unpadded = (build_model(config, layout, kind, num_labels=3, seed=7, unpad=unpad).to(dtype).train()
                        for unpad in (False, True))
    return padded, unpadded


def _loss(outputs):
    flat = torch.cat([o.float().flatten() for o in (outputs if isinstance(outputs, tuple) else (outputs,))])
    finite = flat[flat > torch.finfo(torch.float32).min / 2]  # span logits at padding are masked to min
    return (finite * torch.linspace(-1, 1, finite.numel())).sum()


@pytest.mark.parametrize("kind", ["classification", "span", "tagging", "multiple_choice"])
@pytest.mark.parametrize("overrides", [{}, {"layer_norm_position": "pre"}, {"causal": True},
                                       {"activation_checkpointing": True}], ids=["post", "pre", "causal", "recompute"])
def test_unpadded_encoder_matches_the_padded_one(layout, kind, overrides):
    padded, unpadded = _twins(layout, kind, **overrides)
    inputs = _batch(choices=2 if kind == "multiple_choice" else None)
    results = []
    for model in (padded, unpadded):
        outputs = model(*inputs)
        if kind == "tagging":  # padding is never tagged (its target is IGNORE_INDEX); unpadded its states are 0
            outputs = outputs[inputs[2].bool()]
        _loss(outputs).backward()
        results.append((outputs, {n: p.grad for n, p in model.named_parameters()}))
    (out_padded, grads_padded), (out_unpadded, grads_unpadded) = results
    torch.testing.assert_close(out_unpadded, out_padded, rtol=1e-5, atol=1e-5)
    assert grads_padded.keys() == grads_unpadded.keys()
    for name, grad in grads_padded.items():
        assert grad is not None and grads_unpadded[name] is not None, name
        torch.testing.assert_close(grads_unpadded[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_unpadded_bf16_matches_the_padded_one(layout):
    """bf16 takes attention's contiguous-heads path; to bf16's rounding the same logits."""
    padded, unpadded = _twins(layout, "classification", torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(unpadded(*_batch()), padded(*_batch()), rtol=2e-2, atol=2e-2)


def test_with_dropout_padding_still_gets_no_gradient(layout):
    """With dropout on, padding stays out: no gradient reaches a position only padding holds."""
    config = model_preset("tiny", vocab_size=VOCAB, hidden_dropout=0.1, attention_dropout=0.1)
    model = build_model(config, layout, "classification", num_labels=2, seed=7, unpad=True).train()
    ids, types, mask = _batch()
    ids[:, 10:] = 0
    model(ids, types, mask).sum().backward()
    rows = model.bert.embeddings.position_embeddings.weight.grad.abs().sum(-1)
    assert (rows[:10] > 0).all() and (rows[10:] == 0).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_packing_round_trip_and_full_batches():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    packing = PackedTokens.of(mask, attention_mask_to_masked_out(mask, causal=False))
    assert packing.index.tolist() == [0, 1, 2, 4, 5]
    states = torch.arange(8.0).view(2, 4, 1)
    packed = packing.pack(states)
    assert packed.shape == (5, 1, 1) and packed.flatten().tolist() == [0, 1, 2, 4, 5]
    assert packing.unpack(packed).flatten().tolist() == [0, 1, 2, 0, 4, 5, 0, 0]
    full = torch.ones(2, 4, dtype=torch.long)
    assert PackedTokens.of(full, attention_mask_to_masked_out(full, causal=False)) is None


def test_pretraining_refuses_unpadding(layout):
    with pytest.raises(ValueError, match="fine-tuning"):
        build_model(model_preset("tiny", vocab_size=VOCAB), layout, unpad=True)
