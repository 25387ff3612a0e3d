"""bert_ds's own fp32 masters for one-replica bf16 runs (training/engine/master_weights.py): the
step matches fp32 AdamW with torch's clipping, gradients accumulate in fp32, a non-finite step
changes nothing, the state round-trips, and the DeepSpeed config picks it only for one replica."""

from __future__ import annotations

import pytest
import torch

from bert_ds.training.config.batch_plan import BatchPlan
from bert_ds.training.engine.ds_config import build_deepspeed_config
from bert_ds.training.engine.master_weights import MasterWeightsOptimizer


def _pair(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    reference.load_state_dict(model.state_dict())
    return model, reference


def _masters(model, max_norm: float, fused: bool = True, lr: float = 1e-2) -> MasterWeightsOptimizer:
    groups = [dict(params=[p for n, p in model.named_parameters() if n.endswith("weight")], weight_decay=0.01),
              dict(params=[p for n, p in model.named_parameters() if n.endswith("bias")], weight_decay=0.0)]
    return MasterWeightsOptimizer.over(model, groups, max_norm, lambda g: torch.optim.AdamW(g, lr=lr, fused=fused))


@pytest.mark.parametrize("fused", [True, False], ids=["fused-adamw", "foreach-adamw"])
def test_steps_follow_fp32_adamw_with_clipping(fused):
    """bf16 forward/backward, fp32 masters: the masters stay within bf16 rounding of an fp32 AdamW
    with torch's clip_grad_norm_ over the same batches, and the model holds their bf16 rounding."""
    model, reference = _pair()
    masters = _masters(model, max_norm=0.1, fused=fused)
    plain = torch.optim.AdamW([{"params": [p for n, p in reference.named_parameters() if n.endswith("weight")], "weight_decay": 0.01},
                               {"params": [p for n, p in reference.named_parameters() if n.endswith("bias")], "weight_decay": 0.0}],
                              lr=1e-2)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    data = torch.randn(6, 8, 16)
    for batch in data:
        model(batch.bfloat16()).float().pow(2).mean().backward()
        assert all(p.grad is None for p in model.parameters())  # moved into the fp32 accumulators
        masters.step()
        reference(batch).pow(2).mean().backward()
        norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.1)
        plain.step()
        plain.zero_grad()
        assert masters._global_grad_norm == pytest.approx(float(norm), rel=0.02)
        assert masters._global_grad_norm > 0.1  # clipping was active
    for master, expected, param in zip((m for g in masters.fp32_groups for m in g),
                                       [p for n, p in reference.named_parameters() if n.endswith("weight")]
                                       + [p for n, p in reference.named_parameters() if n.endswith("bias")],
                                       (p for g in masters.fp16_groups for p in g)):
        assert master.dtype == torch.float32
        torch.testing.assert_close(master, expected.detach(), atol=3e-3, rtol=0)
        assert torch.equal(param, master.to(torch.bfloat16))


def test_micro_batches_accumulate_in_fp32():
    """Gradients of 1 and 2^-9 sum to 1 + 2^-9 in the fp32 accumulator; in bf16 (8 significant
    bits) the second micro batch would be lost."""
    weight = torch.nn.Parameter(torch.ones(3))
    model = torch.nn.Module()
    model.weight = weight
    masters = MasterWeightsOptimizer.over(model, [dict(params=[weight], weight_decay=0.0)], 0.0,
                                          lambda g: torch.optim.AdamW(g, lr=1e-3, fused=True))
    for scale in (1.0, 2.0 ** -9):
        (weight * scale).float().sum().backward()
    accumulated = masters.fp32_groups[0][0].grad
    assert torch.equal(accumulated, torch.full((3,), 1.0 + 2.0 ** -9))
    assert torch.equal(accumulated.to(torch.bfloat16), torch.ones(3, dtype=torch.bfloat16))  # bf16 would drop it


def test_a_non_finite_gradient_skips_the_step():
    model, _ = _pair()
    masters = _masters(model, max_norm=1.0)
    before = [m.clone() for g in masters.fp32_groups for m in g]
    weights = [p.clone() for p in model.parameters()]
    model(torch.full((2, 16), float("inf")).bfloat16()).float().sum().backward()
    masters.step()
    assert masters.overflow
    assert all(torch.equal(a, b) for a, b in zip(before, (m for g in masters.fp32_groups for m in g)))
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))
    assert all(m.grad is None for g in masters.fp32_groups for m in g)  # nothing carries into the next step
    model(torch.randn(2, 16).bfloat16()).float().sum().backward()
    masters.step()
    assert not masters.overflow and masters.optimizer.state  # the next step is taken


def test_the_state_round_trips_through_a_state_dict():
    """What a checkpoint holds (FP16_UnfusedOptimizer's layout) restores masters, moments and weights."""
    model, _ = _pair()
    masters = _masters(model, max_norm=1.0)
    for seed in range(3):
        torch.manual_seed(seed)
        model(torch.randn(4, 16).bfloat16()).float().sum().backward()
        masters.step()
    saved = masters.state_dict()
    assert set(saved) == {"fp32_groups", "optimizer_state_dict"}
    saved = {k: (torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, v)) for k, v in saved.items()}
    other, _ = _pair(seed=5)
    restored = _masters(other, max_norm=1.0)
    restored.load_state_dict(saved)
    for a, b in zip((m for g in masters.fp32_groups for m in g), (m for g in restored.fp32_groups for m in g)):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))
    torch.manual_seed(9)
    batch = torch.randn(4, 16).bfloat16()
    for m in (model, other):
        m(batch).float().sum().backward()
    masters.step()
    restored.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))


@pytest.mark.parametrize("layout, zero_stage, own", [
    (dict(), None, True),                      # zero1.json's stage 1 partitions nothing at DP=1
    (dict(), 0, True),
    (dict(), 1, False),                        # asked for: DeepSpeed's ZeRO-1 masters
    (dict(data_parallel=2), None, False),      # several replicas: ZeRO partitions them
    (dict(tensor_parallel=2), None, False),
    (dict(pipeline_parallel=2), None, False),
])
def test_one_replica_bf16_keeps_its_own_masters(layout, zero_stage, own):
    dp = layout.get("data_parallel", 1)
    setup = build_deepspeed_config("zero1", BatchPlan(16 * dp, 8, dp), "cpu", zero_stage=zero_stage, precision="bf16",
                                   tensor_parallel=layout.get("tensor_parallel", 1),
                                   pipeline_parallel=layout.get("pipeline_parallel", 1))
    assert setup.keeps_own_masters == own
    assert setup.precision.name == "bf16"
    if own:
        assert setup.zero_stage == 0 and not setup.config["bf16"]["enabled"]
    else:
        assert setup.config["bf16"]["enabled"]
    fp32 = build_deepspeed_config("zero1", BatchPlan(16 * dp, 8, dp), "cpu", zero_stage=zero_stage, precision="fp32")
    assert not fp32.keeps_own_masters


def test_offloaded_and_zero3_bf16_keep_deepspeeds_masters():
    for name in ("zero2_offload", "zero3"):
        setup = build_deepspeed_config(name, BatchPlan(16, 8, 1), "cpu", precision="bf16")
        assert not setup.keeps_own_masters and setup.config["bf16"]["enabled"], name
