"""torch.profiler's per-op table of a step function, split into matrix multiplication and the rest
("non-matrix": element-wise work, dtype copies, norms, the optimizer). Used by step_profile.py and
train_throughput.py. On a GPU the table is of device time (each kernel's time counted once, at the
op that launched it), which is what a GPU step costs; on a CPU, of the ops' own CPU time."""

from __future__ import annotations

MATRIX_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
              "aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
              "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention",
              "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
              "aten::_flash_attention_backward", "aten::_efficient_attention_forward",
              "aten::_efficient_attention_backward", "aten::_scaled_dot_product_cudnn_attention_backward")


def op_table(step, steps: int) -> dict:
    """torch.profiler's per-op self time of `steps` calls of `step()`, per call: the total, the
    matrix multiplies' part, the rest ("non-matrix") and every op, largest first."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from bert_ds.runtime.device import device, synchronize

    gpu = device().type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with torch_profile(activities=activities) as prof:
        for i in range(steps):
            step(i)
        synchronize()
    if gpu:  # the ops (CPU-side events) with the device time of the kernels each launched itself
        rows = [(e.key, e.self_device_time_total / 1e6 / steps, e.count // steps) for e in prof.key_averages()
                if e.device_type == DeviceType.CPU]
    else:
        rows = [(e.key, e.self_cpu_time_total / 1e6 / steps, e.count // steps) for e in prof.key_averages()]
    rows = sorted((r for r in rows if r[1] > 0), key=lambda r: -r[1])
    total = sum(seconds for _, seconds, _ in rows)
    matrix = sum(seconds for name, seconds, _ in rows if name in MATRIX_OPS)
    return dict(seconds_per_step=total, matrix_seconds=matrix, non_matrix_seconds=total - matrix,
                matrix_share=matrix / total, time="device" if gpu else "cpu",
                ops=[dict(op=n, seconds=s, calls=c) for n, s, c in rows])
