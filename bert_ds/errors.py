"""How every command ends on a user error: the exception classes that mean "the input is wrong"
(each message one sentence naming the file, line or option) and the one `error:` line they become,
without a traceback. pretrain.py, the fine-tuning entrypoints and `python -m bert_ds.checkpoint`
end this way; the modules that raise them import them from here (config, data, checkpoint)."""

from __future__ import annotations

import os
import signal
import sys


class ConfigError(ValueError):
    """A user-facing configuration problem; the message is one sentence naming the fields."""


class DataError(ValueError):
    """A user-facing data problem; the message names the source, file or record."""


class TokenizerError(ValueError):
    """A user-facing tokenizer problem; the message names the file or path involved."""


class CheckpointError(RuntimeError):
    """A missing, incomplete or mismatched checkpoint; the message names the folder or file."""


USER_ERRORS = (ConfigError, DataError, TokenizerError, CheckpointError)

# Exit codes of a pre-training stopped by a signal after its checkpoint: Slurm's time-limit warning
# (SIGUSR1, the batch script requeues the job) and SIGTERM (scancel, preemption). Here, not in the
# trainer, so that what runs pre-trainings (experiments/step_pool.py) reads them without torch.
EXIT_CODE_FOR_SIGNAL = {signal.SIGUSR1: 99, signal.SIGTERM: 143}


def report(error: Exception, code: int = 2) -> int:
    """Print `error: MESSAGE` (prefixed by the rank in a multi-process job) and return `code`."""
    rank = os.environ.get("RANK", "0")
    prefix = f"[rank {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
    print(f"{prefix}error: {error}", file=sys.stderr)
    return code


class PeerLost(RuntimeError):
    """A collective failed because another process of the job is gone (killed, its node lost, or
    the network between them down): the message says so and names the checkpoint to resume from."""


# What gloo and NCCL say when the other end of a collective is gone or silent past the timeout.
_LOST_PEER_SIGNS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Timed out",
                    "timed out", "Connection refused", "aborted")
_DISTRIBUTED_ERRORS = {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"}


def lost_peer(error: BaseException) -> bool:
    """Whether `error`, raised by a collective, means a peer process is gone (torch's distributed
    error types, or gloo's plain RuntimeError naming a closed, reset or timed-out connection)."""
    if _DISTRIBUTED_ERRORS & {cls.__name__ for cls in type(error).__mro__}:
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("gloo" in text or "NCCL" in text) and any(s in text for s in _LOST_PEER_SIGNS)


def first_line(error: BaseException, limit: int = 300) -> str:
    """The first line of an error's message, cut to `limit` characters (library messages can be long)."""
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return line if len(line) <= limit else line[:limit] + " ..."
