"""How glibc's malloc treats a CPU run's big buffers: kept for reuse where ZeRO saves no memory,
returned to the OS where it partitions.

glibc's malloc serves every buffer above 32 MB with a fresh mmap and unmaps it on free, and trims
the heap whenever its free top grows past a threshold. A CPU training step allocates and frees the
same buffers each time (BERT-base's 94 MB embedding gradient and decoder weight gradient, the
activations), so every step pays first-touch page faults on them again: measured 4% of a base
step on 2 cores (the decoder's weight-gradient multiply alone went from 61 to 28 ms). Telling malloc
to serve everything from its heap and never trim it makes later steps reuse earlier steps' pages
(from the third step on, at base). The cost is footprint: the process keeps its peak, and aligned
allocations leave holes in the heap, so a base run stays about 170 MiB (5%) higher resident.
That is why it starts only after the model and engine are built, and only where ZeRO saves no
memory (see `tune_malloc_for_training`). Where ZeRO partitions over several ranks the opposite
holds: memory is the point, and buffers from 1 MiB up are returned to the OS on free
(`tune_malloc_for_partitioning`). `BERT_DS_MALLOC_DEFAULTS=1` keeps malloc's own behaviour.

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
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_NEVER_TRIM = 2**31 - 1  # the largest value mallopt's int accepts


# Buffers from this size up get their own mapping once memory is returned to the OS (see below).
_RETURNED_FROM_BYTES = 1 << 20


def _glibc():
    """The C library when it is glibc (mallopt's parameters are glibc's), else None."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return None
    return libc


def keep_freed_memory_mapped() -> bool:
    """Make glibc's malloc reuse freed memory instead of returning it to the OS.

    Affects allocations made from now on; returns False (and changes nothing) where the C
    library is not glibc.
    """
    libc = _glibc()
    # mallopt returns 1 on success.
    return libc is not None and bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))


def return_freed_memory() -> bool:
    """Make glibc's malloc give every buffer of 1 MiB or more its own mapping, returned to the OS
    when freed. Left to itself glibc raises that threshold to the largest buffer freed so far (up
    to 32 MiB), after which such buffers come from the heap, whose holes are never returned.

    Affects allocations made from now on; returns False (and changes nothing) where the C
    library is not glibc.
    """
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, _RETURNED_FROM_BYTES))


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
    if _keeps_malloc_defaults(device_type) or _partitions(zero_stage, data_parallel):
        return False
    return keep_freed_memory_mapped()


def tune_malloc_for_partitioning(device_type: str, zero_stage: int, data_parallel: int) -> bool:
    """`return_freed_memory()` for a CPU run whose ZeRO stage partitions over DP > 1 ranks, called
    before the model is built (the partitioned build frees each module's full tensors).

    Such a run is chosen to save memory, but under malloc's defaults the buffers a build or a step
    allocates and frees (a ZeRO-3 build's full tensors, gathered parameters, flattened gradient
    partitions) leave the heap full of holes. Peak RSS per rank, base, fp32, DP=2, ZeRO-3 with
    ds_configs/zero3.json (AMD EPYC, 2 cores, 2026-12-03): 2.15 -> 1.23 GiB; ZeRO-2 with zero2.json
    1.75-1.94 -> 1.46 GiB. The cost is a page fault on first touch of each such buffer: no change in
    a ZeRO-2 step (2.17 s either way, 16 tokens), a ZeRO-3 step 2.3 -> 3.3 s (it gathers every
    weight each step); with real batches the multiplies dominate. Nothing happens on GPUs (their
    buffers live in the caching device allocator) or with BERT_DS_MALLOC_DEFAULTS=1.
    """
    if _keeps_malloc_defaults(device_type) or not _partitions(zero_stage, data_parallel):
        return False
    return return_freed_memory()


def _keeps_malloc_defaults(device_type: str) -> bool:
    """GPU runs (their buffers live in the device allocator) and BERT_DS_MALLOC_DEFAULTS=1."""
    from bert_ds.distributed import is_gpu

    return is_gpu(device_type) or os.environ.get("BERT_DS_MALLOC_DEFAULTS", "0") == "1"


def _partitions(zero_stage: int, data_parallel: int) -> bool:
    return zero_stage > 0 and data_parallel > 1
