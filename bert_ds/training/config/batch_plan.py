"""The batch plan: global batch = micro batch x data parallel x gradient accumulation.

Decided once, before any process group exists, for pre-training and fine-tuning alike. The micro
batch is given, or `auto`: the largest size up to a per-model ceiling that divides the per-rank
batch (global / DP), so the same defaults fit one node and sixty-four. The ceiling is a budget of
tokens per micro batch (`MICRO_BATCH_TOKENS`), i.e. sequences = budget / sequence length:
BERT-LARGE gets 64 sequences at 128 tokens and 16 at 512, the per-GPU micro batches of NVIDIA's
BERT-LARGE recipe for 40 GB A100s (bf16/fp16, no activation checkpointing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bert_ds.config import PRESETS, ConfigError, ModelConfig

MICRO_BATCH_TOKENS = {"tiny": 1024, "mini": 2048, "small": 4096, "base": 8192, "large": 8192}
"""Per preset: the most tokens one micro batch may hold when the micro batch is `auto`."""


@dataclass(frozen=True)
class BatchPlan:
    """How one optimizer step's global batch is cut up."""

    global_batch_size: int
    """Sequences per optimizer step, over all data-parallel ranks."""
    micro_batch_size: int
    """Sequences per forward/backward on one rank."""
    data_parallel: int
    """Data-parallel ranks (world / (TP x PP))."""
    auto: bool = False
    """Whether the micro batch was chosen by `auto`."""

    @property
    def accumulation(self) -> int:
        """Micro batches per rank per optimizer step."""
        return self.global_batch_size // (self.micro_batch_size * self.data_parallel)


def micro_batch_ceiling(config: ModelConfig, seq_length: int) -> int:
    """The largest micro batch `auto` may pick for this model at this length (at least 1).

    A model of no preset's shape (e.g. an imported checkpoint) gets the budget of the smallest
    preset at least as large (per layer width and depth), else the largest preset's."""
    fits = [name for name, preset in PRESETS.items()
            if preset.num_layers >= config.num_layers and preset.hidden_size >= config.hidden_size]
    name = min(fits, key=lambda n: PRESETS[n].num_layers * PRESETS[n].hidden_size ** 2) if fits else "large"
    return max(1, MICRO_BATCH_TOKENS[name] // seq_length)


def plan_batches(global_batch_size: int, micro_batch_size: Optional[int], data_parallel: int, ceiling: int,
                 option: str = "--global-batch-size") -> BatchPlan:
    """The plan, or a ConfigError in one sentence naming the numbers and the way out.

    `micro_batch_size` None means auto; `option` names the global batch's option in messages."""
    if global_batch_size < data_parallel:
        raise ConfigError(
            f"Invalid configuration: global batch size {global_batch_size} is smaller than data parallel "
            f"{data_parallel}: every data-parallel rank needs at least one sequence per step; raise {option}, "
            "or give more of the ranks to tensor or pipeline parallelism."
        )
    per_rank, remainder = divmod(global_batch_size, data_parallel)
    if remainder:
        raise ConfigError(
            f"Invalid configuration: global batch size {global_batch_size} is not divisible by data parallel "
            f"{data_parallel}; choose a world size whose data-parallel size divides {global_batch_size}, or change {option}."
        )
    if micro_batch_size is None:
        micro = max(m for m in range(1, min(ceiling, per_rank) + 1) if per_rank % m == 0)
        return BatchPlan(global_batch_size, micro, data_parallel, auto=True)
    if per_rank % micro_batch_size:
        raise ConfigError(
            f"Invalid configuration: global batch size {global_batch_size} is not divisible by micro batch size x "
            f"data parallel = {micro_batch_size} x {data_parallel} = {micro_batch_size * data_parallel}; "
            f"use --micro-batch-size auto or a divisor of {global_batch_size} / {data_parallel} = {per_rank}."
        )
    return BatchPlan(global_batch_size, micro_batch_size, data_parallel)
