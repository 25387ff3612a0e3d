"""torch.profiler's per-op table of a step function, split into matrix multiplication and the rest
("non-matrix": element-wise work, dtype copies, norms, the optimizer). Used by step_profile.py and
train_throughput.py."""

from __future__ import annotations

MATRIX_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
              "aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
              "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention")


def op_table(step, steps: int) -> dict:
    """torch.profiler's per-op self time of `steps` calls of `step()`, per call: the total, the
    matrix multiplies' part, the rest ("non-matrix") and every op, largest first."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            step(i)
    rows = [(e.key, e.self_cpu_time_total / 1e6 / steps, e.count // steps) for e in prof.key_averages()]
    rows = sorted((r for r in rows if r[1] > 0), key=lambda r: -r[1])
    total = sum(seconds for _, seconds, _ in rows)
    matrix = sum(seconds for name, seconds, _ in rows if name in MATRIX_OPS)
    return dict(seconds_per_step=total, matrix_seconds=matrix, non_matrix_seconds=total - matrix,
                matrix_share=matrix / total, ops=[dict(op=n, seconds=s, calls=c) for n, s, c in rows])
