"""Shared pieces of the fuzz tests (test_fuzz_options.py, test_fuzz_data.py).

Fuzz tests (hypothesis): random command lines and random corpus / fine-tuning files must end in a
result or in the clear user-error path, never in another exception or a hang.

The user-error path is what the entrypoints catch and print as one `error: ...` line (exit 2):
ConfigError, DataError (FinetuneDataError included), TokenizerError, CheckpointError, plus
argparse's own usage errors (SystemExit(2)). Every test is derandomized, so CI sees the same
examples on every run.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st



def fuzz(max_examples: int):
    """Deterministic, deadline-free settings that tolerate the session fixtures.
    BERT_DS_FUZZ_SCALE=10 runs ten times as many examples (a deeper local search)."""
    return settings(
        max_examples=max(1, int(max_examples * float(os.environ.get("BERT_DS_FUZZ_SCALE", "1")))),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def mostly(good, bad, times: int = 5):
    """`good` about `times` times as often as `bad`, so that the success path is exercised too
    (shrinking towards `good`)."""
    return st.integers(0, times).flatmap(lambda i: bad if i == times else good)


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that no `except Exception` in the code under test hides it."""


@contextlib.contextmanager
def time_limit(seconds: int, what: str):
    """Fail (rather than hang the suite) when the body runs longer than `seconds`."""

    def alarm(_signum, _frame):
        raise Hang()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    except Hang:
        raise AssertionError(f"hang: {what} ran longer than {seconds} s") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def outcome(call, *user_errors):
    """`call()`'s result, or None when it raised one of `user_errors` (any other exception propagates)."""
    try:
        return call()
    except user_errors:
        return None


@contextlib.contextmanager
def quiet_argparse():
    """Swallow argparse's usage text; SystemExit(2) (a usage error) or SystemExit(0) after --help
    (which abbreviations like `--he` reach) are the allowed ways for it to leave."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield
    except SystemExit as exit_:
        if exit_.code == 0:
            assert out.getvalue().startswith("usage:"), "SystemExit(0) without --help"
        else:
            assert exit_.code == 2, f"argparse exit {exit_.code}: {err.getvalue()}"
        raise


# A short command-line or file text (no surrogates, no NUL).
_ARG_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)

# Any JSON value (DeepSpeed configs, corpus records, SQuAD files).
_JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
