"""The launch plan of a fine-tuning job (`glue.py|squad.py|swag.py --dry-run`), resolved without a
process group, weights or GPU: the starting point's shape and tokenizer (from manifests), TP x DP,
every run of the grid and restarts with its batch plan, the ZeRO stage and precision, the data
(local files read and checked as the job would read them; hub data is counted at start), and the
memory per device and size of the kept model (training/plan/footprint.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

from bert_ds.config import POOLED_KINDS, ModelConfig, validate_layout
from bert_ds.finetune.args import FinetuneConfig, RunSettings, batch_plan
from bert_ds.training.config.batch_plan import BatchPlan
from bert_ds.training.plan.footprint import MemoryEstimate


@dataclass
class TaskPlan:
    """One task of the job as its task file describes it (its FinetuneTask.plan, finetune/task.py)."""

    name: str
    kind: str
    """classification, multiple_choice, span or tagging (model/heads.py)."""
    head_outputs: int
    """Outputs of the task head: labels (1 for regression), 1 score per choice, or 2 (start, end)."""
    train_examples: Optional[int]
    """None where it is known only at start (hub data)."""
    data: str
    """What was read, one line per split."""
    sequences_per_example: int = 1
    restarts: Optional[int] = None
    """Restarts for this task (None: the job's --restarts)."""
    options: dict = field(default_factory=dict)
    """Task-specific settings worth showing (SQuAD's windows, ...)."""


@dataclass
class FinetunePlan:
    job: FinetuneConfig
    world_size: int
    world_from: str
    device_type: str
    data_parallel: int
    model_config: ModelConfig
    init_text: str
    tokenizer_text: str
    tasks: list[TaskPlan]
    runs: dict[str, list[RunSettings]]
    """Task name -> its runs (grid settings x restarts)."""
    steps: dict[str, Optional[int]]
    """Task name -> optimizer steps over all its runs (None when its size is known only at start)."""
    batches: dict[int, BatchPlan]
    """Global batch size -> its plan (the largest sequences per example)."""
    zero_stage: int
    precision: str
    precision_reason: str
    notes: list[str]
    parameters: int
    memory: MemoryEstimate
    model_bytes: int
    """The kept model (OUTPUT/model: fp32 safetensors)."""


def resolve_finetune_plan(job: FinetuneConfig, tasks: list[TaskPlan], target: str = "auto",
                          env: Optional[Mapping[str, str]] = None) -> FinetunePlan:
    """The plan, or the first user error (ConfigError, DataError, TokenizerError, CheckpointError)."""
    from bert_ds.finetune.starting_point import describe_init
    from bert_ds.training.plan.footprint import activation_bytes, buffer_bytes, finetuning_parameters, model_state_bytes
    from bert_ds.training.plan.resolve import planned_device_kind, planned_world

    world, world_from = planned_world(job.plan.world_size, env)
    device_type = planned_device_kind(target)
    config, tokenizer, init_text = describe_init(job)
    choices = max(task.sequences_per_example for task in tasks)
    job.validate(world, config, choices)  # every rule, the layout's and each setting's batch included
    dp = validate_layout(config, world, job.parallel.tensor_parallel, 1)
    runs = {task.name: job.with_restarts(task.restarts or job.grid.restarts).settings() for task in tasks}
    batches = {}
    for settings in (s for task_runs in runs.values() for s in task_runs):
        if settings.batch_size not in batches:
            batches[settings.batch_size] = batch_plan(job, settings, dp, config, choices)
    first = next(iter(batches.values()))
    deepspeed = job.parallel.deepspeed_setup(first, device_type, job.recipe.clip_grad)
    (ds_config, notes, choice), stage = deepspeed, deepspeed.zero_stage
    precision = choice.name
    biggest, pooler = max(task.head_outputs for task in tasks), any(task.kind in POOLED_KINDS for task in tasks)
    params = finetuning_parameters(config, job.parallel.tensor_parallel, biggest, pooler)
    sequences = max(plan.micro_batch_size for plan in batches.values()) * choices
    weights, gradients, optimizer, _ = model_state_bytes(params, precision, stage, dp, offload=False)
    # No MLM head and no pipeline here: the encoder's activations for the largest micro batch.
    memory = MemoryEstimate(
        weights, gradients, optimizer,
        buffer_bytes(params, precision, stage, dp, ds_config["zero_optimization"]),
        activation_bytes(config, job.recipe.max_seq_length, sequences, job.parallel.tensor_parallel, config.num_layers, precision,
                         device_type == "gpu", predicted=0.0),
    )
    text = f"{tokenizer.name}: {tokenizer.vocab_size:,} entries, {tokenizer.casing()}"
    full = finetuning_parameters(config, 1, biggest, pooler)
    return FinetunePlan(
        job=job, world_size=world, world_from=world_from, device_type=device_type, data_parallel=dp,
        model_config=config, init_text=init_text, tokenizer_text=text, tasks=tasks, runs=runs,
        steps={task.name: optimizer_steps(task, runs[task.name], job.recipe.max_train_examples) for task in tasks},
        batches=batches,
        zero_stage=stage, precision=precision, precision_reason=choice.reason, notes=notes, parameters=full, memory=memory, model_bytes=4 * full,
    )


def optimizer_steps(task: TaskPlan, runs: list[RunSettings], limit: Optional[int] = None) -> Optional[int]:
    """Optimizer steps of all the task's runs on at most `limit` examples (--max-train-examples);
    None when the example count is known only at start."""
    if task.train_examples is None:
        return None
    examples = min(task.train_examples, limit or task.train_examples)
    return sum(math.ceil(examples / s.batch_size) * s.epochs for s in runs)
