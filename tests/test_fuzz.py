"""Fuzz tests (hypothesis): random command lines and random corpus / fine-tuning files must end in
a result or in the clear user-error path, never in another exception or a hang.

The user-error path is what the entrypoints catch and print as one `error: ...` line (exit 2):
ConfigError, DataError (FinetuneDataError included), TokenizerError, CheckpointError, plus
argparse's own usage errors (SystemExit(2)). Every test is derandomized, so CI sees the same
examples on every run.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import itertools
import json
import math
import os
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from bert_ds.config import ConfigError, DataConfig, model_preset, padded_vocab_size, validate_layout
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.data.sources import DataError, parse_sources
from bert_ds.data.tokenizer import TokenizerError
from bert_ds.finetune.tasks import GLUE_TASKS, FinetuneDataError


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


# --- command lines --------------------------------------------------------------------------

_INTS = st.one_of(
    st.integers(-2, 40), st.sampled_from([0, -1, 64, 128, 512, 2**31, 2**63, 2**64, 10**30]), st.integers()
).map(str)
_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "1e-320", "-0.0", "0.5", "1e-4", "2e-5", "0x10", "1_0"]),
)
_ARG_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_JUNK = st.one_of(
    _ARG_TEXT,
    st.sampled_from(["", "-", "--", "-1", "x", "a" * 300, "1,2", ",", "nan", "sample", "hf:", "@", "a=b@c"]),
)
_UNKNOWN = st.sampled_from(["--bogus", "-x", "--seq", "--h", "--lr=", "---", "--", "-", "junk", "--data-dir", "-1"])


def _comma_list(item):
    return st.lists(item, min_size=0, max_size=4).map(",".join)


def _value(action: argparse.Action):
    """Plausible values for `action` (its choices, numbers of its type) mixed with junk."""
    plausible = []
    if action.choices:
        plausible.append(st.sampled_from([str(c) for c in action.choices]))
    if action.type is int:
        plausible.append(_INTS)
    elif action.type is float:
        plausible.append(_FLOATS)
    elif getattr(action.type, "__name__", "") == "_ints":
        plausible.append(_comma_list(_INTS))
    elif getattr(action.type, "__name__", "") == "_floats":
        plausible.append(_comma_list(_FLOATS))
    return st.one_of(*plausible, _JUNK) if plausible else _JUNK


def _option(action: argparse.Action):
    """One occurrence of `action` on a command line: its flag and 0-3 values (or `--flag=value`)."""
    flag = st.sampled_from(action.option_strings)
    if action.nargs == 0:
        return flag.map(lambda f: [f])
    values = st.lists(_value(action), min_size=0, max_size=3)
    separate = st.tuples(flag, values).map(lambda fv: [fv[0], *fv[1]])
    joined = st.tuples(flag, _value(action)).map(lambda fv: [f"{fv[0]}={fv[1]}"])
    return st.one_of(separate, separate, joined)


def command_lines(parser: argparse.ArgumentParser, required=()):
    """argv lists built from `parser`'s real options (repeats allowed), a few unknown options or
    stray values, and usually the `required` prefix so that the later checks are reached."""
    actions = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
    occurrence = st.one_of(*[_option(a) for a in actions], _UNKNOWN.map(lambda u: [u]), _JUNK.map(lambda j: [j]))
    weighted = st.one_of(*[_option(a) for a in actions], *[_option(a) for a in actions], occurrence)
    body = st.lists(weighted, max_size=6).map(lambda parts: [token for part in parts for token in part])
    prefix = st.sampled_from([list(required), list(required), []]) if required else st.just([])
    argv = st.tuples(prefix, body).map(lambda pb: pb[0] + pb[1])
    return argv


def _pretrain_parser():
    from bert_ds.training.args import _parser

    return _parser()


SAMPLE_VOCAB = padded_vocab_size(2000)  # the sample tokenizer's size, as setup_parallel pads it


class _SampleSizedTokenizer:
    """Stands in for the sample's tokenizer in launch plans (its size only: nothing is read)."""

    name, vocab_size = "sample", 2000

    def casing(self) -> str:
        return "as trained"


def pretraining_checks(argv: list[str]) -> None:
    """What bert_ds/pretrain.py does with a command line before it starts processes: parse, then
    the launch plan (sizes, batch plan, DeepSpeed config, data paths, resume) at several worlds."""
    from bert_ds.training.args import parse_args
    from bert_ds.training.plan import resolve_plan

    with quiet_argparse():
        run = parse_args(argv)
    for world in (1, 2, 3, 4, 8):
        world_run = dataclasses.replace(run, world_size=world)
        plan = outcome(lambda: resolve_plan(world_run, target="cpu", tokenizer=_SampleSizedTokenizer(), sample_data=False),
                       ConfigError, DataError, TokenizerError, CheckpointError)
        event(f"plan resolved: {plan is not None}")
        if plan is not None:
            batch = plan.batch
            assert batch.micro_batch_size * batch.data_parallel * batch.accumulation == run.global_batch_size
            assert plan.ds_config["train_batch_size"] == run.global_batch_size
            assert plan.zero_stage in (0, 1, 2, 3) and plan.ds_config["zero_optimization"]["stage"] == plan.zero_stage
            assert isinstance(plan.deepspeed.offloaded, bool)


@fuzz(400)
@given(argv=command_lines(_pretrain_parser()))
@example(argv=["--deepspeed-config", "a" * 300])  # was an OSError (file name too long)
def test_pretraining_command_line(argv):
    outcome(lambda: pretraining_checks(argv), ConfigError, SystemExit)


def _finetune_parser():
    from bert_ds.finetune import glue
    from bert_ds.finetune.args import add_common_arguments

    parser = argparse.ArgumentParser(prog="bert_ds/finetune/glue.py")  # the order of entrypoint.main
    glue.add_arguments(parser)
    add_common_arguments(parser)
    return parser


# Runs per job beyond which FinetuneConfig.settings() is not called: --restarts 10**30 would
# build a list of 10**30 settings (see test_finetune_options_refused_for_later_failures).
MAX_RUNS_LISTED = 10_000


def finetuning_checks(argv: list[str]) -> None:
    """What a fine-tuning entrypoint does before it loads data or weights: parse, build the job,
    the model config (random-weights path of starting_point.resolve), the layout and each run's
    batch plan and DeepSpeed config."""
    from bert_ds.finetune.args import batch_plan, config_from_args
    from bert_ds.finetune.glue import DEFAULT_SEQ_LENGTH
    from bert_ds.training.ds_config import build_deepspeed_config

    with quiet_argparse():
        args = _finetune_parser().parse_args(argv)
    job = config_from_args(args, DEFAULT_SEQ_LENGTH)
    overrides = dict(vocab_size=SAMPLE_VOCAB)
    if job.dropout is not None:
        overrides.update(hidden_dropout=job.dropout, attention_dropout=job.dropout)
    model_config = model_preset(job.preset).replace(**overrides)
    tp = job.tensor_parallel
    layouts = [outcome(lambda: validate_layout(model_config, world, tp, 1), ConfigError) for world in (1, 2, 4)]
    grid = len(job.grid_batch_sizes) * len(job.grid_lrs) * len(job.grid_epochs) if job.grid else 1
    if grid * job.restarts > MAX_RUNS_LISTED:
        return
    for run_settings in job.settings()[:8]:
        for dp in [dp for dp in layouts if dp] + [3]:
            plan = outcome(lambda: batch_plan(job, run_settings, dp, model_config), ConfigError)
            if plan is not None:
                built = outcome(lambda: build_deepspeed_config(job.deepspeed_config, plan, "cpu", zero_stage=job.zero_stage,
                                                               clip_grad=job.clip_grad), ConfigError)
                event(f"DeepSpeed config built: {built is not None}")


@fuzz(400)
@given(argv=command_lines(_finetune_parser(), required=("--task", "sst2", "--output", "out")))
def test_finetuning_command_line(argv):
    outcome(lambda: finetuning_checks(argv), ConfigError, DataError, SystemExit)


# Values argparse accepts but that would fail later (mid-run) or train with nonsense: the option
# checks must refuse them up front.
@pytest.mark.parametrize(
    "argv",
    [
        ["--lr", "nan"],  # nan learning rate: every weight becomes nan
        ["--lr", "inf"],
        ["--weight-decay", "nan"],
        ["--clip-grad", "nan"],
        ["--clip-grad", "-1"],  # negative clipping threshold handed to DeepSpeed
        ["--stop-at-step", "0"],  # `run.stop_at_step or run.train_steps` ignores 0
        ["--seed", str(2**64)],  # torch.manual_seed overflows in init_parallel
    ],
    ids=lambda argv: " ".join(argv),
)
def test_pretraining_options_refused_for_later_failures(argv):
    from bert_ds.training.args import parse_args

    with pytest.raises(ConfigError):
        parse_args(argv)


@pytest.mark.parametrize(
    "extra",
    [
        ["--eval-batch-size", "0"],  # predict(): range(..., 0) raises ValueError after training
        ["--eval-batch-size", "-1"],
        ["--max-seq-length", "0"],  # silently replaced by the task default
        ["--restarts", str(10**12)],  # settings() builds a list of 10**12 runs (memory, hang)
        ["--grid", "--grid-lrs=-1,nan"],  # grid learning rates are never checked
        ["--lr", "inf"],
        ["--clip-grad", "nan"],
        ["--seed", str(2**64)],  # torch.manual_seed overflows
    ],
    ids=lambda argv: " ".join(argv),
)
def test_finetune_options_refused_for_later_failures(extra):
    from bert_ds.finetune.args import config_from_args

    args = _finetune_parser().parse_args(["--task", "sst2", "--output", "out", *extra])
    with pytest.raises(ConfigError):
        config_from_args(args, 128)


@pytest.mark.parametrize(
    "argv", [["--seq-length=--"], ["--deepspeed-config=--"], ["--epochs=--"], ["--lr=--"]], ids=" ".join
)
def test_option_equals_double_dash_is_refused(argv):
    """Python 3.11's argparse turns `--seq-length=--` into seq_length=[] (a TypeError later)
    instead of a usage error; the args modules should refuse it as one."""
    from bert_ds.finetune.args import config_from_args
    from bert_ds.training.args import parse_args

    with quiet_argparse(), pytest.raises((SystemExit, ConfigError)):
        if argv[0].startswith(("--epochs", "--lr")):
            config_from_args(_finetune_parser().parse_args(["--task", "sst2", "--output", "out", *argv]), 128)
        else:
            parse_args(argv)


# --- DeepSpeed JSON configs -----------------------------------------------------------------

_JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_DS_KEYS = st.sampled_from(
    ["zero_optimization", "bf16", "fp16", "optimizer", "scheduler", "stage", "enabled", "offload_optimizer",
     "device", "steps_per_print", "train_batch_size"]
)
_DS_VALUE = st.recursive(
    _JSON_SCALARS, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_DS_KEYS, inner, max_size=4),
    max_leaves=8,
)
_DS_FILE = st.one_of(
    st.dictionaries(_DS_KEYS, _DS_VALUE, max_size=4).map(lambda d: json.dumps(d).encode()),
    _JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
    st.sampled_from([b"", b"{", b"\xff\xfe{}", b"\xef\xbb\xbf{}", b"[" * 5000, b'{"a": NaN}']),
)


@fuzz(250)
@given(content=_DS_FILE, zero_stage_option=st.sampled_from([None, 0, 1, 2, 3]), pp=st.sampled_from([1, 2]))
# Each was an uncaught exception (UnicodeDecodeError, AttributeError, RecursionError) or a stage
# DeepSpeed does not take (1.0).
@example(content=b"\x80{}", zero_stage_option=None, pp=1)
@example(content=b'{"bf16": true}', zero_stage_option=None, pp=1)
@example(content=b'{"zero_optimization": {"offload_optimizer": "cpu"}}', zero_stage_option=None, pp=1)
@example(content=b'{"zero_optimization": {"stage": 1.0}}', zero_stage_option=None, pp=1)
@example(content=b"[" * 100_000, zero_stage_option=None, pp=1)
def test_deepspeed_config_file(tmp_path, content, zero_stage_option, pp):
    from bert_ds.training.args import parse_args
    from bert_ds.training.batch_plan import BatchPlan
    from bert_ds.training.ds_config import pretraining_deepspeed_config

    path = tmp_path / "ds.json"
    path.write_bytes(content)
    argv = ["--deepspeed-config", str(path), "--pipeline-parallel", str(pp)]
    argv += [] if zero_stage_option is None else ["--zero-stage", str(zero_stage_option)]
    run = outcome(lambda: parse_args(argv), ConfigError)
    if run is None:
        return
    built = outcome(lambda: pretraining_deepspeed_config(run, BatchPlan(16, 8, 1), "cpu"), ConfigError)
    if built is not None:
        assert built.zero_stage in (0, 1, 2, 3)
        assert isinstance(built.offloaded, bool)


# --- pre-training corpora -------------------------------------------------------------------

_WORDS = ["the", "cat", "sat", "on", "a", "mat", "Paris", "river", "42", "quickly", "ünïcödé", "東京"]
_SENTENCE = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=12).map(lambda w: " ".join(w).capitalize() + ".")
_PIECE = st.one_of(
    _SENTENCE, _SENTENCE, st.text(max_size=30),
    st.sampled_from(["", " ", "\n", "\n\n", "\r\n", "\r", "\t", "\ufeff", "\x00", "\ufffd", "?!", '"', "\u2028"]),
    st.integers(2_500, 6_000).map(lambda n: "x" * n),  # a huge line without spaces
    st.integers(500, 1_500).map(lambda n: "word " * n),  # a huge line without punctuation
)
_DOCUMENT = st.lists(_PIECE, max_size=12).map("".join)
_TXT = st.one_of(
    _DOCUMENT.map(lambda t: t.encode()),
    _DOCUMENT.map(lambda t: ("\ufeff" + t).encode()),
    _DOCUMENT.map(lambda t: t.replace("\n", "\r\n").encode()),
    st.tuples(_DOCUMENT, st.binary(max_size=30), _DOCUMENT).map(lambda p: p[0].encode() + p[1] + p[2].encode()),
    st.binary(max_size=200),
    st.sampled_from([b"", b"   \n\t\r\n  ", b"\n" * 50, b"\xef\xbb\xbf", b"\x00" * 10, b"\xff\xfe\xfd"]),
)
_RECORD = st.fixed_dictionaries(
    {}, optional={"text": st.one_of(_DOCUMENT, _DOCUMENT, _JSON), "id": _JSON, "meta": _JSON}
)
_GOOD_RECORD = st.fixed_dictionaries({"text": _DOCUMENT}, optional={"id": st.integers(0, 9)})
_JSONL_LINE = mostly(
    st.one_of(_GOOD_RECORD.map(json.dumps), _GOOD_RECORD.map(lambda r: json.dumps(r, ensure_ascii=False))),
    st.one_of(
        _RECORD.map(json.dumps),
        _JSON.map(json.dumps),
        st.text(max_size=20),  # mostly invalid JSON
        st.sampled_from(
            ["", "{}", '{"text": "\\ud800 lone surrogate. Yes."}', '{"text": null}', "{bad", "[1, 2]", "null"]
        ),
    ),
    times=8,
)
_JSONL = mostly(
    st.tuples(st.lists(_JSONL_LINE, min_size=1, max_size=6), st.sampled_from(["\n", "\r\n"]))
    .map(lambda lines_end: (lines_end[1].join(lines_end[0]) + lines_end[1]).encode()),
    st.one_of(
        st.lists(_JSONL_LINE, max_size=6).map(lambda lines: "\n".join(lines).encode()),
        st.binary(max_size=100),
        st.lists(_RECORD, max_size=3).map(lambda records: json.dumps(records).encode()),  # one JSON array
    ),
)
_BATCH_KEYS = {"input_ids", "token_type_ids", "attention_mask", "loss_mask", "labels", "example_uid"}


def _read_batches(files: dict[str, bytes], tokenizer, config: DataConfig) -> None:
    """Write `files` into a fresh folder and take a few batches from it (or a DataError, or a
    ConfigError for a bad seed)."""
    from bert_ds.data.loader import PretrainingLoader

    with tempfile.TemporaryDirectory() as folder:
        for name, content in files.items():
            (Path(folder) / name).write_bytes(content)
        location = folder if len(files) > 1 else str(Path(folder) / next(iter(files)))
        with time_limit(30, f"reading {sorted(files)}"):
            try:
                loader = PretrainingLoader(parse_sources([f"corpus={location}"]), tokenizer, config)
                batches = list(itertools.islice(iter(loader), 3))
            except (DataError, ConfigError) as error:
                event(type(error).__name__)
                return
    event("batches")
    assert len(batches) == 3
    for batch in batches:
        assert _BATCH_KEYS <= set(batch)
        assert tuple(batch["input_ids"].shape) == (config.micro_batch_size, config.seq_length)


_SMALL = DataConfig(seq_length=64, micro_batch_size=2, block_documents=4)
_DATA_CONFIG = st.builds(
    DataConfig, seq_length=st.just(64), micro_batch_size=st.just(2), block_documents=st.just(4),
    objective=st.sampled_from(["mlm_nsp", "mlm", "ltr"]), txt_documents=st.sampled_from(["file", "blank_line"]),
    seed=mostly(st.integers(0, 3), st.sampled_from([-1, 2**63, 2**64])),
)


@fuzz(60)
@given(contents=st.lists(_TXT, min_size=1, max_size=3), config=_DATA_CONFIG)
@example(contents=[b"One. Two."], config=dataclasses.replace(_SMALL, seed=-1))  # was a ValueError from numpy
def test_txt_corpus(sample_tokenizer, contents, config):
    _read_batches({f"part{i}.txt": content for i, content in enumerate(contents)}, sample_tokenizer, config)


@fuzz(60)
@given(contents=st.lists(_JSONL, min_size=1, max_size=2), config=_DATA_CONFIG)
@example(contents=[b"null"], config=_SMALL)  # pyarrow segfault (the whole process died)
@example(contents=[b'{"text": "A b."}\n', b"  \r\nnull\n"], config=_SMALL)
@example(contents=[b'[null, {"text": "A b."}]'], config=_SMALL)  # the same through datasets' JSON-array path
@example(contents=[b""], config=_SMALL)  # RuntimeError: generator raised StopIteration
@example(contents=[b'{"text": "A b. C d."}\n', b"\n"], config=_SMALL)  # a cast error at some epochs only
@example(contents=[b'\n{"text": ""}\n{"text": []}'], config=_SMALL)  # ValueError from the reader's open
def test_jsonl_corpus(sample_tokenizer, contents, config):
    _read_batches({f"part{i}.jsonl": content for i, content in enumerate(contents)}, sample_tokenizer, config)


@pytest.mark.parametrize("content", [b"", b" \n\t\r\n \n", b"\xef\xbb\xbf\n\n", b"\xff\xfe"], ids=repr)
def test_empty_corpus_is_a_data_error_not_a_hang(sample_tokenizer, tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    from bert_ds.data.loader import PretrainingLoader

    loader = PretrainingLoader(parse_sources([f"corpus={path}"]), sample_tokenizer, _SMALL)
    with time_limit(30, "an empty corpus"), pytest.raises(DataError, match="no usable document"):
        next(iter(loader))


_SPECS = st.sampled_from(["sample", "a=x@nan", "a=x@inf", "x@-1", "=@", "hf:a:b", "a=b=c@1e400"])


@fuzz(150)
@given(specs=st.lists(st.one_of(_ARG_TEXT, _SPECS), max_size=3))
@example(specs=["a=x@nan"])  # was accepted: nan token shares
def test_data_source_specs(specs):
    sources = outcome(lambda: parse_sources(specs), DataError)
    if sources is not None:
        assert all(math.isfinite(s.weight) and s.weight > 0 and s.location for s in sources)


# --- fine-tuning files ----------------------------------------------------------------------

_CELL = st.one_of(
    st.sampled_from(_WORDS).map(str),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n"), max_size=15),
    st.sampled_from(["", '"', "'", "\r", "0", "1", "-1", "2", "nan", "inf", "5.0", "1e400", "entailment", "\x00"]),
)


def examples_or_error(load) -> list:
    """The examples `load()` returns (its report must count them), or none after a FinetuneDataError."""
    loaded = outcome(load, FinetuneDataError)
    event(f"examples read: {loaded is not None and bool(loaded[0])}")
    if loaded is None:
        return []
    examples, report = loaded
    assert report.rows == len(examples)
    return examples


def _glue_lines(task, split: str):
    is_test = split in task.test_splits
    if task.headerless_columns and not is_test:
        columns = list(task.headerless_columns)
        header = st.just([])
    else:
        columns = ["index"] + list(task.text_columns) + ([] if is_test else [task.label_column])
        header = mostly(st.permutations(columns), st.lists(st.sampled_from(columns + ["extra"]), max_size=5))
        header = header.map(lambda names: ["\t".join(names)])
    label = mostly(st.sampled_from(list(task.labels or ("0.5", "3", "-1.25", " 2 "))), _CELL, times=20)
    row = st.lists(st.one_of(_CELL, label), min_size=len(columns) - 1, max_size=len(columns) + 1).map("\t".join)
    good_row = st.tuples(*[label if name == task.label_column else _CELL for name in columns]).map("\t".join)
    rows = st.lists(mostly(good_row, row, times=10), min_size=1, max_size=8)
    return st.tuples(header, rows).map(lambda hr: hr[0] + hr[1])


@st.composite
def glue_files(draw):
    task = GLUE_TASKS[draw(st.sampled_from(["cola", "sst2", "mrpc", "stsb", "mnli"]))]
    split = draw(st.sampled_from(task.splits))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join(draw(_glue_lines(task, split))) + draw(st.sampled_from(["", newline]))
    content = draw(
        mostly(
            st.one_of(st.just(text.encode()), st.just(("\ufeff" + text).encode())),
            st.one_of(st.binary(max_size=60), st.tuples(st.just(text.encode()), st.binary(max_size=8)).map(b"".join)),
        )
    )
    return task, split, content


@fuzz(250)
@given(case=glue_files())
def test_glue_file(tmp_path, case):
    from bert_ds.finetune.glue_data import load_glue

    task, split, content = case
    path = tmp_path / task.folder / f"{split}.tsv"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    for example in examples_or_error(lambda: load_glue(task, split, str(tmp_path))):
        assert isinstance(example.guid, str) and isinstance(example.text_a, str)
        if split in task.test_splits:
            assert example.label is None
        elif task.is_regression:
            assert math.isfinite(example.label)
        else:
            assert 0 <= example.label < len(task.labels)


_MISSING = object()


def _maybe(draw, value, wrong=_JSON):
    """`value`, or (rarely) a wrong-typed value or nothing (the key is dropped)."""
    return draw(mostly(st.just(value), st.one_of(wrong, st.just(_MISSING)), times=30))


def _obj(**fields):
    return {k: v for k, v in fields.items() if v is not _MISSING}


@st.composite
def squad_documents(draw):
    articles = []
    for a in range(draw(mostly(st.integers(1, 2), st.just(0)))):
        paragraphs = []
        for p in range(draw(mostly(st.integers(1, 2), st.just(0)))):
            context = draw(st.one_of(_DOCUMENT.filter(bool), st.text(max_size=30)))
            qas = []
            for q in range(draw(mostly(st.integers(1, 3), st.just(0)))):
                answers = []
                for _ in range(draw(st.integers(0, 2))):
                    start = draw(st.integers(0, max(len(context) - 1, 0)))
                    end = draw(st.integers(start, len(context)))
                    wrong = st.one_of(st.integers(-3, len(context) + 3), st.just(True), st.just(2**70), st.just(1.0))
                    offset = draw(mostly(st.just(start), wrong, times=20))
                    answers.append(_obj(text=_maybe(draw, context[start:end]), answer_start=_maybe(draw, offset)))
                consistent = st.just(True) if not answers else st.sampled_from([_MISSING, False])
                wrong = st.sampled_from([_MISSING, False, True, "false", 0, None])
                impossible = draw(mostly(consistent, wrong, times=20))
                qid = draw(mostly(st.just(f"q{a}-{p}-{q}"), st.one_of(st.just("dup"), _JSON), times=20))
                qas.append(_obj(id=_maybe(draw, qid), question=_maybe(draw, "Who?"), answers=_maybe(draw, answers),
                                is_impossible=impossible))
            paragraphs.append(_obj(context=_maybe(draw, context), qas=_maybe(draw, qas)))
        articles.append(_obj(title=_maybe(draw, f"T{a}"), paragraphs=_maybe(draw, paragraphs)))
    document = _obj(version="1.1", data=_maybe(draw, articles))
    return draw(
        mostly(
            st.one_of(
                st.just(json.dumps(document).encode()),
                st.just(json.dumps(document, ensure_ascii=False).encode("utf-8-sig")),
            ),
            st.one_of(
                st.binary(max_size=60), _JSON.map(lambda v: json.dumps(v).encode()),
                st.sampled_from(
                    [b"", b"[" * 100_000, b'{"data": NaN}', b"\xff{}", b'{"data": [{"paragraphs": "x"}]}']
                ),
            ),
        )
    )


_SQUAD_TRUE_OFFSET = {"data": [{"title": "T", "paragraphs": [{"context": "abc", "qas": [
    {"id": "q", "question": "Q?", "answers": [{"text": "b", "answer_start": True}]}]}]}]}


@fuzz(250)
@given(content=squad_documents(), version=st.sampled_from(["1.1", "2.0"]))
@example(content=b"[" * 100_000, version="1.1")  # was a RecursionError
@example(content=json.dumps(_SQUAD_TRUE_OFFSET).encode(), version="1.1")  # was accepted with offset True
def test_squad_file(tmp_path, content, version):
    from bert_ds.finetune.squad_data import load_squad

    (tmp_path / f"train-v{version}.json").write_bytes(content)
    examples = examples_or_error(lambda: load_squad("train", str(tmp_path), version))
    assert len({e.qid for e in examples}) == len(examples)
    for example in examples:
        assert all(isinstance(v, str) for v in (example.qid, example.question, example.context, example.title))
        assert bool(example.answer_texts) != example.is_impossible
        for text, start in zip(example.answer_texts, example.answer_starts, strict=True):
            assert isinstance(text, str) and type(start) is int
            assert example.context[start : start + len(text)] == text


_SWAG_HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
                "ending0", "ending1", "ending2", "ending3", "label"]


@st.composite
def swag_files(draw):
    split = draw(st.sampled_from(["train", "val", "dev", "test"]))
    header = draw(mostly(
        st.one_of(st.just(_SWAG_HEADER), st.permutations(_SWAG_HEADER)),
        st.one_of(st.just(_SWAG_HEADER[:-1]), st.lists(st.sampled_from(_SWAG_HEADER), max_size=6)),
    ))
    label = mostly(st.sampled_from(["0", "1", "2", "3"] + ([""] if split == "test" else [])),
                   st.one_of(st.sampled_from(["", "-1", "4", " 2 ", "x", "1.0"]), _CELL), times=20)
    good_row = st.tuples(*[label if name == "label" else _CELL for name in header]).map(list)
    row = st.lists(_CELL, min_size=max(len(header) - 1, 0), max_size=len(header) + 1)
    rows = draw(st.lists(mostly(good_row, row, times=20), min_size=1, max_size=6))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=draw(st.sampled_from(["\n", "\r\n"])))
    writer.writerow(header)
    writer.writerows(rows)
    text = out.getvalue()
    content = draw(
        mostly(
            st.one_of(st.just(text.encode()), st.just(text.encode("utf-8-sig"))),
            st.one_of(
                st.binary(max_size=60), st.tuples(st.just(text.encode()), st.binary(max_size=8)).map(b"".join),
                st.just(text.encode() + b'0,"unterminated'),
                st.just(text.encode() + b'0,"' + b"y" * 140_000 + b'"\n'),  # beyond csv's field size limit
            ),
        )
    )
    return split, content


@fuzz(250)
@given(case=swag_files())
@example(case=("train", b"\x80"))  # was a UnicodeDecodeError
@example(case=("train", b'a,"' + b"y" * 140_000 + b'"\n'))  # was csv.Error (field larger than field limit)
def test_swag_file(tmp_path, case):
    from bert_ds.finetune.swag_data import SWAG_FILES, load_swag

    split, content = case
    (tmp_path / SWAG_FILES[split]).write_bytes(content)
    for example in examples_or_error(lambda: load_swag(split, str(tmp_path))):
        assert all(isinstance(text, str) for text in (example.context, example.start, *example.endings))
        assert len(example.endings) == 4
        assert example.label in ((None, 0, 1, 2, 3) if split == "test" else (0, 1, 2, 3))


_PATHS = st.one_of(
    _ARG_TEXT, st.sampled_from(["", ".", "/", "a" * 300, "/" + "b" * 255 + "/x", "hf:", "glue_data\x00"]),
)


@fuzz(120)
@given(data=_PATHS, reader=st.sampled_from(["glue", "squad", "swag"]))
@example(data="a" * 300, reader="glue")  # was an OSError (file name too long), as for squad and swag
def test_finetune_data_locations(data, reader):
    """--data-dir / data paths that name nothing readable (too long, NUL bytes, ...) end as a
    FinetuneDataError naming the path; hub specs are not fetched here."""
    from bert_ds.finetune.glue_data import load_glue
    from bert_ds.finetune.squad_data import load_squad
    from bert_ds.finetune.swag_data import load_swag

    if data.startswith("hf:"):
        return
    load = {"glue": lambda: load_glue("sst2", "train", data), "squad": lambda: load_squad("train", data),
            "swag": lambda: load_swag("train", data)}[reader]
    outcome(load, FinetuneDataError)
