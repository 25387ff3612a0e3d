"""The "+ BiLSTM" head's LSTM (bert_ds/model/bilstm.py) computes what a packed bidirectional
torch LSTM with the same weights computes: per-token outputs (zeros at padding), final states and
input gradients, for sequences of every length in one padded batch."""

import pytest
import torch

from bert_ds.model.bilstm import PaddedBiLSTM, reverse_real_tokens


def test_reversing_the_real_tokens_keeps_padding_in_place_and_undoes_itself():
    x = torch.arange(12).view(4, 3)  # [s=4, b=3]
    lengths = torch.tensor([4, 2, 1])
    reversed_ = reverse_real_tokens(x, lengths)
    assert reversed_.T.tolist() == [[9, 6, 3, 0], [4, 1, 7, 10], [2, 5, 8, 11]]
    torch.testing.assert_close(reverse_real_tokens(reversed_, lengths), x)


def _packed_reference(lstm: PaddedBiLSTM) -> torch.nn.LSTM:
    """torch's bidirectional LSTM holding the two directions' weights."""
    reference = torch.nn.LSTM(lstm.forward_lstm.input_size, lstm.hidden_size, bidirectional=True)
    with torch.no_grad():
        for name, _ in lstm.forward_lstm.named_parameters():
            getattr(reference, name).copy_(getattr(lstm.forward_lstm, name))
            getattr(reference, f"{name}_reverse").copy_(getattr(lstm.backward_lstm, name))
    return reference


@pytest.mark.parametrize("lengths", [[9, 9, 9], [9, 5, 1, 7]])
def test_outputs_final_states_and_gradients_equal_a_packed_bidirectional_lstm(lengths):
    torch.manual_seed(0)
    seq, hidden = 9, 6
    lstm = PaddedBiLSTM(8, hidden)
    reference = _packed_reference(lstm)
    lengths = torch.tensor(lengths)
    x = torch.randn(seq, len(lengths), 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)

    outputs, final = lstm(x, lengths)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x_ref, lengths, enforce_sorted=False)
    ref_outputs, (ref_final, _) = reference(packed)
    ref_outputs, _ = torch.nn.utils.rnn.pad_packed_sequence(ref_outputs, total_length=seq)
    torch.testing.assert_close(outputs, ref_outputs)
    torch.testing.assert_close(final, torch.cat([ref_final[0], ref_final[1]], dim=-1))

    weights = torch.randn_like(outputs)
    ((outputs * weights).sum() + final.sum()).backward()
    ((ref_outputs * weights).sum() + torch.cat([ref_final[0], ref_final[1]], -1).sum()).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert (x.grad[lengths[1]:, 1] == 0).all() if lengths[1] < seq else True  # padding gets no gradient
