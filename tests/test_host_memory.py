"""host_memory.keep_freed_memory_mapped: steps that allocate and free the same big buffers stop
page-faulting them in again once malloc's heap has settled, and the footprint stops growing.

Counted in page faults and resident pages (not time), in a fresh interpreter each, so malloc
starts from its defaults.
"""

import subprocess
import sys

import pytest

PROGRAM = """
import resource, sys
import torch
from bert_ds.runtime.host_memory import keep_freed_memory_mapped
if sys.argv[1] == "keep":
    assert keep_freed_memory_mapped()

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def resident_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 // 2**20

for step in range(12):  # a training step's pattern: the same big and mid-sized buffers each time
    before = faults()
    gradient, activation = torch.ones(32 * 2**20), torch.ones(3 * 2**20)  # 128 and 12 MiB
    del gradient, activation
    print(faults() - before, resident_mib())
"""

PAGES_PER_STEP = (128 + 12) * 2**20 // 4096


def _steps(mode: str) -> list[tuple[int, int]]:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [tuple(map(int, line.split())) for line in out.stdout.splitlines()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_repeated_steps_reuse_their_pages():
    default = _steps("default")
    assert all(faults > PAGES_PER_STEP // 2 for faults, _ in default[-4:])  # faulted in every step
    kept = _steps("keep")
    assert all(faults < PAGES_PER_STEP // 20 for faults, _ in kept[-4:]), kept
    assert kept[-1][1] == kept[-4][1], kept  # settled: the footprint no longer grows


def test_gpu_partitioning_zero_and_opted_out_runs_keep_malloc_defaults(monkeypatch):
    from bert_ds.runtime.host_memory import tune_malloc_for_training

    assert tune_malloc_for_training("cuda", zero_stage=0) is False  # GPU runs keep malloc's defaults
    assert tune_malloc_for_training("cpu", zero_stage=1, data_parallel=2) is False  # so do ZeRO runs that partition
    monkeypatch.setenv("BERT_DS_MALLOC_DEFAULTS", "1")
    assert tune_malloc_for_training("cpu", zero_stage=0) is False


RETURN_PROGRAM = """
import sys
import torch
from bert_ds.runtime.host_memory import return_freed_memory
if sys.argv[1] == "return":
    assert return_freed_memory()

def resident_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 // 2**20

big = torch.ones(6 * 2**20)
del big  # a 24 MiB buffer freed: by default malloc's mapping threshold rises past 16 MiB
before = resident_mib()
full = torch.ones(4 * 2**20)  # 16 MiB: a module's full weights during a partitioned build
kept = full[: 2**20].clone()  # the rank's partition, kept, allocated after it
del full
print(resident_mib() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_partitioned_runs_return_freed_buffers_to_the_os():
    def retained_mib(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", RETURN_PROGRAM, mode], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split()[-1])

    # Both include the 4 MiB partition and a few MiB of the interpreter's own (2-4 MiB: 6 and 21-22
    # in this checkout, 7-8 and 23-24 in a fresh clone, 2026-12-03); the 16 MiB hole is the difference.
    default, returned = retained_mib("default"), retained_mib("return")
    assert default >= 15  # the freed 16 MiB stays resident, a hole under the partition
    assert default - returned >= 14, (default, returned)  # the hole went back to the OS
    assert returned <= 8, returned  # the partition and the interpreter's few MiB, no hole


def test_only_cpu_runs_that_partition_return_freed_memory(monkeypatch):
    from bert_ds.runtime.host_memory import tune_malloc_for_partitioning

    assert tune_malloc_for_partitioning("cuda", zero_stage=3, data_parallel=2) is False
    assert tune_malloc_for_partitioning("cpu", zero_stage=3, data_parallel=1) is False  # partitions nothing
    assert tune_malloc_for_partitioning("cpu", zero_stage=0, data_parallel=2) is False
    monkeypatch.setenv("BERT_DS_MALLOC_DEFAULTS", "1")
    assert tune_malloc_for_partitioning("cpu", zero_stage=2, data_parallel=2) is False
