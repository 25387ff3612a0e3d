"""How every command ends on a user error: the exception classes that mean "the input is wrong"
(each message one sentence naming the file, line or option) and the one `error:` line they become,
without a traceback. pretrain.py, the fine-tuning entrypoints and `python -m bert_ds.checkpoint`
end this way; the modules that raise them import them from here (config, data, checkpoint)."""

from __future__ import annotations

import os
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


def report(error: Exception, code: int = 2) -> int:
    """Print `error: MESSAGE` (prefixed by the rank in a multi-process job) and return `code`."""
    rank = os.environ.get("RANK", "0")
    prefix = f"[rank {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" else ""
    print(f"{prefix}error: {error}", file=sys.stderr)
    return code
