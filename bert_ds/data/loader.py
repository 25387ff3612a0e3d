"""The pre-training data loader of one data-parallel rank: masked batches, exact resume.

Each rank (and each of its DataLoader workers) owns one shard of every source: shard
`dp_rank * workers + worker` of `dp_size * workers`, so shards are disjoint, their union is the
corpus, and every rank is busy. Every batch travels with the state of the stream that produced
it; the loader keeps the state of the last batch it handed out per worker, so `state_dict()` marks
exactly the next unseen example even though workers prefetch ahead.

PyTorch hands out worker batches in a fixed round-robin. A resumed loader rotates the workers'
roles so that the worker whose batch was due next comes first again.
"""

from __future__ import annotations

import copy
import sys
from typing import Iterator, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from bert_ds.config import DataConfig
from bert_ds.data.masking import SpecialIds, collate
from bert_ds.data.sources import DataError, DataSource, check_sources
from bert_ds.data.stream import ExampleStream
from bert_ds.data.text.cleaning import TextStats

STATE_VERSION = 2


class _ShardBatches(IterableDataset):
    """Runs in each worker (or in the main process): one shard's stream -> batches + state."""

    def __init__(self, sources, tokenizer, config: DataConfig, dp_rank: int, dp_size: int, states, role_offset: int):
        super().__init__()
        self.sources, self.tokenizer, self.config = sources, tokenizer, config
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.states, self.role_offset = states, role_offset

    def __iter__(self):
        workers = max(self.config.num_workers, 1)
        info = get_worker_info()
        role = ((info.id if info is not None else 0) + self.role_offset) % workers
        stream = ExampleStream(
            self.sources, self.tokenizer, self.config, self.dp_rank * workers + role, self.dp_size * workers
        )
        if self.states[role] is not None:
            stream.load_state_dict(self.states[role])
        ids = SpecialIds.from_tokenizer(self.tokenizer)
        examples = iter(stream)
        config = self.config
        while True:
            chunk = [next(examples) for _ in range(config.micro_batch_size)]
            batch = collate(
                chunk, ids, config.seq_length, config.objective, config.seed, config.dynamic_masking, config.mask_prob
            )
            # Tensors already here (in the worker), so that the DataLoader's pinning thread can
            # page-lock them while the training process is busy.
            yield {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in batch.items()}, role, stream.state_dict()


class PretrainingLoader:
    """Iterable of model-ready batches (dicts of CPU tensors) for one data-parallel rank.

    Keys: input_ids, token_type_ids, attention_mask, loss_mask (bool), labels, example_uid and, for
    the NSP objective, next_sentence_label. The stream never ends: sources restart (new epoch,
    new file order) when exhausted.
    """

    def __init__(
        self, sources: list[DataSource], tokenizer, config: DataConfig, dp_rank: int = 0, dp_size: int = 1,
        pin_memory: bool = False,
    ):
        """`pin_memory`: hand out batches in page-locked host memory, so that their copy to a GPU
        runs asynchronously (runtime/device.py pins_host_memory decides; no effect on the data)."""
        if config.num_workers is None:
            raise DataError("--num-workers is `auto` until the launch plan resolves it (training/plan/resolve.py).")
        config.validate()
        check_sources(sources, config.txt_documents)
        if not 0 <= dp_rank < dp_size:
            raise DataError(f"dp_rank {dp_rank} must be in [0, {dp_size}).")
        self.sources, self.tokenizer, self.config = sources, tokenizer, config
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.pin_memory = pin_memory
        self._workers = max(config.num_workers, 1)
        self._states: list[Optional[dict]] = [None] * self._workers
        self._next_role = 0
        self.batches_consumed = 0

    def __iter__(self) -> Iterator[dict]:
        dataset = _ShardBatches(
            self.sources, self.tokenizer, self.config, self.dp_rank, self.dp_size,
            copy.deepcopy(self._states), self._next_role,
        )
        loader = DataLoader(
            dataset,
            batch_size=None,
            num_workers=self.config.num_workers,
            collate_fn=_identity,
            prefetch_factor=4 if self.config.num_workers else None,
            pin_memory=self.pin_memory,
            # Its own generator: creating the iterator must not draw from the global RNG, or a
            # resumed run (which creates it later) would shift every dropout mask after it.
            generator=torch.Generator().manual_seed(self.config.seed),
        )
        for batch, role, state in loader:
            self._states[role] = state
            self._next_role = (role + 1) % self._workers
            self.batches_consumed += 1
            yield batch

    def state_dict(self) -> dict:
        """Everything needed to continue at the next unseen example (small: no token data)."""
        return dict(
            version=STATE_VERSION,
            dp_rank=self.dp_rank,
            dp_size=self.dp_size,
            num_workers=self.config.num_workers,
            next_role=self._next_role,
            batches_consumed=self.batches_consumed,
            worker_states=copy.deepcopy(self._states),
        )

    def load_state_dict(self, state: dict, skip_partial_block: bool = False) -> None:
        """Continue where `state` was taken; the layout (DP size, rank, workers) must match.

        `skip_partial_block`: the examples would be cut differently (a new sequence length, e.g.
        the paper's switch from 128 to 512 tokens), so the rest of each current block is skipped
        and reading continues with the next block: no document repeats, at most one block per
        shard goes unused.
        """
        if state.get("version") != STATE_VERSION:
            raise DataError(f"Unknown data-loader state version {state.get('version')!r} (expected {STATE_VERSION}).")
        saved = (state["dp_rank"], state["dp_size"], state["num_workers"])
        if saved != (self.dp_rank, self.dp_size, self.config.num_workers):
            raise DataError(
                "Data-loader state was saved with dp_rank/dp_size/num_workers = "
                f"{saved[0]}/{saved[1]}/{saved[2]}, this loader has "
                f"{self.dp_rank}/{self.dp_size}/{self.config.num_workers}; resume with the same layout."
            )
        self._states = copy.deepcopy(state["worker_states"])
        if skip_partial_block:
            for worker_state in self._states:
                if worker_state is not None:
                    worker_state["examples_done"] = sys.maxsize
        self._next_role = state["next_role"]
        self.batches_consumed = state["batches_consumed"]

    def load_redistributed_state(self, states: list[dict], skip_partial_block: bool = False) -> None:
        """Continue from the states of every DP rank of another layout (a different DP size or
        number of workers): their shards' positions are re-divided among this layout's shards
        (data/reshard.py states what is guaranteed)."""
        from bert_ds.data.reshard import reshard_stream_states

        for state in states:
            if state.get("version") != STATE_VERSION:
                raise DataError(f"Unknown data-loader state version {state.get('version')!r} (expected {STATE_VERSION}).")
        old_shards = [shard for state in sorted(states, key=lambda s: s["dp_rank"]) for shard in state["worker_states"]]
        new_shards = reshard_stream_states(old_shards, self.dp_size * self._workers, skip_partial_block)
        mine = slice(self.dp_rank * self._workers, (self.dp_rank + 1) * self._workers)
        self._states = new_shards[mine]
        self._next_role = 0
        self.batches_consumed = sum(state["batches_consumed"] for state in states) // self.dp_size

    def text_stats(self) -> TextStats:
        """Cleaning counters (repaired bytes, empty documents, ...) of this rank's shards so far."""
        total = TextStats()
        for state in self._states:
            if state is not None:
                total.add(TextStats(**state["block_start"]["stats"]))
        return total


def _identity(item):
    return item
