"""Fuzz: random pre-training and fine-tuning command lines and DeepSpeed JSON files (tests/support/fuzzing.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from bert_ds.config import ConfigError, model_preset, padded_vocab_size, validate_layout
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.data.sources import DataError
from bert_ds.data.tokenizer.load import TokenizerError
from tests.support.fuzzing import _ARG_TEXT, _JSON, _JSON_SCALARS, fuzz, mostly, outcome, quiet_argparse, time_limit  # noqa: F401


# --- command lines --------------------------------------------------------------------------

_INTS = st.one_of(
    st.integers(-2, 40), st.sampled_from([0, -1, 64, 128, 512, 2**31, 2**63, 2**64, 10**30]), st.integers()
).map(str)
_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "1e-320", "-0.0", "0.5", "1e-4", "2e-5", "0x10", "1_0"]),
)
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
    from bert_ds.training.config.args import _parser

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
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.resolve import resolve_plan

    with quiet_argparse():
        run = parse_args(argv)
    for world in (1, 2, 3, 4, 8):
        world_run = dataclasses.replace(run, plan=dataclasses.replace(run.plan, world_size=world))
        plan = outcome(lambda: resolve_plan(world_run, target="cpu", tokenizer=_SampleSizedTokenizer(), sample_data=False),
                       ConfigError, DataError, TokenizerError, CheckpointError)
        event(f"plan resolved: {plan is not None}")
        if plan is not None:
            batch = plan.batch
            assert batch.micro_batch_size * batch.data_parallel * batch.accumulation == run.optim.global_batch_size
            assert plan.ds_config["train_batch_size"] == run.optim.global_batch_size
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

    with quiet_argparse():
        args = _finetune_parser().parse_args(argv)
    job = config_from_args(args, DEFAULT_SEQ_LENGTH)
    overrides = dict(vocab_size=SAMPLE_VOCAB)
    if job.recipe.dropout is not None:
        overrides.update(hidden_dropout=job.recipe.dropout, attention_dropout=job.recipe.dropout)
    model_config = model_preset(job.start.preset).replace(**overrides)
    tp = job.parallel.tensor_parallel
    layouts = [outcome(lambda: validate_layout(model_config, world, tp, 1), ConfigError) for world in (1, 2, 4)]
    grid = len(job.grid.grid_batch_sizes) * len(job.grid.grid_lrs) * len(job.grid.grid_epochs) if job.grid.grid else 1
    if grid * job.grid.restarts > MAX_RUNS_LISTED:
        return
    for run_settings in job.settings()[:8]:
        for dp in [dp for dp in layouts if dp] + [3]:
            plan = outcome(lambda: batch_plan(job, run_settings, dp, model_config), ConfigError)
            if plan is not None:
                built = outcome(lambda: job.parallel.deepspeed_setup(plan, "cpu", job.recipe.clip_grad), ConfigError)
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
        ["--stop-at-step", "0"],  # `run.checkpoint.stop_at_step or run.optim.train_steps` ignores 0
        ["--seed", str(2**64)],  # torch.manual_seed overflows in init_parallel
    ],
    ids=lambda argv: " ".join(argv),
)
def test_pretraining_options_refused_for_later_failures(argv):
    from bert_ds.training.config.args import parse_args

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
    from bert_ds.training.config.args import parse_args

    with quiet_argparse(), pytest.raises((SystemExit, ConfigError)):
        if argv[0].startswith(("--epochs", "--lr")):
            config_from_args(_finetune_parser().parse_args(["--task", "sst2", "--output", "out", *argv]), 128)
        else:
            parse_args(argv)


# --- DeepSpeed JSON configs -----------------------------------------------------------------

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
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.config.batch_plan import BatchPlan

    path = tmp_path / "ds.json"
    path.write_bytes(content)
    argv = ["--deepspeed-config", str(path), "--pipeline-parallel", str(pp)]
    argv += [] if zero_stage_option is None else ["--zero-stage", str(zero_stage_option)]
    run = outcome(lambda: parse_args(argv), ConfigError)
    if run is None:
        return
    built = outcome(lambda: run.deepspeed_setup(BatchPlan(16, 8, 1), "cpu"), ConfigError)
    if built is not None:
        assert built.zero_stage in (0, 1, 2, 3)
        assert isinstance(built.offloaded, bool)
