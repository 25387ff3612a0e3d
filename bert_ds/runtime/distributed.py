"""Process groups and RNG streams: `init_parallel` sets up everything distributed in one call.

megatron-core's global parallel state is set up only inside `init_parallel` and torn down only by
`teardown_parallel`; the rest of the code receives a `ParallelLayout` value. The device and its
backend come from runtime/device.py.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import socket
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from bert_ds.config import ModelConfig, validate_layout
from bert_ds.runtime.device import (backend, device, generator_kind, get_device_rng_state, seed_device, set_current_device,
                                    set_device_rng_state)

# Offset of the model-parallel RNG stream from the run seed (megatron uses the same idea): the
# stream differs per TP rank so that each rank's attention heads get independent dropout masks.
_MODEL_PARALLEL_SEED_OFFSET = 2718
MODEL_PARALLEL_RNG = "model-parallel-rng"


class RNGStatesTracker:
    """Named RNG streams for the compute device, usable on CPU and GPU alike.

    megatron's CudaRNGStatesTracker only works with CUDA; this one swaps the state of whichever
    generator `device()` uses. `fork(name)` runs a block on stream `name` and leaves the default
    stream exactly as it was, so replicated computations (embedding and hidden dropout) stay
    identical across TP ranks while sharded ones (attention heads) draw per-rank masks.
    """

    def __init__(self) -> None:
        self._states: dict[str, torch.Tensor] = {}

    def add(self, name: str, seed: int) -> None:
        """Create stream `name` starting from `seed`, without disturbing the default stream."""
        if name in self._states:
            raise ValueError(f"RNG stream {name!r} already exists")
        saved = get_device_rng_state()
        seed_device(seed)
        self._states[name] = get_device_rng_state()
        set_device_rng_state(saved)

    @contextlib.contextmanager
    def fork(self, name: str = MODEL_PARALLEL_RNG):
        """Run the block on stream `name`; the default stream is restored afterwards."""
        if name not in self._states:
            raise KeyError(f"RNG stream {name!r} was never added")
        saved = get_device_rng_state()
        set_device_rng_state(self._states[name])
        try:
            yield
        finally:
            self._states[name] = get_device_rng_state()
            set_device_rng_state(saved)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Copies of every stream's state, for checkpoints."""
        return {name: state.clone() for name, state in self._states.items()}

    def load_state_dict(self, states: dict[str, torch.Tensor]) -> None:
        """Restore streams saved by `state_dict`."""
        self._states = {name: state.clone() for name, state in states.items()}


@dataclass(frozen=True)
class ParallelLayout:
    """Where this process sits in world = TP x PP x DP, and its groups (TP fastest, then DP, then PP)."""

    world_size: int
    rank: int
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    tp_rank: int
    pp_rank: int
    dp_rank: int
    tp_group: object
    pp_group: object
    dp_group: object
    device: torch.device
    seed: int
    """The run's seed; weights are drawn from it by name (bert_ds.model.init)."""
    rng_tracker: RNGStatesTracker = field(compare=False)
    pg_collection: object = field(compare=False, default=None)
    """megatron's ProcessGroupCollection for these groups, handed to the model explicitly."""

    def say(self, text: str) -> None:
        """A console line, printed by rank 0 only."""
        if self.rank == 0:
            print(text, flush=True)


def free_port() -> int:
    """A TCP port on the loopback interface that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _clear_what_killed_jobs_left() -> None:
    """Before DeepSpeed loads its ops: a build lock a killed job left (it would hang the load) and,
    on CPU, by each host's first rank, all-reduce buffers a job killed inside DeepSpeed's start-up
    left in /dev/shm (66 MiB a rank, until reboot)."""
    from bert_ds.runtime.prebuild_ops import clear_stale_op_locks
    from bert_ds.runtime.shm_buffers import clear_stale_allreduce_buffers

    clear_stale_op_locks()
    if device().type == "cpu" and os.environ.get("LOCAL_RANK", "0") == "0":
        clear_stale_allreduce_buffers()


def _init_process_group(timeout_s: float) -> None:
    """Join the job's process group, whichever launcher started us (bert_ds.runtime.launcher); a plain
    `python script.py` becomes a world of one."""
    from bert_ds.runtime.device import prepare_device
    from bert_ds.runtime.launcher import discover

    prepare_device()
    if dist.is_initialized():
        return
    launch = discover(os.environ)
    timeout = datetime.timedelta(seconds=timeout_s)
    if launch.launcher == "mpi":
        # DeepSpeed reads rank, size and the master address through mpi4py.
        import deepspeed

        os.environ.setdefault("LOCAL_RANK", str(launch.local_rank))
        set_current_device()
        _clear_what_killed_jobs_left()  # DeepSpeed loads its CPU comm op in the call below
        deepspeed.init_distributed(dist_backend=backend(), auto_mpi_discovery=True, timeout=timeout)
        return
    if launch.launcher == "none":
        # A private store on a free port. The environment is left untouched so that child
        # processes (launched jobs, tests) do not inherit a port that is already taken.
        dist.init_process_group(
            backend=backend(), init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
            timeout=timeout,
        )
        # DeepSpeed insists on LOCAL_RANK; unlike RANK/WORLD_SIZE/MASTER_PORT it cannot mislead a
        # child process into joining this private store.
        os.environ.setdefault("LOCAL_RANK", "0")
        return
    os.environ.update(launch.environment())  # srun's SLURM_* become torch's env:// variables
    set_current_device()
    dist.init_process_group(backend=backend(), timeout=timeout)


def join_process_group(timeout_s: float = 600.0) -> None:
    """Join the job's process group (as init_parallel does) before the model's sizes are known."""
    _init_process_group(timeout_s)


def _seed_streams(seed: int, pp_rank: int, tp_rank: int) -> RNGStatesTracker:
    # Default stream: equal on the TP ranks of a stage (replicated dropout must agree), different
    # per pipeline stage (its layers are different modules).
    torch.manual_seed(seed + 100 * pp_rank)
    if device().type != "cpu":
        seed_device(seed + 100 * pp_rank)
    tracker = RNGStatesTracker()
    tracker.add(MODEL_PARALLEL_RNG, seed + _MODEL_PARALLEL_SEED_OFFSET + 100 * pp_rank + tp_rank)
    return tracker


def reseed(layout: "ParallelLayout", seed: int, step: int) -> None:
    """Fresh streams for a run resumed at `step` on another layout (old streams have no
    counterpart there); deterministic, and the TP ranks of a stage still agree."""
    fresh = _seed_streams(seed + 7919 * step, layout.pp_rank, layout.tp_rank)
    layout.rng_tracker.load_state_dict(fresh.state_dict())  # the model holds this tracker


def init_parallel(
    model: ModelConfig,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    seed: int = 1234,
    timeout_s: float = 600.0,
) -> ParallelLayout:
    """Join the process group, check the sizes, build megatron's groups, seed every stream and
    hand the group to DeepSpeed's comm layer: everything distributed, set up in one call.

    Sizes are checked with `validate_layout` before megatron sees them, so a bad layout ends
    with one clear sentence instead of a megatron assertion.
    """
    from bert_ds.runtime.compile_free_imports import import_without_compile

    import_without_compile()
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection

    _init_process_group(timeout_s)
    world, rank = dist.get_world_size(), dist.get_rank()
    data_parallel = validate_layout(model, world, tensor_parallel, pipeline_parallel)
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tensor_parallel,
        pipeline_model_parallel_size=pipeline_parallel,
        # megatron gives its TP/PP/DP groups 30 minutes whatever the world group has: a rank that
        # lost its peer would wait that long in the gradient all-reduce.
        distributed_timeout_minutes=max(1, math.ceil(timeout_s / 60)),
    )
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    tracker = _seed_streams(seed, pp_rank, tp_rank)
    import deepspeed

    from bert_ds.runtime.shm_buffers import release_allreduce_buffer

    _clear_what_killed_jobs_left()  # a killed job's lock would hang the op load below
    deepspeed.init_distributed(dist_backend=backend())  # DeepSpeed's comm layer adopts the process group
    if world > 1 and device().type == "cpu":
        dist.barrier()  # every rank has mapped its peers' all-reduce buffers by name
        release_allreduce_buffer(rank)
    return ParallelLayout(
        world_size=world,
        rank=rank,
        tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel,
        data_parallel=data_parallel,
        tp_rank=tp_rank,
        pp_rank=pp_rank,
        dp_rank=parallel_state.get_data_parallel_rank(),
        tp_group=parallel_state.get_tensor_model_parallel_group(),
        pp_group=parallel_state.get_pipeline_model_parallel_group(),
        dp_group=parallel_state.get_data_parallel_group(),
        device=device(),
        seed=seed,
        rng_tracker=tracker,
        pg_collection=ProcessGroupCollection.use_mpu_process_groups(),
    )


def teardown_parallel(keep_process_group: bool = False) -> None:
    """Undo `init_parallel`: megatron's groups, then (unless kept) the process group."""
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if not keep_process_group and dist.is_initialized():
        dist.destroy_process_group()


def rng_state_dict(layout: ParallelLayout) -> dict:
    """Every RNG stream this process draws from, for exact resume."""
    import random

    import numpy as np

    return dict(
        torch=torch.get_rng_state(),
        device=get_device_rng_state() if device().type != "cpu" else None,
        device_type=device().type,  # the tracker's states are this kind of generator's
        tracker=layout.rng_tracker.state_dict(),
        # As tensors and plain tuples, so checkpoints load with torch.load(weights_only=True).
        numpy=[value if not isinstance(value, np.ndarray) else torch.from_numpy(value.copy())
               for value in np.random.get_state()],
        python=random.getstate(),
    )


def load_rng_state_dict(layout: ParallelLayout, state: dict, seed: int, step: int) -> str:
    """Restore what `rng_state_dict` saved; returns a one-line note when the checkpoint's device
    kind differs from this process's (a GPU checkpoint resumed on CPUs, or the reverse): the
    generators' states do not carry over, so the streams are reseeded deterministically from
    (seed, step), as a resume on another layout does."""
    import random

    import numpy as np

    torch.set_rng_state(state["torch"])
    saved_kind, here = state.get("device_type") or generator_kind(next(iter(state["tracker"].values()), None)), device().type
    if saved_kind != here:
        reseed(layout, seed, step)
        note = (f"RNG streams: the checkpoint was written on {saved_kind}, this run is on {here}: dropout streams "
                f"reseeded from the seed and step {step} (the data order and everything else resume exactly)")
    else:
        if state["device"] is not None:
            set_device_rng_state(state["device"])
        layout.rng_tracker.load_state_dict(state["tracker"])
        note = ""
    np.random.set_state(tuple(v.numpy() if isinstance(v, torch.Tensor) else v for v in state["numpy"]))
    random.setstate(state["python"])
    return note


class DeepSpeedMPU:
    """The model-parallel unit DeepSpeed asks for (`deepspeed.initialize(mpu=...)`) without pipelines:
    model parallel = tensor parallel, so ZeRO partitions over DP and grad norms count TP shards once."""

    def __init__(self, layout: ParallelLayout):
        self._layout = layout

    def get_model_parallel_rank(self) -> int:
        return self._layout.tp_rank

    def get_model_parallel_world_size(self) -> int:
        return self._layout.tensor_parallel

    def get_model_parallel_group(self):
        return self._layout.tp_group

    get_tensor_model_parallel_rank = get_model_parallel_rank
    get_tensor_model_parallel_world_size = get_model_parallel_world_size
    get_tensor_model_parallel_group = get_model_parallel_group

    def get_tensor_model_parallel_src_rank(self) -> int:
        return dist.get_global_rank(self._layout.tp_group, 0)

    def get_data_parallel_rank(self) -> int:
        return self._layout.dp_rank

    def get_data_parallel_world_size(self) -> int:
        return self._layout.data_parallel

    def get_data_parallel_group(self):
        return self._layout.dp_group
