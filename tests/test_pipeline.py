"""Invariant 1 for pipeline stages: PP=2 (DeepSpeed PipelineModule, 2 real processes on gloo)
computes what the plain PP=1 BertForPretraining computes, with the same weights moved by name."""

from typing import NamedTuple

import deepspeed
import pytest
import torch

from bert_ds.config import model_preset
from bert_ds.runtime.distributed import init_parallel
from bert_ds.model import build_model
from bert_ds.model.loss import pretraining_loss
from bert_ds.model.sharding import gather_full_tensors
from bert_ds.model.pipeline import full_to_pipeline_state_dict, pipeline_to_full_names
from bert_ds.model.selection import PADDING_TARGET, ROW_MULTIPLE
from bert_ds.training.engine.pipeline_loss import PretrainingLossFn, last_stage_metrics, pipeline_batch
from bert_ds.training.loop.steps import read_on_host
from tests.support.helpers import run_on_ranks, synthetic_batch
from tests.support.host_reads import HostReads

VOCAB, MICRO_BATCH = 128, 3
# How a stage would learn the number of predicted rows from the device (a GPU stall per micro-batch).
ROW_SELECTION_READS = {"aten.index[bool]", "aten.nonzero", "aten.masked_select"}


class Case(NamedTuple):
    layer_norm_position: str
    causal: bool = False
    micro_batches: int = 1
    with_nsp: bool = True
    zero_stage: int = 0
    gradient_clipping: float = 0.0  # DeepSpeed's default is 1.0
    tensor_parallel: int = 1
    pipeline_parallel: int = 2
    activation_checkpointing: bool = False


CASES = {
    "post": Case("post"),
    # ZeRO-1's clipping norm skips the last stage's copy of the tied embedding (ds_pipe_replicated), so
    # it equals the plain model's norm. ZeRO-0's fp32 clipping does not (it counts stage 0 plus only
    # the tensor-parallel parameters of later stages), so clipping stays off in the ZeRO-0 cases.
    "pre_causal_zero1_clip": Case("pre", causal=True, zero_stage=1, gradient_clipping=1.0),
    "post_2_micro_batches_zero1_recompute": Case("post", micro_batches=2, zero_stage=1, activation_checkpointing=True),
    "pre_mlm_only_2_micro_batches": Case("pre", micro_batches=2, with_nsp=False),
    # One stage holding everything (the tied spec reuses BertEmbeddings), vocabulary split over TP=2.
    "post_tp2_pp1": Case("post", tensor_parallel=2, pipeline_parallel=1),
}
PP2_CASES = [name for name, case in CASES.items() if case.pipeline_parallel == 2]


def _plain_reference(config, batches, with_nsp):
    """PP=1 losses averaged over the micro-batches, their mean gradients, and the full weights."""
    layout = init_parallel(config, tensor_parallel=1, pipeline_parallel=1, seed=11)
    model = build_model(config, layout, with_nsp=with_nsp)
    means = {}
    for batch in batches:
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["loss_mask"])
        losses = pretraining_loss(
            out.mlm_logits, batch["labels"][batch["loss_mask"]], out.nsp_logits, batch.get("next_sentence_label"),
            tp_group=layout.tp_group,
        )
        (losses.loss / len(batches)).backward()  # gradients accumulate to the micro-batch mean
        for name in ("loss", "mlm_loss", "nsp_loss"):
            if getattr(losses, name) is not None:
                means[name] = means.get(name, 0.0) + getattr(losses, name).item() / len(batches)
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return means, grads, model.state_dict()


def _pipeline_run(config, batches, case, full):
    """train_batch over the same micro-batches, starting from the plain model's weights.

    The optimizer is SGD with lr 1, so each weight's change is minus the gradient DeepSpeed applied
    (after its tied all-reduce, micro-batch averaging and clipping), whatever the ZeRO stage.
    """
    # Another seed: the weights come from the load.
    layout = init_parallel(config, case.tensor_parallel, case.pipeline_parallel, seed=99)
    pipe = build_model(config, layout, with_nsp=case.with_nsp, pipeline_loss=PretrainingLossFn(layout.tp_group))
    pipe.load_state_dict(full_to_pipeline_state_dict(full, pipe))
    before = {name: p.detach().clone() for name, p in pipe.named_parameters()}
    engine, *_ = deepspeed.initialize(
        model=pipe,
        optimizer=torch.optim.SGD(pipe.parameters(), lr=1.0),
        config={
            "train_micro_batch_size_per_gpu": MICRO_BATCH,
            "gradient_accumulation_steps": len(batches),
            "train_batch_size": MICRO_BATCH * len(batches),
            "gradient_clipping": case.gradient_clipping,
            "zero_optimization": {"stage": case.zero_stage},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
        },
    )
    fed = [pipeline_batch(read_on_host(batch)[0]) for batch in batches]
    with HostReads() as reads:
        loss = engine.train_batch(iter(fed))
    applied = {name: before[name] - p.detach() for name, p in pipe.named_parameters()}  # TP slices
    names = pipeline_to_full_names(pipe)
    full_grads = gather_full_tensors(pipe, applied, layout.tp_group)
    return dict(
        loss=loss.item(),
        metrics=last_stage_metrics(pipe),
        row_selection_reads=[name for name in reads.names if name in ROW_SELECTION_READS],
        grads={names[name]: grad for name, grad in full_grads.items()},
    )


def _pipeline_worker(rank, out_dir):
    results = {}
    for name, case in CASES.items():
        config = model_preset(
            "tiny",
            vocab_size=VOCAB,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            layer_norm_position=case.layer_norm_position,
            causal=case.causal,
            activation_checkpointing=case.activation_checkpointing,
        )
        batches = [synthetic_batch(VOCAB, batch=MICRO_BATCH, seed=7 + i) for i in range(case.micro_batches)]
        if not case.with_nsp:
            for batch in batches:
                del batch["next_sentence_label"]
        ref_losses, ref_grads, full = _plain_reference(config, batches, case.with_nsp)
        pipe = _pipeline_run(config, batches, case, full)
        results[name] = dict(ref_losses=ref_losses, ref_grads=ref_grads, pipe=pipe)
    torch.save(results, f"{out_dir}/rank{rank}.pt")


@pytest.fixture(scope="module")
def pipe_results(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("pipe")
    run_on_ranks(_pipeline_worker, 2, str(out_dir))
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("scenario", CASES)
@pytest.mark.parametrize("rank", [0, 1])
def test_pp2_loss_equals_pp1(pipe_results, scenario, rank):
    """train_batch returns the mean micro-batch loss, broadcast to both stages."""
    result = pipe_results[rank][scenario]
    assert result["pipe"]["loss"] == pytest.approx(result["ref_losses"]["loss"], abs=1e-5)


@pytest.mark.parametrize("scenario", CASES)
@pytest.mark.parametrize("rank", [0, 1])
def test_no_stage_reads_the_predicted_rows_from_the_device(pipe_results, scenario, rank):
    """The last stage selects the predicted rows by positions read on the host (they come with the
    labels), as a plain step does: no boolean indexing or nonzero inside train_batch."""
    assert pipe_results[rank][scenario]["pipe"]["row_selection_reads"] == []


@pytest.mark.parametrize("scenario", PP2_CASES)
def test_last_stage_metrics_equal_pp1(pipe_results, scenario):
    first, last = pipe_results[0][scenario], pipe_results[1][scenario]
    assert first["pipe"]["metrics"] is None  # stage 0 computes no loss
    metrics, ref = last["pipe"]["metrics"], last["ref_losses"]
    for name in ("loss", "mlm_loss", "nsp_loss"):
        if name in ref:
            assert metrics[name] == pytest.approx(ref[name], abs=1e-5), name
        else:
            assert metrics[name] is None, name
    assert 0.0 <= metrics["mlm_accuracy"] <= 1.0


@pytest.mark.parametrize("scenario", CASES)
@pytest.mark.parametrize("rank", [0, 1])
def test_pp2_gradients_equal_pp1(pipe_results, scenario, rank):
    """Every parameter of each stage, the tied word embedding included: after DeepSpeed's tied
    all-reduce both copies get the full gradient (embedding lookup + MLM decoder)."""
    result = pipe_results[rank][scenario]
    grads, ref_grads = result["pipe"]["grads"], result["ref_grads"]
    clip = CASES[scenario].gradient_clipping
    if clip > 0:  # DeepSpeed clips by the factor clip / (norm + 1e-6) where that is below 1
        norm = torch.stack([g.norm() for g in ref_grads.values()]).norm().item()
        assert norm > clip, "the clipping case must actually clip"
        ref_grads = {name: g * (clip / (norm + 1e-6)) for name, g in ref_grads.items()}
    assert "bert.embeddings.word_embeddings.weight" in grads
    for name, grad in grads.items():
        assert grad.abs().sum() > 0, f"{name} received no gradient"
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("scenario", PP2_CASES)
def test_stages_split_the_weights_and_share_only_the_tied_one(pipe_results, scenario):
    first = set(pipe_results[0][scenario]["pipe"]["grads"])
    last = set(pipe_results[1][scenario]["pipe"]["grads"])
    assert first & last == {"bert.embeddings.word_embeddings.weight"}
    assert first | last == set(pipe_results[0][scenario]["ref_grads"])  # every plain weight, by name
    # Embeddings and the first layer on stage 0; the second layer and the heads on stage 1.
    assert "bert.embeddings.position_embeddings.weight" in first
    assert any(n.startswith("bert.encoder.layers.0.") for n in first)
    assert not any(n.startswith("bert.encoder.layers.1.") for n in first)
    assert any(n.startswith("bert.encoder.layers.1.") for n in last)
    assert {"lm_head.dense.weight", "lm_head.decoder.bias"} <= last
    with_nsp = CASES[scenario].with_nsp
    assert ("nsp_head.weight" in last) == with_nsp and ("bert.pooler.dense.weight" in last) == with_nsp


def test_pipeline_batch_splits_inputs_and_labels():
    batch = synthetic_batch(VOCAB, batch=2, seq=8)
    inputs, labels = pipeline_batch(read_on_host(batch)[0])
    assert [t.dtype for t in inputs] == [torch.long] * 3  # the mask as an integer: no gradient crosses
    assert torch.equal(inputs[2].bool(), batch["attention_mask"].bool())
    # The predicted positions travel with the labels, padded to a repeating row count: the stages
    # exchange fixed shapes, and the last stage selects rows without reading the device.
    positions, targets = labels[0], labels[1]
    real = int(batch["loss_mask"].sum())
    assert positions.numel() % ROW_MULTIPLE == 0 and positions.numel() >= real
    assert torch.equal(positions[:real], batch["loss_mask"].flatten().nonzero().squeeze(1))
    assert torch.equal(targets[:real], batch["labels"][batch["loss_mask"]])
    assert bool((targets[real:] == PADDING_TARGET).all())
    assert labels[2] is batch["next_sentence_label"]
    del batch["next_sentence_label"]
    assert len(pipeline_batch(read_on_host(batch)[0])[1]) == 2
