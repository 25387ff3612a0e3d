"""Keep freed host memory mapped, so CPU training does not page-fault its big buffers every step.

glibc's malloc serves every buffer above 32 MB with a fresh mmap and unmaps it on free, and trims
the heap whenever its free top grows past a threshold. A CPU training step allocates and frees the
same buffers each time (BERT-base's 94 MB embedding gradient and decoder weight gradient, the
activations), so every step pays first-touch page faults on them again: measured 4% of a base
step on 2 cores (the decoder's weight-gradient multiply alone went from 61 to 28 ms). Telling malloc
to serve everything from its heap and never trim it makes later steps reuse earlier steps' pages
(from the third step on, at base). The cost is footprint: the process keeps its peak, and aligned
allocations leave holes in the heap, so a base run stays about 170 MiB (5%) higher resident.
That is why it starts only after the model and engine are built, and only where ZeRO saves no
memory (see `tune_malloc_for_training`).
`BERT_DS_MALLOC_DEFAULTS=1` keeps malloc's own behaviour.

The same effect is what the usual advice (preloading jemalloc or tcmalloc) buys; this needs no
extra library and no environment set before the process starts. GPU runs keep malloc's defaults:
their big buffers live in the caching device allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt(3) parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_NEVER_TRIM = 2**31 - 1  # the largest value mallopt's int accepts


def keep_freed_memory_mapped() -> bool:
    """Make glibc's malloc reuse freed memory instead of returning it to the OS.

    Affects allocations made from now on; returns False (and changes nothing) where the C
    library is not glibc.
    """
    name = ctypes.util.find_library("c")
    if not name:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return False
    # mallopt returns 1 on success.
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))


def tune_malloc_for_training(device_type: str, zero_stage: int, data_parallel: int = 1) -> bool:
    """`keep_freed_memory_mapped()` for a run computing on `device_type` whose ZeRO stage saves no
    memory, called once the model and engine are built (their one-off buffers are then back with
    the OS).

    Nothing happens on GPUs, under ZeRO across several data-parallel ranks, or when the environment
    sets BERT_DS_MALLOC_DEFAULTS=1. ZeRO over DP > 1 is chosen to save memory, and its per-step
    flattening buffers leave holes in a heap that is never trimmed: +0.4 to +0.7 GiB peak per rank
    at base under ZeRO-1/2 (tests/bench/memory.py). At DP=1 ZeRO partitions nothing: a bf16 run
    keeps its stage only for DeepSpeed's fp32 masters, and there the tuning made a base step 15%
    faster (2.73 -> 2.31 s, 128 x 8, 2 threads, AMD EPYC with AVX512-BF16, 2026-12-01: the fp32
    gradient partition and the bf16 copy of the weights stop page-faulting every step).
    """
    from bert_ds.distributed import is_gpu

    partitions = zero_stage > 0 and data_parallel > 1
    if is_gpu(device_type) or partitions or os.environ.get("BERT_DS_MALLOC_DEFAULTS", "0") == "1":
        return False
    return keep_freed_memory_mapped()
