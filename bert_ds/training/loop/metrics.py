"""What the pre-training loop logs: one dict per logged step, written to three places.

`MetricsLogger.log(values)` writes the same numbers to a console progress line, a JSON Lines file
and TensorBoard (scalars under "train/<key>"); `log_eval` writes a held-out evaluation the same
three ways, as a line with the EVAL_KEYS ("eval/mlm_loss", ...; TensorBoard under those names). `mlm_loss` is the masked-token cross-entropy over the
selected positions, not a perplexity of the text; `loss` is what was back-propagated (mlm + nsp).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, TextIO

METRIC_KEYS = (
    "step", "consumed_samples", "consumed_tokens", "loss", "mlm_loss", "nsp_loss", "mlm_accuracy",
    "nsp_accuracy", "lr", "grad_norm", "tokens_per_s", "samples_per_s", "model_flops_per_s",
)

EVAL_KEYS = ("eval/mlm_loss", "eval/mlm_accuracy", "eval/nsp_loss", "eval/nsp_accuracy", "eval/samples", "eval/seconds")
PROGRESS_KEYS = ("step", "consumed_samples", "consumed_tokens")


def bert_flops_per_sequence(
    num_layers: int, hidden_size: int, vocab_size: int, seq_length: int,
    predicted_tokens_per_sequence: float, with_nsp: bool = True, training: bool = True,
) -> float:
    """Model FLOPs of one sequence (a multiply-add counts 2), with s = seq_length, h = hidden_size,
    V = vocab_size, p = predicted_tokens_per_sequence, L = num_layers:

        per layer  = 3·2·s·h²  (QKV) + 2·2·s²·h  (scores QKᵀ and context AV) + 2·s·h²  (output proj)
                     + 2·2·s·h·4h  (FFN up and down)                     = 24·s·h² + 4·s²·h
        MLM head   = p·(2·h² + 2·h·V)      dense+decoder on the predicted positions only
        NSP        = 2·h² + 2·h·2          pooler + classifier on [CLS] (only if with_nsp)
        forward    = L·per layer + MLM head + NSP;   training = 3 × forward (backward ≈ 2 × forward)

    Embedding lookups, layer norms, softmax and activations count 0. These are *model* FLOPs (what
    the maths needs), so activation recomputation does not raise them: MFU stays comparable.
    """
    s, h, v = float(seq_length), float(hidden_size), float(vocab_size)
    per_layer = 3 * 2 * s * h * h + 2 * 2 * s * s * h + 2 * s * h * h + 2 * 2 * s * h * 4 * h
    # The decoder only runs on the gathered predicted positions (~15% of s), which is why p, not s.
    mlm_head = predicted_tokens_per_sequence * (2 * h * h + 2 * h * v)
    nsp = (2 * h * h + 2 * h * 2) if with_nsp else 0.0
    forward = num_layers * per_layer + mlm_head + nsp
    return 3 * forward if training else forward


def format_duration(seconds: float) -> str:
    """`42s`, `3m12s`, `2h05m`, `1d03h` (two most significant units); `?` for negative or non-finite."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    total = int(round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


_FLOP_UNITS = (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6))


def format_flops(flops_per_s: float) -> str:
    """`2.1 TFLOP/s`: the largest unit (MFLOP..PFLOP) not above the value, one decimal; MFLOP below 1e6."""
    for unit, scale in _FLOP_UNITS:
        if abs(flops_per_s) >= scale:
            return f"{flops_per_s / scale:.1f} {unit}"
    return f"{flops_per_s / 1e6:.1f} MFLOP/s"


def _fmt(value: Any, spec: str) -> str:
    """A console value: `-` where there is none (no NSP head)."""
    return "-" if value is None else format(value, spec)


def _plain(value: Any) -> Any:
    """A 0-d tensor / numpy scalar as a Python number, so json and TensorBoard see plain values."""
    return value.item() if hasattr(value, "item") else value


def _json_value(value: Any) -> Any:
    # Strict JSON has no NaN/Infinity (jq and many readers reject them): a diverged value is written
    # as null here; the console line and TensorBoard still show it as nan/inf.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Writes each logged step to the console, a JSON Lines file and TensorBoard.

    Contract: `enabled=False` (every rank but the logging one) makes every method a no-op and creates
    no file or directory. The metrics file is opened in append mode (a resumed run continues the
    same file, first dropping the lines logged after the checkpoint it resumes from, so each step is
    listed once; readers, metrics_file.py, still keep the last line of a step listed twice). `start_step` is the step the run resumes from (already completed), so the
    ETA rate and the TensorBoard purge count only this run's steps. The SummaryWriter is created
    on the first `log`. `clock` (seconds, monotonic) is a seam for tests.
    """

    def __init__(
        self, *, total_steps: int, metrics_file: Optional[str] = None,
        tensorboard_dir: Optional[str] = None, enabled: bool = True, start_step: int = 0,
        stream: Optional[TextIO] = None, clock: Callable[[], float] = time.monotonic, restarting: bool = False,
    ) -> None:
        """`restarting`: this run continues whatever an earlier run of its own left (--auto-resume),
        so at step 0 too the lines of an earlier attempt that left no checkpoint are dropped (they
        are redone); a fresh run without it appends to an existing file."""
        self.total_steps = total_steps
        self.enabled = enabled
        self.start_step = start_step
        # Resolved here, not as a default argument, so a later sys.stdout swap (pytest capsys) is seen.
        self.stream = stream if stream is not None else sys.stdout
        self._clock = clock
        self._start_time = clock()
        self._tensorboard_dir = tensorboard_dir
        self._writer: Any = None
        self._file: Optional[TextIO] = None
        if enabled and metrics_file is not None:
            path = Path(metrics_file)
            path.parent.mkdir(parents=True, exist_ok=True)
            if (start_step > 0 or restarting) and path.is_file():
                self._cut_back(path, start_step)
            self._file = path.open("a", encoding="utf-8")

    def log(self, values: Mapping[str, Any]) -> None:
        """Write one step. `values` holds every METRIC_KEYS entry (nsp_* may be None); extra keys
        are written too (after the standard ones in JSON). Raises ValueError naming missing keys."""
        if not self.enabled:
            return
        ordered = self._write(values, METRIC_KEYS, "train/")
        print(self._console_line(ordered), file=self.stream, flush=True)

    def log_eval(self, values: Mapping[str, Any]) -> None:
        """Write one held-out evaluation: PROGRESS_KEYS and EVAL_KEYS (nsp ones may be None),
        extra keys after them; ValueError naming missing keys."""
        if not self.enabled:
            return
        v = self._write(values, PROGRESS_KEYS + EVAL_KEYS, "")
        print(f"eval at step {int(v['step'])} | mlm_loss {_fmt(v['eval/mlm_loss'], '.3f')} | "
              f"mlm_acc {_fmt(v['eval/mlm_accuracy'], '.4f')} | nsp_loss {_fmt(v['eval/nsp_loss'], '.3f')} | "
              f"nsp_acc {_fmt(v['eval/nsp_accuracy'], '.4f')} | {int(v['eval/samples']):,} examples in "
              f"{v['eval/seconds']:.1f}s", file=self.stream, flush=True)

    def _write(self, values: Mapping[str, Any], keys: tuple, tensorboard_prefix: str) -> dict:
        missing = [key for key in keys if key not in values]
        if missing:
            raise ValueError(f"MetricsLogger: missing metric keys: {', '.join(missing)}")
        ordered = {key: _plain(values[key]) for key in keys}
        ordered.update({key: _plain(value) for key, value in values.items() if key not in ordered})
        if self._file is not None:
            record = {key: _json_value(value) for key, value in ordered.items()}
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()  # a killed run keeps every line it logged
        self._write_tensorboard(ordered, tensorboard_prefix)
        return ordered

    def _cut_back(self, path: Path, step: int) -> None:
        """Resuming at `step`: drop the lines an interrupted run logged after its last checkpoint (and
        a line cut short by a kill), so the file lists each step once, as TensorBoard's purge does."""
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        kept = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and int(record.get("step", 0)) <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
        if len(kept) == len(lines):
            return
        partial = path.with_name(path.name + ".tmp")
        partial.write_text("".join(kept), encoding="utf-8")
        partial.replace(path)  # atomic: a kill now leaves the old file or the new one, never half
        by = "the run this one resumes" if step else "an earlier attempt that left no checkpoint"
        self.message(f"{path}: dropped {len(lines) - len(kept)} line(s) logged after step {step} by {by} (they are redone)")

    def message(self, text: str) -> None:
        """A plain console line (e.g. "saved checkpoint ..."); no-op when disabled."""
        if self.enabled:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        """Close the metrics file and the SummaryWriter; safe to call twice."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_tensorboard(self, values: Mapping[str, Any], prefix: str) -> None:
        if self._tensorboard_dir is None:
            return
        if self._writer is None:
            # Imported here: tensorboard is slow to import and only the logging rank needs it.
            from torch.utils.tensorboard import SummaryWriter

            # start_step is the last step the resumed checkpoint completed: purge_step hides the
            # crashed run's events after it, so the redone steps do not appear twice in the curves.
            purge = self.start_step + 1 if self.start_step > 0 else None
            self._writer = SummaryWriter(log_dir=self._tensorboard_dir, purge_step=purge)
        step = int(values["step"])
        for key, value in values.items():
            # None (no NSP head) and non-numbers have no scalar curve; bool is not a metric.
            if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            self._writer.add_scalar(f"{prefix}{key}", value, global_step=step)
        self._writer.flush()

    def _console_line(self, v: Mapping[str, Any]) -> str:
        step = int(v["step"])
        percent = 100.0 * step / self.total_steps if self.total_steps > 0 else 0.0
        parts = [
            f"step {step}/{self.total_steps} ({percent:.1f}%)",
            f"loss {_fmt(v['loss'], '.3f')}",
            f"mlm_loss {_fmt(v['mlm_loss'], '.3f')}",
            f"nsp_loss {_fmt(v['nsp_loss'], '.3f')}",
            f"mlm_acc {_fmt(v['mlm_accuracy'], '.3f')}",
            f"nsp_acc {_fmt(v['nsp_accuracy'], '.3f')}",
            f"lr {_fmt(v['lr'], '.1e')}",
            f"grad_norm {_fmt(v['grad_norm'], '.3g')}",
            f"{_fmt(v['tokens_per_s'], ',.0f')} tok/s",
            "- FLOP/s" if v["model_flops_per_s"] is None else format_flops(v["model_flops_per_s"]),
            f"ETA {self._eta(step)}",
        ]
        return " | ".join(parts)

    def _eta(self, step: int) -> str:
        # The rate counts only steps done since this logger started, so a resumed run (start_step > 0)
        # does not credit itself with the steps of the run it resumed from.
        done = step - self.start_step
        elapsed = self._clock() - self._start_time
        if step >= self.total_steps:
            return format_duration(0)
        if done <= 0 or elapsed <= 0:
            return "?"
        return format_duration((self.total_steps - step) * elapsed / done)
