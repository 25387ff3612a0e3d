"""The cheap CPU dropout (model/dropout.py) and the attention path that uses it.

It must be dropout in distribution (rate, scaling, independent elements), follow torch's
generator exactly like torch's dropout (seeds, forks, replay), reuse the forward mask in backward,
and leave attention's maths unchanged apart from the mask.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from bert_ds.runtime.distributed import RNGStatesTracker
from bert_ds.model.attention import SDPACoreAttention
from bert_ds.model.dropout import Dropout, dropout, get_bias_dropout_add, keep_probability, scaled_keep_mask

N = 1 << 20


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drop_rate_and_scaling(p):
    torch.manual_seed(0)
    out = dropout(torch.ones(N), p)
    kept = out != 0
    keep = keep_probability(p)
    assert abs(keep - (1 - p)) <= 1 / 65536
    sigma = math.sqrt(keep * (1 - keep) / N)
    assert abs(kept.float().mean().item() - keep) < 5 * sigma
    # Kept values are scaled by the exact inverse of the keep probability: unbiased.
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / keep), rtol=1e-6, atol=0)


def test_neighbouring_elements_are_independent():
    """Four elements share one 64-bit word: their keep decisions must still be independent."""
    torch.manual_seed(1)
    kept = dropout(torch.ones(N), 0.5) != 0
    for shift in (1, 2, 3, 4):
        both = (kept[:-shift] & kept[shift:]).float().mean().item()
        assert abs(both - 0.25) < 5 * math.sqrt(0.25 * 0.75 / N), shift


def test_masks_follow_torchs_generator():
    x = torch.ones(1000)
    torch.manual_seed(3)
    first = dropout(x, 0.3)
    after_first = torch.rand(1)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.3), first)  # same seed, same mask
    assert not torch.equal(dropout(x, 0.3), first)  # the stream moved on
    torch.manual_seed(3)
    torch.randint(0, 2**62, ())  # a mask costs exactly one draw, whatever its size
    assert torch.equal(torch.rand(1), after_first)
    tracker = RNGStatesTracker()
    tracker.add("model-parallel-rng", seed=11)
    torch.manual_seed(3)
    with tracker.fork():
        assert not torch.equal(dropout(x, 0.3), first)  # a forked stream draws its own masks


def test_backward_multiplies_by_the_forward_mask():
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(0), requires_grad=True)
    torch.manual_seed(4)
    out = dropout(x, 0.25)
    out.backward(torch.ones_like(out))
    torch.manual_seed(4)
    mask = scaled_keep_mask(x.shape, 0.25, x.dtype)
    torch.testing.assert_close(x.grad, mask, rtol=0, atol=0)
    torch.testing.assert_close(out, x.detach() * mask, rtol=0, atol=0)


def test_edges_and_eval():
    x = torch.randn(10)
    assert dropout(x, 0.0) is x and dropout(x, 0.5, training=False) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros(10))
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(1.5)
    module = Dropout(0.5).eval()
    assert module(x) is x and "p=0.5" in repr(module)
    # Tensors off the CPU go to torch's own kernel (meta: shapes only, no data).
    assert dropout(torch.ones(4, device="meta"), 0.5).device.type == "meta"


def test_bias_dropout_add_matches_its_definition():
    x, bias, residual = torch.randn(5, 2, 8), torch.randn(8), torch.randn(5, 2, 8)
    torch.manual_seed(5)
    out = get_bias_dropout_add(training=True, fused=False)((x, bias), residual, 0.2)
    torch.manual_seed(5)
    expected = residual + (x + bias) * scaled_keep_mask(x.shape, 0.2, x.dtype)
    torch.testing.assert_close(out, expected)
    evaluated = get_bias_dropout_add(training=False, fused=False)((x.clone(), bias), residual.clone(), 0.2)
    torch.testing.assert_close(evaluated, residual + x + bias)


def _attention(p: float) -> SDPACoreAttention:
    return SDPACoreAttention(config=SimpleNamespace(attention_dropout=p, kv_channels=16), layer_number=1)


def _qkv_and_mask(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(10, 3, 2, 16, generator=generator) for _ in range(3))  # [s, b, heads, d]
    masked = torch.zeros(3, 1, 1, 10, dtype=torch.bool)
    masked[0, ..., 7:] = True  # the first sequence has 3 padded keys
    return q, k, v, masked.expand(3, 1, 10, 10)


def test_attention_with_dropout_is_sdpa_with_the_mask_applied():
    q, k, v, masked = _qkv_and_mask()
    torch.manual_seed(6)
    out = _attention(0.2).train()(q, k, v, masked)
    torch.manual_seed(6)
    keep = scaled_keep_mask(torch.Size([3, 2, 10, 10]), 0.2, torch.float32)
    qb, kb, vb = (t.permute(1, 2, 0, 3) for t in (q, k, v))
    probs = torch.softmax((qb @ kb.transpose(-2, -1) / 4.0).masked_fill(masked, -torch.inf), dim=-1)
    expected = (probs * keep @ vb).permute(2, 0, 1, 3).reshape(10, 3, -1)
    torch.testing.assert_close(out, expected)
    # With (almost) nothing dropped it is exactly what SDPA computes in evaluation.
    nearly_none = _attention(1e-9).train()(q, k, v, masked)
    torch.testing.assert_close(nearly_none, _attention(0.2).eval()(q, k, v, masked))


def test_attention_dropout_never_reads_padded_keys():
    q, k, v, masked = _qkv_and_mask()
    changed = v.clone()
    changed[7:, 0] += 100.0  # values at the first sequence's padded keys
    torch.manual_seed(7)
    before = _attention(0.3).train()(q, k, v, masked)
    torch.manual_seed(7)
    after = _attention(0.3).train()(q, k, changed, masked)
    torch.testing.assert_close(after, before, rtol=0, atol=0)


def test_gradients_flow_through_the_attention_path():
    q, k, v, masked = (t.requires_grad_() if t.dtype == torch.float32 else t for t in _qkv_and_mask())
    torch.manual_seed(8)
    _attention(0.1).train()(q, k, v, masked).square().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0 for t in (q, k, v))
    assert (v.grad[7:, 0] == 0).all()  # padded keys' values contribute nothing
