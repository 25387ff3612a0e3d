"""LAMB: the CPU optimizer computes what DeepSpeed's fused CUDA kernel computes (bias-corrected
step size, weight decay inside the trust ratio, the ratio clamped to [0.01, 10]), the GPU one is
built with the same settings and skips non-finite steps without ZeRO, and a kernel that cannot
be compiled is one clear error."""

import math

import numpy as np
import pytest
import torch

from bert_ds.errors import ConfigError
from bert_ds.training.engine.lamb import Lamb
from bert_ds.training.engine.optim import OptimizerSettings, SkipsNonFiniteSteps, optimizer_over

LR, BETAS, EPS, DECAY = 0.01, (0.9, 0.999), 1e-6, 0.01


def _kernel_reference(weights, grads_per_step, decay):
    """DeepSpeed's fused_lamb_cuda_kernel.cu, transcribed in float64: per tensor, reg_w and reg_u
    are the norms of w and of update = m / (sqrt(v) + eps) + decay * w; lamb_coeff = reg_w / reg_u
    clamped to [min_coeff, max_coeff] when both are non-zero, else 1; w -= step_size * lamb_coeff
    * update, with step_size = lr * sqrt(1 - beta2^t) / (1 - beta1^t)."""
    beta1, beta2 = BETAS
    w = [np.array(x, dtype=np.float64) for x in weights]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    for t, grads in enumerate(grads_per_step, start=1):
        step_size = LR * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
        for i, g in enumerate(grads):
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            update = m[i] / (np.sqrt(v[i]) + EPS) + decay * w[i]
            reg_w, reg_u = np.sqrt((w[i] ** 2).sum()), np.sqrt((update ** 2).sum())
            coeff = min(max(reg_w / reg_u, 0.01), 10.0) if reg_w != 0 and reg_u != 0 else 1.0
            w[i] = w[i] - step_size * coeff * update
    return w


def test_cpu_lamb_steps_as_the_fused_kernel_does():
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(4, 3)) * 50.0,  # ||w|| / ||update|| above 10: clamped to 10
               rng.normal(size=(5,)) * 0.001,  # below 0.01: clamped to 0.01
               rng.normal(size=(6,)),  # in between: the ratio itself
               np.zeros(3)]  # a zero tensor: ratio 1
    grads_per_step = [[rng.normal(size=w.shape) for w in weights] for _ in range(4)]
    params = [torch.nn.Parameter(torch.tensor(w)) for w in weights]
    optimizer = Lamb(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=DECAY)
    for grads in grads_per_step:
        for param, grad in zip(params, grads):
            param.grad = torch.tensor(grad)
        optimizer.step()
    expected = _kernel_reference(weights, grads_per_step, DECAY)
    for param, want in zip(params, expected):
        np.testing.assert_allclose(param.detach().numpy(), want, rtol=1e-12, atol=1e-15)
    assert all(optimizer.state[p]["step"] == 4 for p in params)


def _fake_kernel(monkeypatch, load):
    from deepspeed.ops.op_builder import FusedLambBuilder

    monkeypatch.setattr(FusedLambBuilder, "load", load)


def test_gpu_lamb_that_cannot_be_compiled_is_one_clear_error(monkeypatch):
    def no_nvcc(self, *args, **kwargs):
        raise RuntimeError("Error building extension 'fused_lamb'\nnvcc: command not found")

    _fake_kernel(monkeypatch, no_nvcc)
    params = [{"params": [torch.nn.Parameter(torch.ones(2))], "weight_decay": 0.0}]
    with pytest.raises(ConfigError) as error:
        optimizer_over(OptimizerSettings(name="lamb"), params, "cuda")
    message = str(error.value)
    assert "nvcc: command not found" in message and "--optimizer adamw" in message and "\n" not in message


@pytest.mark.parametrize("zero_stage_0", [True, False])
def test_gpu_lamb_has_the_cpu_settings_and_skips_non_finite_steps_without_zero(monkeypatch, zero_stage_0):
    _fake_kernel(monkeypatch, lambda self, *args, **kwargs: object())
    settings = OptimizerSettings(name="lamb", lr=LR, eps=EPS)
    gpu = optimizer_over(settings, [{"params": [torch.nn.Parameter(torch.ones(2))], "weight_decay": DECAY}], "cuda",
                         skips_non_finite=zero_stage_0)
    cpu = optimizer_over(settings, [{"params": [torch.nn.Parameter(torch.ones(2))], "weight_decay": DECAY}], "cpu")
    assert type(gpu).__name__ != "Lamb" and isinstance(gpu, SkipsNonFiniteSteps) == zero_stage_0
    shared = ("lr", "betas", "eps", "weight_decay", "bias_correction", "max_coeff", "min_coeff")
    assert {k: gpu.param_groups[0][k] for k in shared} == {k: cpu.param_groups[0][k] for k in shared}
    assert gpu.eps_mode == 1  # eps outside the square root, as Lamb adds it
