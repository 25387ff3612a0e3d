"""Build DeepSpeed's JIT ops once, before any job starts ranks.

On CPU DeepSpeed compiles its shared-memory communication op on first use (60-100 s); two ranks
compiling it at once can abort a run, so `make install` builds it here, serially, into the
torch-extensions cache. On GPUs nothing is built ahead (DeepSpeed's CUDA ops build per kernel).
"""

from __future__ import annotations

import time


def prebuild() -> None:
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":
        print(f"prebuild_ops: accelerator {accelerator.device_name()!r}: nothing to build ahead")
        return
    builder = accelerator.create_op_builder("ShareMemCommBuilder")
    if builder is None or not builder.is_compatible():
        print("prebuild_ops: DeepSpeed's shm_comm op is not buildable here; DeepSpeed falls back to gloo")
        return
    start = time.perf_counter()
    builder.load(verbose=False)
    print(f"prebuild_ops: DeepSpeed shm_comm op ready ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    prebuild()
