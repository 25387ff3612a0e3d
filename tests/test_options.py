"""The command lines are generated from the config trees (bert_ds/options.py): every leaf field of
every section is an option whose --help is its docstring, listed under its section; defaults live
in the dataclasses and the preset table; every data setting reaches the data pipeline; the
sections fine-tuning shares with pre-training are the same classes; one validate(world_size)
holds the rules, the layout's included."""

import argparse
import dataclasses
import json

import pytest

from bert_ds.config import ConfigError, DataConfig
from bert_ds.finetune.args import FinetuneConfig, add_common_arguments, config_from_args
from bert_ds.options import field_docs, flat, from_namespace, sections
from bert_ds.training.config.args import RunConfig, _parser, parse_args
from bert_ds.training.config.sections import OptimizerOptions, ParallelOptions, PlanOptions
from tests.support.helpers import run_entrypoint


def _options(parser: argparse.ArgumentParser) -> dict:
    return {action.dest: action for action in parser._actions if action.option_strings}


def _with(add) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add(parser)
    return parser


@pytest.mark.parametrize("tree, make_parser", [
    (RunConfig, _parser),
    (FinetuneConfig, lambda: _with(add_common_arguments)),
], ids=["pretrain", "finetune"])
def test_every_leaf_is_one_option_with_its_docstring_as_help_under_its_section(tree, make_parser):
    parser = make_parser()
    options = _options(parser)
    groups = {group.title: {a.dest for a in group._group_actions} for group in parser._action_groups}
    tree_docs = field_docs(tree)
    for name, section in sections(tree).items():
        assert tree_docs.get(name), f"{tree.__name__}.{name} has no docstring"
        docs = field_docs(section)
        leaves = {f.name for f in dataclasses.fields(section)}
        assert groups[name] == leaves, name  # --help lists each section's options under its name
        for leaf in leaves:
            assert docs.get(leaf), f"{section.__name__}.{leaf} has no docstring"
            assert options[leaf].help.replace("%%", "%").startswith(docs[leaf]), leaf


def test_fine_tuning_reuses_pre_training_sections():
    pretrain, finetune = sections(RunConfig), sections(FinetuneConfig)
    assert issubclass(pretrain["parallel"], ParallelOptions) and issubclass(finetune["parallel"], ParallelOptions)
    assert issubclass(pretrain["optim"], OptimizerOptions) and issubclass(finetune["recipe"], OptimizerOptions)
    assert issubclass(pretrain["plan"], PlanOptions) and finetune["plan"] is PlanOptions
    # The shared optimizer options reach fine-tuning's engine settings.
    args = _with(add_common_arguments).parse_args(["--output", "o", "--adam-beta2", "0.98", "--optimizer", "lamb"])
    job = config_from_args(args, 128)
    settings = job.recipe.optimizer_settings(job.recipe.lr, 1, 10)
    assert (settings.name, settings.betas, settings.lr) == ("lamb", (0.9, 0.98), 2e-5)
    job = config_from_args(_with(add_common_arguments).parse_args(["--output", "o", "--zero-stage", "3"]), 128)
    assert job.parallel.zero_stage == 3  # fine-tuning takes every ZeRO stage


def test_defaults_live_in_the_dataclasses_and_the_preset_table():
    """No option carries a default of its own: an empty command line is the dataclass defaults,
    with the preset's training values (TRAINING_DEFAULTS) where the field says `by preset`."""
    from bert_ds.training.config.args import TRAINING_DEFAULTS

    run = parse_args([])
    for name, section in sections(RunConfig).items():
        for f in dataclasses.fields(section):
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            assert getattr(getattr(run, name), f.name) == TRAINING_DEFAULTS["tiny"].get(f.name, default), f.name
    large = parse_args(["--preset", "large"])
    assert (large.optim.lr, large.optim.train_steps, large.optim.global_batch_size) == (1e-4, 1_000_000, 256)
    # The data defaults are DataConfig's own, but for the two the launch plan resolves (`auto`).
    defaults = DataConfig()
    assert run.data_config() == dataclasses.replace(defaults, micro_batch_size=None, num_workers=None)


def test_records_stay_flat_and_rebuild_the_tree():
    """Checkpoints and plan JSON name each setting as its option does; the tree comes back from them."""
    run = parse_args(["--lr", "0.002", "--data", "a.txt", "--save", "ck"])
    record = flat(run)
    assert record["lr"] == 0.002 and record["sources"] == ["a.txt"] and record["save"] == "ck" and record["seq_length"] == 128
    assert from_namespace(RunConfig, record) == run


def test_every_data_setting_is_an_option_that_reaches_the_data_config():
    run = parse_args(["--mask-prob", "0.25", "--short-seq-prob", "0.5", "--block-documents", "8",
                      "--txt-documents", "blank_line", "--static-masking", "--sentence-splitter", "regex"])
    data = run.data_config()
    assert (data.mask_prob, data.short_seq_prob, data.block_documents, data.txt_documents) == (0.25, 0.5, 8, "blank_line")
    assert data.dynamic_masking is False and data.sentence_splitter == "regex"
    assert parse_args(["--num-workers", "3"]).data_config().num_workers == 3
    assert parse_args(["--num-workers", "auto"]).data_config().num_workers is None
    leaves = {f.name for f in dataclasses.fields(sections(RunConfig)["data"])} | {"micro_batch_size"}
    assert {f.name for f in dataclasses.fields(DataConfig)} - leaves == set()


def test_validate_with_a_world_size_checks_the_layout_and_the_batch():
    """The rules that need the world size are in the same validate: the launch plan calls it."""
    run = parse_args(["--preset", "base", "--tensor-parallel", "5"])
    run.validate()  # the options alone are fine
    with pytest.raises(ConfigError, match="12 attention heads are not divisible by tensor parallel size 5"):
        run.validate(world_size=10)
    run = parse_args(["--global-batch-size", "12"])
    run.validate(world_size=4)
    with pytest.raises(ConfigError, match="global batch size 12 is not divisible by data parallel 8"):
        run.validate(world_size=8)


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
    assert plan["collective_timeout"] == 600.0  # every process group's, megatron's included (test_collective_timeout.py)
    # --num-workers auto on a CPU: 0 (a worker would take a core from the model), said in the plan.
    assert plan["data_config"]["num_workers"] == 0 and plan["loader"].startswith("0 worker processes per rank (auto on CPUs")
    workers = run_entrypoint("bert_ds/pretrain.py", ["--dry-run", "cpu", "--num-workers", "-1"])
    assert workers.returncode == 2 and "Traceback" not in workers.stderr and "--num-workers" in workers.stderr
    bad = run_entrypoint("bert_ds/pretrain.py", ["--dry-run", "cpu", "--short-seq-prob", "2"])
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--short-seq-prob 2.0 must be in [0, 1]" in bad.stderr


def test_max_train_examples_reaches_the_fine_tuning_plan(tmp_path):
    """--max-train-examples caps the training features; the plan counts the steps it leaves."""
    import random

    from tests.support.task_fixtures import write_sst2_plumbing

    write_sst2_plumbing(tmp_path / "glue", random.Random(0))  # 16 training rows
    common = ["--task", "sst2", "--data-dir", str(tmp_path / "glue"), "--preset", "tiny", "--tokenizer", "bert-base-uncased",
              "--output", str(tmp_path / "o"), "--batch-size", "4", "--epochs", "1", "--dry-run", "cpu"]
    capped = run_entrypoint("bert_ds/finetune/glue.py", [*common, "--max-train-examples", "5"])
    assert capped.returncode == 0, capped.stderr[-2000:]
    assert "sst2: 16 training examples (trains on the first 5: --max-train-examples); 1 run(s)" in capped.stdout
    assert ", 2 optimizer steps" in capped.stdout  # ceil(5 / 4), not ceil(16 / 4)
    bad = run_entrypoint("bert_ds/finetune/glue.py", [*common, "--max-train-examples", "0"])
    assert bad.returncode == 2 and "--max-train-examples must be at least 1, got 0" in bad.stderr


def test_field_docs_of_classes_nested_and_defined_in_a_function():
    """field_docs parses a source file once for all its classes: a class inside a class or inside a
    function is found by its qualified name, and a subclass adds its fields' docs to its base's."""

    @dataclasses.dataclass
    class Base:
        kept: int = 1
        """Kept from the base."""

    @dataclasses.dataclass
    class Outer(Base):
        @dataclasses.dataclass
        class Inner:
            depth: int = 2
            """Two levels in."""

        width: int = 3
        """Three   wide,
        over two lines."""
        undocumented: int = 4

    if True:  # a class under a block keeps the enclosing name

        @dataclasses.dataclass
        class Guarded:
            flag: int = 5
            """Found under an if."""

    assert field_docs(Outer) == {"kept": "Kept from the base.", "width": "Three wide, over two lines."}
    assert field_docs(Outer.Inner) == {"depth": "Two levels in."}
    assert field_docs(Guarded) == {"flag": "Found under an if."}
    assert field_docs(dataclasses.make_dataclass("Made", [("x", int)])) == {}  # no source: no help, no failure
