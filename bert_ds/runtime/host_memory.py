"""How glibc's malloc treats a CPU run's big buffers: kept for reuse where ZeRO saves no memory,
returned to the OS where it partitions.

glibc serves every buffer above 32 MB with a fresh mmap, unmaps it on free and trims its heap, so
a CPU step that allocates and frees the same big buffers every time (the embedding gradient, the
decoder's weight gradient, activations) pays first-touch page faults on them at every step.
Serving everything from a heap that is not trimmed makes later steps reuse earlier steps' pages,
at the price of keeping the peak footprint (up to 2 GiB free at the heap's top: `_TRIM_ABOVE`):
so it starts only once the model and engine are built, and only where ZeRO saves no memory
(`tune_malloc_for_training`). Where ZeRO partitions over several ranks, memory is the point, and
buffers from 1 MiB up are returned to the OS on free (`tune_malloc_for_partitioning`).
`BERT_DS_MALLOC_DEFAULTS=1` keeps malloc's own behaviour; GPU runs keep it too (their big buffers
live in the caching device allocator). This is what preloading jemalloc or tcmalloc buys, without
a library or an environment set before the start. The effect on step time and peak memory is in
docs/benchmarks.md (host memory).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt(3) parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_TRIM_ABOVE = 2**31 - 1
# The largest trim threshold short of -1 ("never trim"): glibc still returns the heap's top once
# more than 2 GiB is free there, so buffers above 2 GiB (Hugging Face's full-vocabulary logits at
# batch 128) are faulted in again at every step. Never trimming is worse: a 2.5 GiB tensor made
# and freed in a loop under -1 grew the heap at each of the first four rounds, to 12 GB.


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
    return libc is not None and bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_ABOVE))


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

    Nothing happens on GPUs, under ZeRO across several data-parallel ranks (chosen to save
    memory; its per-step flattening buffers would leave holes in a heap that is never trimmed), or
    when the environment sets BERT_DS_MALLOC_DEFAULTS=1. At DP=1 ZeRO partitions nothing (a bf16
    run asked for ZeRO-1 or 2 there keeps it for DeepSpeed's fp32 masters, whose gradient partition
    and bf16 weight copy then stop page-faulting every step).
    """
    if _keeps_malloc_defaults(device_type) or _partitions(zero_stage, data_parallel):
        return False
    return keep_freed_memory_mapped()


def tune_malloc_for_partitioning(device_type: str, zero_stage: int, data_parallel: int) -> bool:
    """`return_freed_memory()` for a CPU run whose ZeRO stage partitions over DP > 1 ranks, called
    before the model is built (the partitioned build frees each module's full tensors).

    Such a run is chosen to save memory, but under malloc's defaults the buffers a build or a step
    allocates and frees (a ZeRO-3 build's full tensors, gathered parameters, flattened gradient
    partitions) leave the heap full of holes. The cost is a page fault on first touch of each such
    buffer. Nothing happens on GPUs or with BERT_DS_MALLOC_DEFAULTS=1.
    """
    if _keeps_malloc_defaults(device_type) or not _partitions(zero_stage, data_parallel):
        return False
    return return_freed_memory()


def _keeps_malloc_defaults(device_type: str) -> bool:
    """GPU runs (their buffers live in the device allocator) and BERT_DS_MALLOC_DEFAULTS=1."""
    from bert_ds.runtime.device import is_gpu

    return is_gpu(device_type) or os.environ.get("BERT_DS_MALLOC_DEFAULTS", "0") == "1"


def _partitions(zero_stage: int, data_parallel: int) -> bool:
    return zero_stage > 0 and data_parallel > 1
