"""Save and resume a pre-training run, on the same parallel layout or on another one.

Same layout: DeepSpeed restores its own files bit for bit (checkpoint/zero.py). Another layout
(TP, PP, DP or loader workers changed): rank 0 converts the ZeRO checkpoint to the layout-free
portable form once (checkpoint/convert.py, kept beside it as TAG/portable), and every rank takes
its slice of weights and Adam moments from it; the step, LR schedule and engine counters carry
over, and the data stream's position is re-divided among the new shards (data/reshard.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional


from bert_ds.checkpoint import zero
from bert_ds.checkpoint.engine_state import model_param_groups, set_engine_state
from bert_ds.checkpoint.portable import PortableCheckpoint, is_portable, open_portable
from bert_ds.checkpoint.portable_load import partition_dim, read_model_slices
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.runtime.partitioned import full_shape

PORTABLE_SUBDIR = "portable"


def layout_sizes(layout, run) -> dict:
    return dict(
        tensor_parallel=layout.tensor_parallel,
        pipeline_parallel=layout.pipeline_parallel,
        data_parallel=layout.data_parallel,
        num_workers=run.data.num_workers,
    )


def full_names_of(model, layout) -> dict[str, str]:
    """This rank's parameter names -> BertForPretraining names (pipeline stages rename them)."""
    if layout.pipeline_parallel > 1:
        from bert_ds.model.pipeline import pipeline_to_full_names

        return pipeline_to_full_names(model)
    return {name: name for name, _ in model.named_parameters()}


def layout_record(engine, model, layout, run, root: Path, tag: str) -> dict:
    """What an offline conversion needs to know about this rank's files (see checkpoint/convert.py)."""
    names = full_names_of(model, layout)
    params = dict(model.named_parameters())
    sizes = layout_sizes(layout, run)
    return dict(
        sizes=sizes,
        **sizes,
        tp_rank=layout.tp_rank,
        pp_rank=layout.pp_rank,
        dp_rank=layout.dp_rank,
        zero_stage=engine.zero_optimization_stage(),
        # DeepSpeed's names for this rank's files (their naming differs with pipelines).
        optimizer_file=Path(engine._get_zero_ckpt_name(str(root), tag)).name if engine.zero_optimization_stage() else None,
        model_file=Path(engine._get_ckpt_name(str(root), tag)).name,
        optimizer_order=_optimizer_order(engine, model, names),
        names={name: names[name] for name in params},
        shapes={name: list(full_shape(param)) for name, param in params.items()},
        dims={names[name]: partition_dim(param) for name, param in params.items()},
    )


def _optimizer_order(engine, model, names: dict) -> Optional[list[list[str]]]:
    """Without ZeRO the optimizer state is torch's, keyed by position in the parameter groups:
    the full names in that order (None under ZeRO, whose files name their parameters)."""
    if engine.zero_optimization_stage() > 0:
        return None
    by_id = {id(param): names[name] for name, param in model.named_parameters()}
    return [[by_id[id(p)] for p in group] for group in model_param_groups(engine)]


def save(trainer, best: Optional[dict] = None, hooks=None) -> Path:
    """Collective: a complete checkpoint of the trainer's current step under run.checkpoint.save.

    `trainer`: training/loop/trainer.py's Trainer, or any object with its run, engine, model, loader,
    layout, model_config, precision (the PrecisionChoice, recorded with its reason) and state.
    `best` (held-out metrics) names it the best evaluated one (--keep-best); `hooks`:
    zero.SaveHooks (fault injection in tests)."""
    from bert_ds.runtime.distributed import rng_state_dict

    run, engine, model, layout, precision = trainer.run, trainer.engine, trainer.model, trainer.layout, trainer.precision
    progress = trainer.state.progress()

    tag = zero.tag_for_step(progress["step"])
    client = dict(state=progress, run=run.flat(), model_config=dataclasses.asdict(trainer.model_config))
    rank_state = dict(
        rng=rng_state_dict(layout),
        loader=trainer.loader.state_dict(),
        layout=layout_record(engine, model, layout, run, Path(run.checkpoint.save), tag),
    )
    summary = dict(
        model_config=client["model_config"],
        run={k: client["run"][k] for k in ("preset", "seq_length", "stop_at_step", "train_steps", "global_batch_size")},
        zero_stage=engine.zero_optimization_stage(), precision=precision.name,
        precision_requested=precision.requested, precision_reason=precision.reason,
    )
    return zero.save(engine, run.checkpoint.save, progress["step"], client, rank_state, run.checkpoint.keep_last, summary, best, hooks)


@dataclasses.dataclass
class Resumed:
    progress: Optional[dict]
    """step, consumed_samples, consumed_tokens; None for a fresh start or weights-only init."""
    message: str


def resume(trainer) -> Resumed:
    """Restore the trainer's engine, loader and RNG streams from --load (or --save with
    --auto-resume): a ZeRO checkpoint of any layout, or a portable folder (weights only, e.g. an
    imported Hugging Face model: training starts at step 0). `trainer` as for `save`."""
    from bert_ds.runtime.distributed import load_rng_state_dict

    run, engine, loader, layout = trainer.run, trainer.engine, trainer.loader, trainer.layout

    load_dir = run.checkpoint.load_dir
    if load_dir is None:
        return Resumed(None, "")
    if is_portable(load_dir):
        return _resume_portable(trainer, open_portable(load_dir))
    if run.checkpoint.auto_resume and zero.latest_complete_tag(load_dir) is None:
        return Resumed(None, f"no checkpoint in {load_dir} yet: starting from step 0")
    if (Path(load_dir) / zero.COMPLETE).is_file():  # a tag folder: that very checkpoint
        load_dir, tag = str(Path(load_dir).parent), Path(load_dir).name
    else:
        tag = zero.require_latest(load_dir)
    tag, fallback_note = _intact(load_dir, tag, run.checkpoint.fallback_to_previous)
    if fallback_note and layout.rank == 0:
        print(fallback_note, flush=True)
    saved = zero.saved_layout(load_dir, tag)
    if saved is not None and saved != layout_sizes(layout, run):
        portable = _converted(Path(load_dir) / tag, layout, saved, layout_sizes(layout, run))
        return _resume_portable(trainer, portable)
    client, rank_state = zero.load(engine, load_dir, tag, layout.world_size)
    saved_seq = client["run"]["seq_length"]
    loader.load_state_dict(rank_state["loader"], skip_partial_block=saved_seq != run.data.seq_length)
    rng_note = load_rng_state_dict(layout, rank_state["rng"], run.data.seed, client["state"]["step"])
    if rng_note and layout.rank == 0:
        print(rng_note, flush=True)
    note = _seq_note(saved_seq, run.data.seq_length)
    return Resumed(client["state"], f"resumed from {Path(load_dir) / tag} at step {client['state']['step']}{note}")


def _intact(load_dir: str, tag: str, fallback: bool) -> tuple[str, str]:
    """`tag` if its files are all there, else (with `fallback`) the newest earlier complete tag
    whose files are; a CheckpointError names the damaged file otherwise."""
    try:
        zero.verify(Path(load_dir) / tag)
        return tag, ""
    except CheckpointError as damage:
        if not fallback:
            raise CheckpointError(f"{damage} Pass --fallback-to-previous to resume from the previous complete checkpoint.") from None
        problem = str(damage)
    for earlier in reversed([t for t in zero.complete_tags(Path(load_dir)) if t < tag]):
        try:
            zero.verify(Path(load_dir) / earlier)
        except CheckpointError:
            continue
        return earlier, f"{problem} Falling back to the previous complete checkpoint {Path(load_dir) / earlier}."
    raise CheckpointError(f"{problem} No earlier complete checkpoint in {load_dir} is intact either.")


def _seq_note(saved_seq: int, seq: int) -> str:
    if saved_seq == seq:
        return ""
    return f" (sequence length {saved_seq} -> {seq}: the data stream moves on to its next block)"


def _describe(sizes: dict) -> str:
    return "TP {tensor_parallel} x PP {pipeline_parallel} x DP {data_parallel}, {num_workers} loader workers".format(**sizes)


def _converted(tag_dir: Path, layout, saved: dict, current: dict) -> PortableCheckpoint:
    """Collective: rank 0 converts the checkpoint to portable form (once); all ranks open it."""
    from bert_ds.checkpoint.convert import zero_to_portable

    target = tag_dir / PORTABLE_SUBDIR
    failure = ""
    if layout.rank == 0:
        print(f"checkpoint {tag_dir} has layout {_describe(saved)}, this run {_describe(current)}: "
              f"re-dividing it through {target}", flush=True)
        if not is_portable(target):
            try:
                zero_to_portable(str(tag_dir), str(target), optimizer=True)
            except (CheckpointError, OSError) as error:
                failure = str(error)
    failures = zero.gather_failures(failure)
    if failures:
        raise CheckpointError(failures[0])
    return open_portable(target)


def _check_model_config(checkpoint: PortableCheckpoint, model_config) -> None:
    ours, theirs = dataclasses.asdict(model_config), dataclasses.asdict(checkpoint.model_config)
    # Dropout, recomputation and the (padded) vocabulary may differ; the shapes may not.
    ignored = {"hidden_dropout", "attention_dropout", "activation_checkpointing", "vocab_size"}
    differ = [f"{k} {theirs[k]} vs {ours[k]}" for k in ours if k not in ignored and ours[k] != theirs[k]]
    if differ:
        raise CheckpointError(f"{checkpoint.path} holds a different model: {'; '.join(differ)} (checkpoint vs this run).")


def _resume_portable(trainer, checkpoint: PortableCheckpoint) -> Resumed:
    from bert_ds.runtime.distributed import reseed

    run, engine, model, layout = trainer.run, trainer.engine, trainer.model, trainer.layout
    _check_model_config(checkpoint, trainer.model_config)
    training = checkpoint.training
    with_optimizer = training is not None and checkpoint.has_optimizer
    slices, report = read_model_slices(
        model, checkpoint, layout.tp_rank, layout.tensor_parallel, full_names_of(model, layout),
        allow_missing=("nsp_head",), moments=with_optimizer,
    )
    set_engine_state(engine, model, slices, training if with_optimizer else None)
    if training is None:
        return Resumed(None, f"initialised weights from {checkpoint.path} ({len(report.loaded)} tensors); training starts at step 0")
    saved_seq = training["run"]["seq_length"]
    trainer.loader.load_redistributed_state(training["loader_states"], skip_partial_block=saved_seq != run.data.seq_length)
    progress = training["state"]
    # The old ranks' RNG streams have no counterpart in the new layout: derive fresh ones.
    reseed(layout, run.data.seed, progress["step"])
    note = _seq_note(saved_seq, run.data.seq_length)
    return Resumed(progress, f"resumed from {checkpoint.path} at step {progress['step']} on a new layout{note}")


