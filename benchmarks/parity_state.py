"""Stop and go on: a learning-parity pair's whole state in one checkpoint (benchmarks/learning_parity.py
--save-interval, --stop-at-step).

A pair that has to pass the frequent-token phase runs for hours, longer than one sitting on a
small machine. Every `--save-interval` steps, at `--stop-at-step`, and at the step boundary after
SIGTERM or SIGINT, it writes OUTPUT/state-<mode>-<preset>-<precision>-seed<S>/step<N>/ with
bert_ds's own checkpoint writer (bert_ds/checkpoint/zero.py: DeepSpeed's files for bert_ds's side,
complete.json written last, the previous checkpoint removed only after it). The same folder's
per-rank file holds the rest: Hugging Face's weights, AdamW moments and schedule, the shared
loader's position, every RNG stream (both sides draw their dropout from the same generator) and
the curves so far. The same command run again finds the newest complete checkpoint and goes on
at the next step with the batches, dropout masks and curves of a run that never stopped
(tests/test_learning_parity.py checks it). A checkpoint written with other settings is refused
with the setting named: its curves would not be one run's.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Optional

# The options a pair's curves depend on: a resumed pair must have the ones it was saved with.
SETTINGS = ("batch", "seq_length", "lr", "warmup_fraction", "recipe_dropout", "adam_beta2", "eval_interval",
            "eval_samples", "data", "eval_data", "tokenizer", "init", "alone")
# Settings added later: a pair saved before them ran with these values.
SETTING_DEFAULTS = {"init": "own", "alone": False}
# Signals that save and stop a pair at the next step boundary (bert_ds's StopRequest records them).
EXIT_CODE_FOR_SIGNAL = {signal.SIGTERM: 143, signal.SIGINT: 130}


def state_root(output: Path, mode: str, preset: str, precision: str, seed: int) -> Path:
    return output / f"state-{mode}-{preset}-{precision}-seed{seed}"


def settings_of(args, steps: int) -> dict:
    return {"steps": steps, **{name: getattr(args, name) for name in SETTINGS}}


def save(root: Path, ours, hf, loader, progress: dict, settings: dict) -> Path:
    """One complete checkpoint of both sides at `progress["step"]`; the older one goes after it."""
    from bert_ds.checkpoint import zero
    from bert_ds.checkpoint.pretraining import layout_sizes
    from bert_ds.runtime.distributed import rng_state_dict

    rank_state = dict(layout=dict(sizes=layout_sizes(ours.layout, ours.run)), rng=rng_state_dict(ours.layout),
                      loader=loader.state_dict(), hf=hf.state_dict(), progress=progress)
    return zero.save(ours.engine, str(root), progress["step"], client_state={}, rank_state=rank_state, keep_last=1,
                     summary={"parity_settings": settings})


def resume(root: Path, ours, hf, loader, settings: dict, seed: int) -> Optional[dict]:
    """Both sides, the loader and the RNG streams as the newest complete checkpoint under `root`
    left them; its progress (step, tokens, seconds, records, evaluations), or None for a fresh pair."""
    from bert_ds.checkpoint import zero
    from bert_ds.runtime.distributed import load_rng_state_dict

    tag = zero.latest_complete_tag(str(root)) if root.is_dir() else None
    if tag is None:
        return None
    saved = json.loads((root / tag / zero.COMPLETE).read_text()).get("parity_settings", {})
    for name, value in settings.items():
        was = saved.get(name, SETTING_DEFAULTS.get(name))
        if was != value:
            raise SystemExit(f"error: {root / tag} was saved with {name} = {was!r}, this run has "
                             f"{value!r}: run with the settings it was saved with, or give another --output")
    _, rank_state = zero.load(ours.engine, str(root), tag, world_size=1)
    loader.load_state_dict(rank_state["loader"])
    hf.load_state_dict(rank_state["hf"])
    progress = rank_state["progress"]
    load_rng_state_dict(ours.layout, rank_state["rng"], seed, progress["step"])
    return progress
