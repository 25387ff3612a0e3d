"""Our post-LN model with Hugging Face's weights computes Hugging Face's BertForPreTraining; our
learning-rate schedule is the one Hugging Face (and Google's BERT, and Megatron-LM) step by."""

import pytest
import torch
from transformers import BertConfig, BertForPreTraining

from bert_ds.checkpoint.hf_weights import bert_ds_to_hf, hf_to_bert_ds, model_config_from_hf
from bert_ds.model import build_model
from tests.support.helpers import synthetic_batch


@pytest.fixture(scope="module")
def hf_model():
    hf_config = BertConfig(
        vocab_size=96,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        hidden_act="gelu",
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    return BertForPreTraining(hf_config).eval()


def test_logits_match_hugging_face(layout, hf_model):
    config = model_config_from_hf(hf_model.config)
    model = build_model(config, layout).eval()
    model.load_state_dict(hf_to_bert_ds(hf_model.state_dict(), config), strict=True)
    batch = synthetic_batch(config.vocab_size, batch=4, seq=24, seed=7)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], real)
        theirs = hf_model(
            input_ids=batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
        )
    # MLM logits at every real position (we decode only the positions asked for).
    torch.testing.assert_close(ours.mlm_logits, theirs.prediction_logits[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.nsp_logits, theirs.seq_relationship_logits, atol=1e-4, rtol=1e-4)
    assert ours.mlm_logits.abs().max() > 1e-3  # not a trivially zero comparison


def test_weight_names_round_trip(layout, hf_model):
    config = model_config_from_hf(hf_model.config)
    original = hf_model.state_dict()
    back = bert_ds_to_hf(hf_to_bert_ds(original, config), config)
    assert set(back) == set(original)
    for name, tensor in original.items():
        assert torch.equal(back[name], tensor), name


def test_pre_ln_has_no_hugging_face_counterpart(hf_model):
    config = model_config_from_hf(hf_model.config, layer_norm_position="pre")
    with pytest.raises(ValueError, match="pre-LN"):
        hf_to_bert_ds(hf_model.state_dict(), config)


@pytest.mark.parametrize("warmup, total", [(4, 10), (1, 5), (0, 6), (30, 300)])
def test_lr_schedule_is_hugging_faces_step_for_step(warmup, total):
    """The learning-parity benchmark found our warm-up one step ahead of the references' (the first
    step at lr/W instead of 0): every step of the schedule now equals transformers'."""
    from transformers import get_linear_schedule_with_warmup

    from bert_ds.training.engine.optim import OptimizerSettings, build_scheduler

    def lrs(scheduler_of) -> list[float]:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        scheduler, seen = scheduler_of(optimizer), []
        for _ in range(total + 2):
            seen.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return seen

    ours = lrs(build_scheduler(OptimizerSettings(lr=1e-3, warmup_steps=warmup, total_steps=total)))
    theirs = lrs(lambda optimizer: get_linear_schedule_with_warmup(optimizer, warmup, total))
    assert ours == pytest.approx(theirs, abs=1e-12)
    assert max(ours) == pytest.approx(1e-3)
