"""The command lines are generated from the config dataclasses (bert_ds/options.py): every field
is an option whose --help is its docstring, and every data setting reaches the data pipeline."""

import argparse
import dataclasses
import json

import pytest

from bert_ds.config import ConfigError, DataConfig
from bert_ds.finetune.args import FinetuneConfig, add_common_arguments
from bert_ds.finetune.args import SECTIONS as FINETUNE_SECTIONS
from bert_ds.options import field_docs
from bert_ds.training.args import SECTIONS, RunConfig, _parser, parse_args
from tests.helpers import run_entrypoint


def _options(parser: argparse.ArgumentParser) -> dict:
    return {action.dest: action for action in parser._actions if action.option_strings}


@pytest.mark.parametrize("config, sections, make_parser", [
    (RunConfig, SECTIONS, _parser),
    (FinetuneConfig, FINETUNE_SECTIONS, lambda: _with(add_common_arguments)),
], ids=["pretrain", "finetune"])
def test_every_field_is_one_option_with_its_docstring_as_help(config, sections, make_parser):
    options, docs = _options(make_parser()), field_docs(config)
    fields = [f.name for f in dataclasses.fields(config)]
    assert sorted(n for names in sections.values() for n in names) == sorted(fields)
    for name in fields:
        assert docs.get(name), f"{config.__name__}.{name} has no docstring"
        assert options[name].help.replace("%%", "%").startswith(docs[name]), name


def _with(add) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add(parser)
    return parser


def test_defaults_live_in_the_dataclasses_and_the_preset_table():
    """No option carries a default of its own: an empty command line is the dataclass defaults,
    with the preset's training values (TRAINING_DEFAULTS) where the field says `by preset`."""
    from bert_ds.training.args import TRAINING_DEFAULTS

    run = parse_args([])
    for f in dataclasses.fields(RunConfig):
        expected = TRAINING_DEFAULTS["tiny"].get(f.name, f.default if f.default_factory is dataclasses.MISSING else f.default_factory())
        assert getattr(run, f.name) == expected, f.name
    large = parse_args(["--preset", "large"])
    assert (large.lr, large.train_steps, large.global_batch_size) == (1e-4, 1_000_000, 256)
    # The data defaults are DataConfig's own.
    defaults = DataConfig()
    assert run.data_config() == dataclasses.replace(defaults, micro_batch_size=None)


def test_every_data_setting_is_an_option_that_reaches_the_data_config():
    run = parse_args(["--mask-prob", "0.25", "--short-seq-prob", "0.5", "--block-documents", "8",
                      "--txt-documents", "blank_line", "--static-masking", "--sentence-splitter", "regex"])
    data = run.data_config()
    assert (data.mask_prob, data.short_seq_prob, data.block_documents, data.txt_documents) == (0.25, 0.5, 8, "blank_line")
    assert data.dynamic_masking is False and data.sentence_splitter == "regex"
    assert {f.name for f in dataclasses.fields(DataConfig)} - {f.name for f in dataclasses.fields(RunConfig)} == set()


def test_bad_values_name_every_option_at_once():
    with pytest.raises(ConfigError) as error:
        parse_args(["--mask-prob", "1.5", "--block-documents", "1", "--adam-beta2", "1", "--seed", "-3"])
    message = str(error.value)
    for flag in ("--mask-prob 1.5", "--block-documents 1", "--adam-beta2 must be in [0, 1)", "--seed -3"):
        assert flag in message, message


def test_the_new_options_as_a_user_runs_them(tmp_path):
    """Through the entrypoint: the dry run takes them and the plan JSON records the data settings."""
    plan_file = tmp_path / "plan.json"
    result = run_entrypoint("bert_ds/pretrain.py", ["--preset", "base", "--dry-run", "cpu", "--tokenizer", "bert-base-uncased",
                                                    "--mask-prob", "0.2", "--txt-documents", "blank_line",
                                                    "--adam-beta2", "0.98", "--plan-json", str(plan_file)])
    assert result.returncode == 0, result.stderr[-2000:]
    plan = json.loads(plan_file.read_text())
    assert plan["data_config"]["mask_prob"] == 0.2 and plan["data_config"]["txt_documents"] == "blank_line"
    assert plan["adam_beta2"] == 0.98
    bad = run_entrypoint("bert_ds/pretrain.py", ["--dry-run", "cpu", "--short-seq-prob", "2"])
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--short-seq-prob 2.0 must be in [0, 1]" in bad.stderr
