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
