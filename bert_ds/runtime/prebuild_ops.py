"""Build DeepSpeed's JIT ops once, before any job starts ranks; clear the lock a killed job left.

On CPU DeepSpeed compiles its ops on first use (30-100 s each); two ranks compiling one at once
can abort a run, so `make install` builds them here, serially, into the torch-extensions cache.
On GPUs nothing is built ahead (DeepSpeed's CUDA ops build per kernel).

Even a built op goes through torch's JIT loader at every start: it takes a `lock` file in the
op's build folder for about a second while ninja checks the build. A job killed in that second
leaves the lock, and every later job waits on it forever (torch's FileBaton has no owner and no
timeout). `clear_stale_locks` removes a lock older than any build takes, with a warning.

That check must always be made by the same ninja: ninja 1.11 and 1.12+ hash build commands
differently, so a job whose PATH finds the system's ninja after one that found the venv's (a
launcher's environment, an activated venv or not) rebuilds every op from scratch, and so does the
next one. `use_pinned_ninja` puts the interpreter's own bin folder, where requirements.txt's ninja
is installed, first on PATH.

For the same reason each environment (venv, conda env) gets a build folder of its own: torch's
default folder is one per user and Python version, and an op's build command names the
environment's paths, so two checkouts with their own venvs (a stable and a development one; CI's
clone beside a working copy) rebuilt each other's ops at every switch (25-90 s an op, measured
here), and a job could load an op while a job of the other environment rewrote it.
`use_own_extensions_dir` sets TORCH_EXTENSIONS_DIR to `<torch's default root>/py311_cpu-<key of
sys.prefix>` unless the user set it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

OPS = ("ShareMemCommBuilder", "CPUAdamBuilder")
"""shm_comm: collectives on CPU; cpu_adam: the optimizer of ZeRO-Offload (ds_configs/zero2_offload)."""
STALE_LOCK_S = 600.0
"""A build lock older than this is a killed job's: building an op from scratch takes 30-110 s."""


def use_pinned_ninja() -> None:
    """Find `ninja` beside this interpreter first (the pinned one), if it is there."""
    bin_folder = os.path.dirname(sys.executable)
    if os.access(os.path.join(bin_folder, "ninja"), os.X_OK):
        path = os.environ.get("PATH", "")
        if path.split(os.pathsep)[0] != bin_folder:
            os.environ["PATH"] = os.pathsep.join([bin_folder, path]) if path else bin_folder


def own_extensions_dir() -> Path:
    """This environment's torch-extensions folder: torch's default root, then the folder name torch
    would use (Python version, accelerator) with a key of the environment's prefixes."""
    import hashlib

    import torch
    from torch.utils.cpp_extension import get_default_build_root

    if torch.version.hip is not None:
        accelerator = f"rocm{torch.version.hip.replace('.', '')}"
    elif torch.version.cuda is not None:
        accelerator = f"cu{torch.version.cuda.replace('.', '')}"
    else:
        accelerator = "cpu"
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    key = hashlib.sha256(f"{sys.prefix}\0{sys.base_prefix}".encode()).hexdigest()[:10]
    return Path(get_default_build_root()) / f"{python}_{accelerator}-{key}"


def use_own_extensions_dir() -> None:
    """TORCH_EXTENSIONS_DIR = `own_extensions_dir()`, unless it is set already (the user's choice)."""
    if not os.environ.get("TORCH_EXTENSIONS_DIR"):
        os.environ["TORCH_EXTENSIONS_DIR"] = str(own_extensions_dir())


def prebuild() -> None:
    from deepspeed.accelerator import get_accelerator

    use_pinned_ninja()
    use_own_extensions_dir()
    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":
        print(f"prebuild_ops: accelerator {accelerator.device_name()!r}: nothing to build ahead")
        return
    for name in OPS:
        builder = accelerator.create_op_builder(name)
        if builder is None or not builder.is_compatible():
            print(f"prebuild_ops: DeepSpeed's {name} op is not buildable here; features needing it are unavailable")
            continue
        start = time.perf_counter()
        builder.load(verbose=False)
        print(f"prebuild_ops: DeepSpeed {builder.name} op ready ({time.perf_counter() - start:.0f} s)")



def op_build_folders() -> list[Path]:
    """The torch-extensions build folders of OPS in this environment (TORCH_EXTENSIONS_DIR honoured)."""
    from deepspeed.accelerator import get_accelerator
    from torch.utils.cpp_extension import _get_build_directory

    use_own_extensions_dir()
    folders = []
    for name in OPS:
        builder = get_accelerator().create_op_builder(name)
        if builder is not None:
            folders.append(Path(_get_build_directory(builder.name, verbose=False)))
    return folders


def clear_stale_locks(folders: list[Path], max_age_s: float = STALE_LOCK_S) -> list[Path]:
    """Remove each folder's `lock` older than `max_age_s` (a warning on stderr names it); the removed."""
    removed = []
    for folder in folders:
        lock = folder / "lock"
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            continue
        if age > max_age_s:
            lock.unlink(missing_ok=True)
            removed.append(lock)
            print(f"warning: removed {lock}, a build lock {age / 60:.0f} minutes old: a job killed while loading "
                  "DeepSpeed's op left it, and every later job would wait on it forever", file=sys.stderr, flush=True)
    return removed


def clear_stale_op_locks() -> None:
    """Before an op load: the pinned ninja, this environment's op folder, and `clear_stale_locks` for
    its op folders, by one process per node (LOCAL_RANK 0): the others, waiting on a stale lock, go
    on once it is gone."""
    use_pinned_ninja()
    use_own_extensions_dir()
    if os.environ.get("LOCAL_RANK", "0") == "0":
        clear_stale_locks(op_build_folders())


if __name__ == "__main__":
    prebuild()
