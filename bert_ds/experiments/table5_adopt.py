"""Table 5's `--pretrained OBJECTIVE=DIR`: a finished pre-training run of the scale's recipe, seed
and stream used as that objective's model instead of pre-training it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from bert_ds.errors import ConfigError
from bert_ds.experiments.table5_scales import Scale
from bert_ds.training.loop.metrics_file import read_metrics


def adopt_pretrained(folder: Path, run: Path, objective: str, scale: Scale) -> Optional[float]:
    """Use a finished pre-training run (its --save folder) as OUTPUT/pretrain/OBJECTIVE: checked to
    have ended at the scale's last step with its model, objective and batch (the rest of the recipe,
    seed and stream are the caller's word), then linked in with its metrics. Returns the run's
    training seconds (its metrics' last `train_seconds`, summed over its resumed runs), if recorded."""
    from bert_ds.checkpoint import zero

    if not run.is_dir():
        raise ConfigError(f"--pretrained {objective}={run}: no such folder.")
    latest = zero.latest_complete_tag(str(run))
    if latest is None:
        raise ConfigError(f"--pretrained {objective}={run}: holds no complete checkpoint.")
    marker = zero.read_marker(str(run), latest)
    stored = marker.get("run", {})
    expected = {"preset": scale.preset, "train_steps": scale.pretrain_steps, "global_batch_size": scale.global_batch_size}
    wrong = {key: stored.get(key) for key, value in expected.items() if stored.get(key) != value}
    if int(latest.removeprefix("step")) != scale.pretrain_steps or wrong:
        raise ConfigError(f"--pretrained {objective}={run}: its latest checkpoint is {latest} with {wrong or stored}; "
                          f"the scale needs {scale.pretrain_steps} steps of {expected}.")
    if (marker.get("model_config") or {}).get("layer_norm_position", scale.layer_norm_position) != scale.layer_norm_position:
        raise ConfigError(f"--pretrained {objective}={run}: not {scale.layer_norm_position}-LN as the scale's models.")
    folder.mkdir(parents=True, exist_ok=True)
    for name, target in (("ckpt", run), ("metrics.jsonl", run / "metrics.jsonl")):
        link = folder / name
        if link.is_symlink() and link.resolve() == target.resolve():
            continue  # adopted before
        if link.exists() or link.is_symlink():  # a pre-training of its own began here (another job's, a stopped one)
            raise ConfigError(f"--pretrained {objective}={run}: {link} already holds a pre-training begun in this "
                              "experiment; remove it (and its metrics.jsonl) to adopt the finished run instead.")
        if target.exists():
            link.symlink_to(target.resolve())
    (folder / "done.json").write_text(json.dumps(dict(objective=objective, steps=scale.pretrain_steps, adopted=str(run))))
    seconds = [line["train_seconds"] for line in read_metrics(run / "metrics.jsonl", while_written=True)[0] if "train_seconds" in line]
    return seconds[-1] if seconds else None
