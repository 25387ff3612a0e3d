import torch
import torch.nn.functional as F

from bert_ds.model.loss import pretraining_loss


def test_loss_matches_plain_cross_entropy(layout):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 30, generator=gen)
    targets = torch.randint(0, 30, (9,), generator=gen)
    targets[:3] = logits[:3].argmax(-1)  # at least three right
    nsp_logits = torch.randn(4, 2, generator=gen)
    nsp_label = torch.tensor([0, 1, 1, 0])
    expected_mlm = F.cross_entropy(logits, targets)
    expected_accuracy = (logits.argmax(-1) == targets).float().mean()
    losses = pretraining_loss(logits.clone(), targets, nsp_logits, nsp_label, tp_group=layout.tp_group)
    torch.testing.assert_close(losses.mlm_loss, expected_mlm)
    torch.testing.assert_close(losses.mlm_accuracy, expected_accuracy)
    torch.testing.assert_close(losses.nsp_loss, F.cross_entropy(nsp_logits, nsp_label))
    torch.testing.assert_close(losses.loss, losses.mlm_loss + losses.nsp_loss)
    assert losses.mlm_accuracy >= 3 / 9


def test_mlm_only_has_no_nsp_terms(layout):
    logits = torch.randn(5, 12)
    losses = pretraining_loss(logits.clone(), torch.arange(5), tp_group=layout.tp_group)
    assert losses.nsp_loss is None and losses.nsp_accuracy is None
    torch.testing.assert_close(losses.loss, losses.mlm_loss)


def test_empty_selection_gives_zero_loss_with_a_graph(layout):
    logits = torch.randn(0, 12, requires_grad=True)
    losses = pretraining_loss(logits, torch.zeros(0, dtype=torch.long), tp_group=layout.tp_group)
    assert losses.mlm_loss.item() == 0.0 and losses.mlm_loss.requires_grad


def test_padding_rows_count_nowhere_and_get_no_gradient(layout):
    from bert_ds.model.loss import evaluation_sums
    from bert_ds.model.selection import PADDING_TARGET

    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(7, 30, generator=gen)
    targets = torch.randint(0, 30, (7,), generator=gen)
    targets[:2] = logits[:2].argmax(-1)
    padded_logits = torch.cat([logits, logits[:1].repeat(5, 1)]).requires_grad_()
    padded_targets = torch.cat([targets, torch.full((5,), PADDING_TARGET)])
    plain = pretraining_loss(logits.clone(), targets, tp_group=layout.tp_group)
    padded = pretraining_loss(padded_logits.clone(), padded_targets, tp_group=layout.tp_group)
    torch.testing.assert_close(padded.mlm_loss, plain.mlm_loss)
    torch.testing.assert_close(padded.mlm_accuracy, plain.mlm_accuracy)
    padded.loss.backward()
    assert padded_logits.grad[7:].abs().max() == 0 and padded_logits.grad[:7].abs().max() > 0
    sums = evaluation_sums(padded_logits.detach().clone(), padded_targets, tp_group=layout.tp_group)
    expected = evaluation_sums(logits.clone(), targets, tp_group=layout.tp_group)
    torch.testing.assert_close(sums, expected)
    assert sums[2] == 7


def _reference(logits, targets):
    """fp32 cross-entropy (mean over rows) and its gradient, by torch."""
    reference = logits.detach().float().requires_grad_()
    loss = F.cross_entropy(reference, targets)
    loss.backward()
    return loss.detach(), reference.grad


def test_loss_and_gradient_over_several_chunks_match_torch(layout, monkeypatch):
    """Rows are processed a few at a time (model/vocab_cross_entropy.py): with chunks of 4 rows
    over 10 rows (the last chunk partial), loss and gradient are torch's in fp32."""
    from bert_ds.model import vocab_cross_entropy

    monkeypatch.setattr(vocab_cross_entropy, "CPU_CHUNK_ELEMENTS", 4 * 50)
    gen = torch.Generator().manual_seed(2)
    logits = (3 * torch.randn(10, 50, generator=gen)).requires_grad_()
    targets = torch.randint(0, 50, (10,), generator=gen)
    expected_loss, expected_grad = _reference(logits, targets)
    losses = pretraining_loss(logits * 1, targets, tp_group=layout.tp_group)
    losses.loss.backward()
    torch.testing.assert_close(losses.mlm_loss, expected_loss)
    torch.testing.assert_close(logits.grad, expected_grad)


def test_bf16_gradient_is_within_one_unit_of_the_rounded_fp32_gradient(layout):
    """In bf16 the exponentials are stored in the logits' buffer and scaled in backward: two
    roundings instead of one, so each entry is at most one bf16 unit in the last place from the
    fp32 gradient rounded once; the loss is computed in fp32 throughout. A confident row
    (p = 0.999 for its target) keeps its target's gradient, p - 1 = -0.001, which a bf16
    subtraction would round to 0."""
    gen = torch.Generator().manual_seed(3)
    logits = (4 * torch.randn(64, 1000, generator=gen)).bfloat16()
    targets = torch.randint(0, 1000, (64,), generator=gen)
    logits[0] = -20.0
    logits[0, targets[0]] = torch.log(torch.tensor(0.999 / 0.001 * 999)).item() - 20.0  # p = 0.999
    expected_loss, expected_grad = _reference(logits, targets)
    ours = logits.clone().requires_grad_()
    losses = pretraining_loss(ours * 1, targets, tp_group=layout.tp_group)
    losses.loss.backward()
    assert ours.grad.dtype == torch.bfloat16
    torch.testing.assert_close(losses.mlm_loss, expected_loss, rtol=1e-5, atol=1e-6)
    rounded = expected_grad.bfloat16().float()
    unit = torch.exp2(torch.floor(torch.log2(rounded.abs().clamp(min=1e-30))) - 7)  # bf16: 8 significant bits
    assert ((ours.grad.float() - rounded).abs() <= unit).all()
    confident = ours.grad[0, targets[0]].float() * 64  # the mean over 64 rows scales each row by 1/64
    assert -0.0011 < confident < -0.0009


def test_fp16_gradient_keeps_small_entries_under_a_loss_scale(layout):
    """fp16 (DeepSpeed's loss-scaled mode): backward recomputes the softmax in fp32 and applies the
    scaled gradient before the one rounding, so entries far below fp16's smallest normal number
    (6e-5) survive as they do in the fp32 gradient rounded once; storing the exponentials in
    fp16 would have flushed everything below 6e-8 to 0 before the scale reached them."""
    gen = torch.Generator().manual_seed(4)
    logits = (4 * torch.randn(32, 2000, generator=gen)).half()
    targets = torch.randint(0, 2000, (32,), generator=gen)
    scale = 2.0**16
    _, expected_grad = _reference(logits, targets)
    rounded = (expected_grad * scale).half().float()
    ours = logits.clone().requires_grad_()
    (pretraining_loss(ours * 1, targets, tp_group=layout.tp_group).loss * scale).backward()
    assert ours.grad.dtype == torch.float16
    got = ours.grad.float()
    assert ((got == 0) & (rounded != 0)).sum() == 0
    normal = torch.finfo(torch.float16).tiny
    unit = torch.exp2(torch.floor(torch.log2(rounded.abs().clamp(min=normal))) - 10)  # fp16: 11 significant bits
    assert ((got - rounded).abs() <= unit).all()
    assert (rounded.abs() < normal).sum() > 1000  # the case is exercised: many subnormal entries
