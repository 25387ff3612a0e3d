"""Activation checkpointing (ModelConfig.activation_checkpointing) changes memory, never results.

With dropout on, a checkpointed layer recomputes its forward in backward; both the default
generator (hidden dropout) and the tracker's model-parallel stream (attention dropout) must give
the recomputation the masks of the original forward, or the gradients would silently differ.
"""

import contextlib
import dataclasses
import time

import pytest
import torch

from bert_ds.config import model_preset
from bert_ds.model.megatron_config import transformer_config
from bert_ds.runtime.distributed import init_parallel
from bert_ds.model import build_model
from bert_ds.model import layers
from bert_ds.model.attention import SDPACoreAttention
from bert_ds.model.bert import BertForPretraining
from bert_ds.model.loss import pretraining_loss
from bert_ds.model.sharding import gather_full_tensors
from tests.support.helpers import run_on_ranks, synthetic_batch

VOCAB = 128
POSITIONS = ["post", "pre"]
NUM_LAYERS = model_preset("tiny").num_layers


def _config(position: str, checkpointing: bool):
    return model_preset(
        "tiny",
        vocab_size=VOCAB,
        hidden_dropout=0.1,
        attention_dropout=0.1,
        layer_norm_position=position,
        activation_checkpointing=checkpointing,
    )


def _model_pair(position: str, layout):
    """(plain, checkpointed) models of `position` holding the same weights."""
    torch.manual_seed(0)
    plain = build_model(_config(position, False), layout)
    checkpointed = build_model(_config(position, True), layout)
    checkpointed.load_state_dict(plain.state_dict())  # strict: the names must be identical
    return plain, checkpointed


def _train_step(model, batch, layout, tracker_states, seed=7):
    """One forward + backward in train mode from identical RNG states; (loss, grads by name)."""
    torch.manual_seed(seed)
    layout.rng_tracker.load_state_dict(tracker_states)
    model.train()
    model.zero_grad()
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["loss_mask"])
    loss = pretraining_loss(
        out.mlm_logits, batch["labels"][batch["loss_mask"]], out.nsp_logits, batch["next_sentence_label"],
        tp_group=layout.tp_group,
    ).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.fixture
def tracker_states(layout):
    """The tracker's states at the start of a test; restored afterwards for the other tests."""
    saved = layout.rng_tracker.state_dict()
    yield saved
    layout.rng_tracker.load_state_dict(saved)


def _assert_same_step(first, second):
    (loss_a, grads_a), (loss_b, grads_b) = first, second
    torch.testing.assert_close(loss_b, loss_a, atol=1e-6, rtol=0)
    assert grads_a.keys() == grads_b.keys()
    for name, grad in grads_a.items():
        torch.testing.assert_close(grads_b[name], grad, atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize("position", POSITIONS)
def test_checkpointing_gives_the_same_loss_and_gradients(layout, tracker_states, position):
    plain, checkpointed = _model_pair(position, layout)
    batch = synthetic_batch(VOCAB, seed=2)
    reference = _train_step(plain, batch, layout, tracker_states)
    # Dropout really is on: another seed draws other masks and another loss.
    assert not torch.equal(_train_step(plain, batch, layout, tracker_states, seed=8)[0], reference[0])
    _assert_same_step(reference, _train_step(checkpointed, batch, layout, tracker_states))


@pytest.mark.parametrize("position", POSITIONS)
def test_tracker_replay_is_what_makes_gradients_match(layout, tracker_states, position, monkeypatch):
    plain, checkpointed = _model_pair(position, layout)
    batch = synthetic_batch(VOCAB, seed=2)
    reference = _train_step(plain, batch, layout, tracker_states)
    state_after_plain = layout.rng_tracker.state_dict()

    # With the replay, the recomputation puts the live stream back: the stream ends where a
    # step without checkpointing leaves it (the next step draws fresh masks, not these again).
    _train_step(checkpointed, batch, layout, tracker_states)
    after = layout.rng_tracker.state_dict()
    assert after.keys() == state_after_plain.keys()
    assert all(torch.equal(after[name], state) for name, state in state_after_plain.items())

    # Without it, recomputed attention dropout draws new masks and the gradients go wrong.
    no_replay = lambda rng_tracker: (contextlib.nullcontext(), contextlib.nullcontext())  # noqa: E731
    monkeypatch.setattr(layers, "tracker_checkpoint_contexts", no_replay)
    loss, grads = _train_step(checkpointed, batch, layout, tracker_states)
    torch.testing.assert_close(loss, reference[0], atol=1e-6, rtol=0)  # the forward is unchanged
    qkv = "bert.encoder.layers.0.self_attention.linear_qkv.weight"
    assert not torch.allclose(grads[qkv], reference[1][qkv], atol=1e-6, rtol=0)


def _count_core_attention_calls(model, batch, layout, tracker_states, train: bool) -> int:
    calls = []
    hooks = [
        module.register_forward_hook(lambda *_: calls.append(1))
        for module in model.modules()
        if isinstance(module, SDPACoreAttention)
    ]
    assert len(hooks) == NUM_LAYERS
    try:
        if train:
            _train_step(model, batch, layout, tracker_states)
        else:
            model.eval()
            inputs = (batch[key] for key in ("input_ids", "token_type_ids", "attention_mask", "loss_mask"))
            model(*inputs).mlm_logits.sum().backward()
    finally:
        for hook in hooks:
            hook.remove()
    return len(calls)


@pytest.mark.parametrize("position", POSITIONS)
def test_checkpointing_recomputes_each_layer_once_in_training_only(layout, tracker_states, position):
    plain, checkpointed = _model_pair(position, layout)
    batch = synthetic_batch(VOCAB, seed=2)

    def count(model, train):
        return _count_core_attention_calls(model, batch, layout, tracker_states, train)

    assert count(plain, train=True) == NUM_LAYERS
    assert count(checkpointed, train=True) == 2 * NUM_LAYERS  # forward + recomputation in backward
    assert count(checkpointed, train=False) == NUM_LAYERS


def test_parameter_names_are_megatrons_for_pre_ln(layout):
    """PreLNTransformerLayer only wraps the forward: its state_dict keys are megatron's own."""
    config = _config("pre", True)
    ours = build_model(config, layout)
    core_attention = ours.bert.encoder.layers[0].self_attention.core_attention
    assert isinstance(ours.bert.encoder.layers[0], layers.PreLNTransformerLayer)
    spec = dataclasses.replace(
        layers.pre_ln_layer_spec(type(core_attention)), module=layers.TransformerLayer, params={}
    )
    megatrons = BertForPretraining(
        config, transformer_config(config), spec, pg_collection=layout.pg_collection
    )
    assert list(ours.state_dict()) == list(megatrons.state_dict())


def _tp2_worker(rank, out_dir):
    results = {}
    batch = synthetic_batch(VOCAB, seed=4)
    for position in POSITIONS:
        layout = init_parallel(_config(position, False), tensor_parallel=2, seed=21)
        plain, checkpointed = _model_pair(position, layout)
        tracker_states = layout.rng_tracker.state_dict()
        steps = [_train_step(model, batch, layout, tracker_states) for model in (plain, checkpointed)]
        results[position] = [
            (loss, gather_full_tensors(model, grads, layout.tp_group))
            for model, (loss, grads) in zip((plain, checkpointed), steps)
        ]
    torch.save(results, f"{out_dir}/rank{rank}.pt")


def test_tp2_checkpointing_gives_the_same_loss_and_gradients(tmp_path):
    start = time.monotonic()
    run_on_ranks(_tp2_worker, 2, str(tmp_path))
    assert time.monotonic() - start < 30
    for rank in range(2):
        results = torch.load(tmp_path / f"rank{rank}.pt")
        for position in POSITIONS:
            plain, checkpointed = results[position]
            qkv = plain[1]["bert.encoder.layers.0.self_attention.linear_qkv.weight"]
            assert qkv.shape == (3 * 64, 64)  # gathered to full size
            _assert_same_step(plain, checkpointed)
