"""Build DeepSpeed's JIT ops once, before any job starts ranks.

On CPU DeepSpeed compiles its ops on first use (30-100 s each); two ranks compiling one at once
can abort a run, so `make install` builds them here, serially, into the torch-extensions cache.
On GPUs nothing is built ahead (DeepSpeed's CUDA ops build per kernel).
"""

from __future__ import annotations

import time


def prebuild() -> None:
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":
        print(f"prebuild_ops: accelerator {accelerator.device_name()!r}: nothing to build ahead")
        return
    # shm_comm: collectives on CPU; cpu_adam: the optimizer of ZeRO-Offload (ds_configs/zero2_offload).
    for name in ("ShareMemCommBuilder", "CPUAdamBuilder"):
        builder = accelerator.create_op_builder(name)
        if builder is None or not builder.is_compatible():
            print(f"prebuild_ops: DeepSpeed's {name} op is not buildable here; features needing it are unavailable")
            continue
        start = time.perf_counter()
        builder.load(verbose=False)
        print(f"prebuild_ops: DeepSpeed {builder.name} op ready ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    prebuild()
