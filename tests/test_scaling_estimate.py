"""The scaling estimate a GPU launch plan prints (bert_ds/training/plan/scaling.py): bytes per rank per
step by parallelism, which groups cross nodes, and the predicted step time."""

import subprocess
import sys

import pytest

from bert_ds.config import model_preset
from bert_ds.training.plan.scaling import Interconnect, comm_volume, estimate
from tests.support.helpers import REPO

LARGE = model_preset("large", vocab_size=30_592)
H = LARGE.hidden_size


def test_volumes_follow_each_parallelisms_collectives():
    # TP2 x PP2 x DP2, 4 micro batches of 8 x 128, bf16, ZeRO-1, 1e8 parameters on the heaviest rank.
    volume = comm_volume(LARGE, seq=128, micro=8, accumulation=4, tp=2, pp=2, dp=2, zero_stage=1, element_bytes=2,
                         parameters_per_rank=100_000_000)
    activation = 8 * 128 * H * 2
    # 12 layers per stage, 4 all-reduces each, one for the stage's embedding or decoder; plus the
    # all-gather of the TP parts of the tensor the stage received, per micro batch.
    assert volume.tp == pytest.approx(4 * ((4 * 12 + 1) * 1.0 + 0.5) * activation)
    # An edge stage sends one tensor per micro batch, split over the TP ranks, and the tied word
    # embeddings' gradient (V x h / TP) once per step.
    assert volume.pp == pytest.approx(4 * activation / 2 + LARGE.vocab_size * H / 2 * 2)
    assert volume.dp == pytest.approx(1.5 * 2e8)  # ZeRO-1: all-reduce (2 (DP-1)/DP) + all-gather ((DP-1)/DP)
    # ZeRO-0 only all-reduces; ZeRO-2 all-reduces after every micro batch (as measured on gloo);
    # ZeRO-3 gathers the weights twice per micro batch and reduce-scatters its gradients.
    kwargs = dict(seq=128, micro=8, accumulation=4, tp=1, pp=1, dp=4, element_bytes=2, parameters_per_rank=10**8)
    zero0, zero2, zero3 = (comm_volume(LARGE, zero_stage=stage, **kwargs).dp for stage in (0, 2, 3))
    assert zero0 == pytest.approx(1.5 * 2e8)
    assert zero2 == pytest.approx(9 * 0.75 * 2e8) and zero3 == pytest.approx(12 * 0.75 * 2e8)
    assert comm_volume(LARGE, zero_stage=1, **{**kwargs, "dp": 1}).total == 0  # one rank sends nothing


def test_groups_cross_nodes_by_the_topologys_rank_order():
    link = Interconnect(gpus_per_node=8, intra_node_gb_s=400, inter_node_gb_s=40, gpu_tflops=100)
    common = dict(seq=128, micro=4, accumulation=2, zero_stage=1, element_bytes=2, parameters_per_rank=10**8, with_nsp=True)
    inside = estimate(LARGE, tp=2, pp=1, dp=4, link=link, **common)
    assert inside.crosses_nodes == {"TP": False, "DP": False, "PP": False}
    spread = estimate(LARGE, tp=2, pp=2, dp=8, link=link, **common)
    assert spread.crosses_nodes == {"TP": False, "DP": True, "PP": True}
    assert spread.dp_s == pytest.approx(spread.volume.dp / 40e9) and spread.tp_s == pytest.approx(spread.volume.tp / 400e9)
    assert spread.bubble == pytest.approx(1 / 3)  # (m + PP - 1) / m with m = 2
    assert spread.step_s == pytest.approx(spread.compute_s + spread.tp_s + spread.pp_s + spread.dp_s)


def test_a_gpu_dry_run_prints_the_estimate_and_takes_the_interconnect_flags():
    command = [sys.executable, "bert_ds/pretrain.py", "--dry-run", "gpu", "--world-size", "64", "--preset", "large",
               "--tensor-parallel", "2", "--data", "sample", "--tokenizer", "bert-base-uncased",
               "--inter-node-bandwidth", "25", "--gpu-tflops", "200"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "scaling    | each rank sends per step: TP " in result.stdout and "DP " in result.stdout
    assert "(network 25 GB/s)" in result.stdout and "(200 TFLOP/s per GPU)" in result.stdout
    bad = subprocess.run(command + ["--gpu-tflops", "0"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and "--gpu-tflops must be > 0, got 0.0" in bad.stderr
