"""DP=2 under ZeRO-2 and ZeRO-3 (built partitioned, also beside TP=2) computes what one process
computes with the same global batch."""

import contextlib

import pytest
import torch

from bert_ds.training.config.args import parse_args
from tests.support.helpers import run_on_ranks, synthetic_batch

VOCAB = 128
MICRO = 4


def _global_batch():
    return [synthetic_batch(VOCAB, batch=MICRO, seq=32, seed=s) for s in (1, 2)]


def _full_weights(model, layout) -> dict:
    """Every parameter at full size: ZeRO-3 partitions gathered, TP slices concatenated."""
    import deepspeed

    from bert_ds.runtime.partitioned import is_partitioned
    from bert_ds.model.sharding import gather_full_tensors

    params = list(model.parameters())
    partitioned = [p for p in params if is_partitioned(p)]
    with deepspeed.zero.GatheredParameters(partitioned) if partitioned else contextlib.nullcontext():
        # No rank of a ZeRO-3 model holds its partitioned tensors outside this context.
        assert not partitioned or all(p.numel() > 0 for p in partitioned)
        local = {name: p.detach().clone() for name, p in model.named_parameters()}
    return gather_full_tensors(model, local, layout.tp_group)


def _worker(rank, out_dir, world, zero_stage, tp):
    from bert_ds.training import job
    from bert_ds.training.plan.resolve import run_model_config
    from bert_ds.training.loop.steps import plain_step, reduce_step_results

    run = parse_args([
        "--preset", "tiny", "--global-batch-size", str(2 * MICRO), "--micro-batch-size", str(MICRO),
        "--zero-stage", str(zero_stage), "--dropout", "0", "--warmup-steps", "0", "--train-steps", "10",
        "--tensor-parallel", str(tp),
    ])
    # The engine's own setup; a vocabulary of 128 needs no padding, so no tokenizer is needed.
    model_config = run_model_config(run, VOCAB)
    layout = job.setup_parallel(run, model_config)
    engine, model, _ = job.setup_engine(run, model_config, layout)
    if zero_stage == 3:  # built partitioned: the embedding matrix (over the persistence threshold) is split
        assert model.bert.embeddings.word_embeddings.weight.numel() == 0
    before = _full_weights(model, layout)
    halves = _global_batch()
    dp = world // tp
    mine = halves if dp == 1 else [halves[layout.dp_rank]]  # one process accumulates both halves
    result = plain_step(engine, iter(mine), accumulation=len(mine), layout=layout)
    total = reduce_step_results(result, layout, pipeline=False)
    weights = _full_weights(model, layout)
    if rank == 0:
        torch.save(dict(loss=total.loss / total.micro_batches, weights=weights, before=before), f"{out_dir}/world{world}.pt")


@pytest.mark.parametrize("zero_stage, tp", [(2, 1), (3, 1), (3, 2)])
def test_dp2_zero_step_equals_one_process(tmp_path, zero_stage, tp):
    run_on_ranks(_worker, 1, str(tmp_path), 1, 0, 1)
    run_on_ranks(_worker, 2 * tp, str(tmp_path), 2 * tp, zero_stage, tp)
    one, two = (torch.load(tmp_path / f"world{w}.pt") for w in (1, 2 * tp))
    assert one["loss"] == pytest.approx(two["loss"], abs=1e-6)
    assert one["weights"].keys() == two["weights"].keys()
    moved = 0
    for name, weight in one["weights"].items():
        torch.testing.assert_close(two["weights"][name], weight, atol=1e-6, rtol=1e-5, msg=name)
        torch.testing.assert_close(two["before"][name], one["before"][name], atol=0, rtol=0, msg=name)
        moved += bool((weight - one["before"][name]).abs().max() > 1e-5)
    assert moved >= len(one["weights"]) - 2  # the update happened (pooler/NSP may barely move)
