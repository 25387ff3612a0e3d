"""Launch plans as people and programs read them: a short two-column table, and JSON.

Shared by the pre-training plan (training/plan/resolve.py) and the fine-tuning plan (finetune/plan.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bert_ds.training.plan.footprint import GIB, MemoryEstimate
from bert_ds.training.plan.scaling import Interconnect, estimate, estimate_text

MEMORY_FORMULA = (
    "estimate: model states by the ZeRO paper's formula, activations by Korthikanti et al. 2022, "
    "DeepSpeed's reduce bucket, fp32 gradient partition and ZeRO-3's gathered weights (bert_ds/training/plan/footprint.py); "
    "not counted: CUDA context, fragmentation"
)


def render_table(title: str, rows: list[tuple[str, str]], notes: list[str] = ()) -> str:
    """`title`, then `name | value` rows (a value may hold several lines), then notes."""
    width = max(len(name) for name, _ in rows)
    lines = [title]
    for name, value in rows:
        for i, part in enumerate(str(value).split("\n")):
            lines.append(f"  {(name if i == 0 else ''):<{width}} | {part}")
    lines += [f"  note: {note}" for note in notes]
    return "\n".join(lines)


def amount(value: float) -> str:
    """A count in k / M / B (tokens, parameters)."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f}"


def gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def memory_text(memory: MemoryEstimate, activations_detail: str) -> str:
    text = (f"{gib(memory.total)} per device: weights {gib(memory.weights)}, gradients {gib(memory.gradients)}, "
            f"optimizer states {gib(memory.optimizer)}, buffers {gib(memory.buffers)}, "
            f"activations {gib(memory.activations)} ({activations_detail})")
    if memory.host:
        text += f"\noptimizer states offloaded to host memory: {gib(memory.host)} per rank"
    return text + "\n" + MEMORY_FORMULA


def memory_json(memory: MemoryEstimate) -> dict:
    return dict(dataclasses.asdict(memory), total=memory.total)


def write_plan_json(path: str, value: dict) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(value, indent=1) + "\n")


def evaluation_text(run) -> str:
    """The plan's held-out evaluation row."""
    from bert_ds.training.evaluation import DEFAULT_EVAL_SAMPLES, EVAL_SEED

    target = f"; stop at masked-LM accuracy {run.eval.target_mlm_accuracy:g}" if run.eval.target_mlm_accuracy else ""
    best = "; the best checkpoint is kept (best.json)" if run.eval.keep_best else ""
    samples = f"{run.eval.eval_samples:,}" if run.eval.eval_samples else f"up to {DEFAULT_EVAL_SAMPLES:,}"
    return (f"every {run.eval.eval_interval:,} steps, {samples} fixed examples of {' '.join(run.eval.eval_data)} "
            f"(static masks and pairs, seed {EVAL_SEED}){target}{best}")


def format_pretrain_plan(plan) -> str:
    """The pre-training plan (training/plan.LaunchPlan) as a table."""
    run, config, batch = plan.run, plan.model_config, plan.batch
    tokens_this_run = (plan.last_step - plan.start_step) * plan.tokens_per_step
    dropout = config.hidden_dropout if config.hidden_dropout == config.attention_dropout else (
        f"hidden {config.hidden_dropout}, attention {config.attention_dropout}")
    rows = [
        ("model", f"{run.model.preset}: {config.num_layers} layers, hidden {config.hidden_size}, {config.num_attention_heads} heads, "
                  f"{config.layer_norm_position}-LN, {amount(plan.parameters)} parameters "
                  f"({amount(plan.parameters_per_rank)} on the heaviest rank)"),
        ("layout", f"world {plan.world_size} = TP {run.parallel.tensor_parallel} x PP {run.parallel.pipeline_parallel} "
                   f"x DP {plan.data_parallel} (world from {plan.world_from}); a collective waits at most "
                   f"{run.parallel.collective_timeout:g} s for a peer (--collective-timeout)"),
        ("watchdog", run.parallel.watchdog_limits().describe()),
        ("batch", f"global {batch.global_batch_size} = micro {batch.micro_batch_size} x DP {batch.data_parallel} "
                  f"x accumulation {batch.accumulation}"),
        ("tokens", f"{batch.global_batch_size} x {run.data.seq_length} = {plan.tokens_per_step:,} per step; this run steps "
                   f"{plan.start_step:,} -> {plan.last_step:,} of {run.optim.train_steps:,}: {amount(tokens_this_run)} tokens"),
        ("schedule", f"{run.optim.optimizer} lr {run.optim.lr:g}, betas {run.optim.adam_beta1}/{run.optim.adam_beta2}, eps {run.optim.adam_eps:g}, "
                     f"weight decay {run.optim.weight_decay:g}, warm-up {run.optim.warmup_steps:,} steps then linear decay to step "
                     f"{run.optim.train_steps:,}; clip {run.optim.clip_grad:g}; dropout {dropout}; objective {run.data.objective}"),
        ("deepspeed", f"{run.parallel.deepspeed_config} -> ZeRO stage {plan.zero_stage}"
                      + (", optimizer offloaded" if plan.memory.host else "")),
        ("precision", f"{plan.precision} on {'GPU' if plan.device_type != 'cpu' else 'CPU'}: {plan.precision_reason}"),
        ("loader", plan.loader_text),
        ("tokenizer", f"{plan.tokenizer_text}; embedding rows {config.vocab_size:,} (padded to a multiple of 128)"),
        ("data", "\n".join(f"{s.name} {100 * s.share:.1f}%: {s.location} ({s.detail})" for s in plan.sources)),
    ]
    if plan.samples:
        rows.append(("data check", "\n".join(sample.describe() for sample in plan.samples)))
    if run.eval.eval_interval:
        rows.append(("evaluation", evaluation_text(run)))
    rows += [
        ("resume", plan.resume_text),
        ("memory", memory_text(plan.memory, f"micro batch {batch.micro_batch_size} x {run.data.seq_length} tokens"
                                            + (f", {min(run.parallel.pipeline_parallel, batch.accumulation)} in flight"
                                               if run.parallel.pipeline_parallel > 1 else "")
                                            + (", recomputed per layer" if config.activation_checkpointing else ""))),
        ("checkpoint", f"{gib(plan.checkpoint_bytes)} each" + (f", {run.checkpoint.keep_last} kept" if run.checkpoint.keep_last else "")
                       + (f" in {run.checkpoint.save}" if run.checkpoint.save else " (no --save)")),
    ]
    if plan.device_type == "gpu":
        rows.append(("scaling", estimate_text(*scaling_estimate(plan))))
    warnings = [w for source in plan.sources for w in source.warnings]
    warnings += [w for w in (sample.warning() for sample in plan.samples) if w]
    return render_table("bert_ds launch plan (pre-training)", rows, plan.notes + warnings)


def scaling_estimate(plan):
    """(ScalingEstimate, Interconnect) of a pre-training plan: its layout on the --node-gpus,
    bandwidths and --gpu-tflops it was given (bert_ds/training/plan/scaling.py)."""
    options, run = plan.run.plan, plan.run
    link = Interconnect(options.node_gpus, options.intra_node_bandwidth, options.inter_node_bandwidth, options.gpu_tflops)
    est = estimate(plan.model_config, seq=run.data.seq_length, micro=plan.batch.micro_batch_size,
                   accumulation=plan.batch.accumulation, tp=run.parallel.tensor_parallel, pp=run.parallel.pipeline_parallel,
                   dp=plan.data_parallel, zero_stage=plan.zero_stage, element_bytes=4 if plan.precision == "fp32" else 2,
                   parameters_per_rank=plan.parameters_per_rank, with_nsp=run.data.objective == "mlm_nsp", link=link)
    return est, link


def pretrain_plan_json(plan) -> dict:
    run, config, batch = plan.run, plan.model_config, plan.batch
    return dict(
        kind="pretrain", world_size=plan.world_size, world_from=plan.world_from, device_type=plan.device_type,
        tensor_parallel=run.parallel.tensor_parallel, pipeline_parallel=run.parallel.pipeline_parallel, data_parallel=plan.data_parallel,
        preset=run.model.preset, model=dataclasses.asdict(config), parameters=plan.parameters,
        parameters_per_rank=plan.parameters_per_rank,
        global_batch_size=batch.global_batch_size, micro_batch_size=batch.micro_batch_size,
        micro_batch_auto=batch.auto, accumulation=batch.accumulation, seq_length=run.data.seq_length,
        tokens_per_step=plan.tokens_per_step, start_step=plan.start_step, last_step=plan.last_step,
        train_steps=run.optim.train_steps, stop_at_step=run.checkpoint.stop_at_step, phase_start_step=run.checkpoint.phase_start_step,
        optimizer=run.optim.optimizer, lr=run.optim.lr, adam_beta1=run.optim.adam_beta1, adam_beta2=run.optim.adam_beta2, adam_eps=run.optim.adam_eps,
        weight_decay=run.optim.weight_decay, warmup_steps=run.optim.warmup_steps, clip_grad=run.optim.clip_grad,
        hidden_dropout=config.hidden_dropout, attention_dropout=config.attention_dropout, objective=run.data.objective,
        deepspeed_config=run.parallel.deepspeed_config, zero_stage=plan.zero_stage, precision=plan.precision, precision_reason=plan.precision_reason,
        collective_timeout=run.parallel.collective_timeout, step_timeout=run.parallel.step_timeout,
        startup_timeout=run.parallel.startup_timeout, loader=plan.loader_text, tokenizer=plan.tokenizer_text, vocab_size=plan.tokenizer.vocab_size if plan.tokenizer else None,
        padded_vocab_size=config.vocab_size, data=[dataclasses.asdict(s) for s in plan.sources],
        unk_check=[dict(dataclasses.asdict(s), unk_share=s.unk_share) for s in plan.samples],
        resume=plan.resume_text, save=run.checkpoint.save, memory=memory_json(plan.memory), checkpoint_bytes=plan.checkpoint_bytes,
        evaluation=dict(data=run.eval.eval_data, interval=run.eval.eval_interval, samples=run.eval.eval_samples,
                        target_mlm_accuracy=run.eval.target_mlm_accuracy, keep_best=run.eval.keep_best) if run.eval.eval_data else None,
        sentence_splitter=run.data.sentence_splitter, data_config=dataclasses.asdict(run.data_config()), notes=plan.notes,
    )


def format_finetune_plan(plan) -> str:
    """The fine-tuning plan (finetune/plan.FinetunePlan) as a table."""
    job, config = plan.job, plan.model_config
    task_lines = []
    for task in plan.tasks:
        runs, steps = plan.runs[task.name], plan.steps[task.name]
        examples = f"{task.train_examples:,} training examples" if task.train_examples is not None else "size known at start"
        if job.recipe.max_train_examples is not None:
            examples += f" (trains on the first {job.recipe.max_train_examples:,}: --max-train-examples)"
        task_lines.append(f"{task.name}: {examples}; {len(runs)} run(s) = {len(runs) // (task.restarts or job.grid.restarts)} "
                          f"setting(s) x {task.restarts or job.grid.restarts} restart(s)"
                          + (f", {steps:,} optimizer steps" if steps is not None else ""))
        task_lines += [f"  {line}" for line in task.data.split("\n") if line]
        if task.options:
            task_lines.append("  " + ", ".join(f"{k} {v}" for k, v in task.options.items()))
    every = [s for runs in plan.runs.values() for s in runs]
    values = {name: sorted({getattr(s, name) for s in every}, reverse=name == "lr") for name in ("batch_size", "lr", "epochs")}
    rows = [
        ("model", f"{config.num_layers} layers, hidden {config.hidden_size}, {config.num_attention_heads} heads, "
                  f"{amount(plan.parameters)} parameters; from {plan.init_text}"),
        ("tokenizer", f"{plan.tokenizer_text}; embedding rows {config.vocab_size:,}"),
        ("layout", f"world {plan.world_size} = TP {job.parallel.tensor_parallel} x DP {plan.data_parallel} (world from {plan.world_from}); "
                   f"a collective waits at most {job.parallel.collective_timeout:g} s for a peer (--collective-timeout)"),
        ("watchdog", job.parallel.watchdog_limits().describe().replace("SAVE/hang/", "OUTPUT/hang/")),
        ("batches", "\n".join(f"global {b.global_batch_size} = micro {b.micro_batch_size} x DP {b.data_parallel} "
                              f"x accumulation {b.accumulation}" for b in plan.batches.values())),
        ("settings", " x ".join(f"{name.replace('_', ' ')} {{{', '.join(f'{v:g}' for v in vals)}}}" for name, vals in values.items())
                     + f"; seeds from {job.recipe.seed}"),
        ("schedule", f"{job.recipe.describe()}, warm-up "
                     f"{100 * job.recipe.warmup_proportion:g}% then linear decay; clip {job.recipe.clip_grad:g}; "
                     f"max sequence {job.recipe.max_seq_length}; dropout "
                     f"{config.hidden_dropout if job.recipe.dropout is None else job.recipe.dropout}"),
        ("tasks", "\n".join(task_lines)),
        ("deepspeed", f"{job.parallel.deepspeed_config} -> ZeRO stage {plan.zero_stage}"),
        ("precision", f"{plan.precision} on {'GPU' if plan.device_type != 'cpu' else 'CPU'}: {plan.precision_reason}"),
        ("memory", memory_text(plan.memory, f"micro batch {max(b.micro_batch_size for b in plan.batches.values())} "
                                            f"x {job.recipe.max_seq_length} tokens")),
        ("kept model", f"{gib(plan.model_bytes)} (fp32) in {job.start.output}/model" if job.outputs.save_model else "not kept (--no-save-model)"),
    ]
    return render_table("bert_ds launch plan (fine-tuning)", rows, plan.notes)


def finetune_plan_json(plan) -> dict:
    job = plan.job
    return dict(
        kind="finetune", world_size=plan.world_size, world_from=plan.world_from, device_type=plan.device_type,
        tensor_parallel=job.parallel.tensor_parallel, data_parallel=plan.data_parallel, model=dataclasses.asdict(plan.model_config),
        parameters=plan.parameters, init=job.start.init, tokenizer=plan.tokenizer_text, max_seq_length=job.recipe.max_seq_length,
        optimizer=job.recipe.optimizer, adam_beta1=job.recipe.adam_beta1, adam_beta2=job.recipe.adam_beta2,
        adam_eps=job.recipe.adam_eps, warmup_proportion=job.recipe.warmup_proportion, weight_decay=job.recipe.weight_decay,
        clip_grad=job.recipe.clip_grad,
        batches={str(k): dict(dataclasses.asdict(v), accumulation=v.accumulation) for k, v in plan.batches.items()},
        tasks=[dict(dataclasses.asdict(task), runs=[dataclasses.asdict(s) for s in plan.runs[task.name]],
                    restarts=task.restarts or job.grid.restarts, optimizer_steps=plan.steps[task.name])
               for task in plan.tasks],
        collective_timeout=job.parallel.collective_timeout, step_timeout=job.parallel.step_timeout,
        startup_timeout=job.parallel.startup_timeout,
        deepspeed_config=job.parallel.deepspeed_config, zero_stage=plan.zero_stage, precision=plan.precision, precision_reason=plan.precision_reason,
        memory=memory_json(plan.memory), model_bytes=plan.model_bytes, notes=plan.notes,
    )
