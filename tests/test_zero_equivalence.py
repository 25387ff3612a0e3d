"""DP=2 under ZeRO-2 computes what one process computes with the same global batch."""

from types import SimpleNamespace

import pytest
import torch

from bert_ds.training.args import parse_args
from tests.helpers import run_on_ranks, synthetic_batch

VOCAB = 128
MICRO = 4


def _global_batch():
    return [synthetic_batch(VOCAB, batch=MICRO, seq=32, seed=s) for s in (1, 2)]


def _worker(rank, out_dir, world, zero_stage):
    from bert_ds.training import job
    from bert_ds.training.steps import plain_step, reduce_step_results

    run = parse_args([
        "--preset", "tiny", "--global-batch-size", str(2 * MICRO), "--micro-batch-size", str(MICRO),
        "--zero-stage", str(zero_stage), "--dropout", "0", "--warmup-steps", "0", "--train-steps", "10",
    ])
    # The engine's own setup; a vocabulary of 128 needs no padding, so no tokenizer is needed.
    model_config, layout = job.setup_parallel(run, SimpleNamespace(vocab_size=VOCAB))
    engine, model, _ = job.setup_engine(run, model_config, layout)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    halves = _global_batch()
    mine = halves if world == 1 else [halves[rank]]  # one process accumulates both halves
    result = plain_step(engine, iter(mine), accumulation=len(mine), layout=layout)
    total = reduce_step_results(result, layout, pipeline=False)
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    if rank == 0:
        torch.save(dict(loss=total.loss / total.micro_batches, weights=weights, before=before), f"{out_dir}/world{world}.pt")


@pytest.mark.parametrize("zero_stage", [2])
def test_dp2_zero_step_equals_one_process(tmp_path, zero_stage):
    run_on_ranks(_worker, 1, str(tmp_path), 1, zero_stage)
    run_on_ranks(_worker, 2, str(tmp_path), 2, zero_stage)
    one, two = (torch.load(tmp_path / f"world{w}.pt") for w in (1, 2))
    assert one["loss"] == pytest.approx(two["loss"], abs=1e-6)
    assert one["weights"].keys() == two["weights"].keys()
    moved = 0
    for name, weight in one["weights"].items():
        torch.testing.assert_close(two["weights"][name], weight, atol=1e-6, rtol=1e-5, msg=name)
        torch.testing.assert_close(two["before"][name], one["before"][name], atol=0, rtol=0, msg=name)
        moved += bool((weight - one["before"][name]).abs().max() > 1e-5)
    assert moved >= len(one["weights"]) - 2  # the update happened (pooler/NSP may barely move)
