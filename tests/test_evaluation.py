"""Held-out evaluation during pre-training (training/evaluation.py, training/loop/eval_schedule.py).

Real jobs on the tiny preset and the sample corpus (the held-out Wikipedia articles are the
default evaluation data): the same weights score the same at TP=2, PP=2 and DP=2 as in one
process; --keep-best keeps the best checkpoint through --keep-last rotation; --target-mlm-accuracy
stops at the first evaluation reaching it. The series across a resume and under every ZeRO stage
are checked in tests/test_pretrain.py, whose runs evaluate too.
"""

import json
from pathlib import Path

import pytest

from tests.support.helpers import read_metrics, run_pretrain

FIXTURES_WIKI = Path(__file__).parent / "fixtures" / "corpus" / "wikipedia_hub.jsonl"
COMMON = ["--preset", "tiny", "--dropout", "0", "--global-batch-size", "8", "--micro-batch-size", "4",
          "--lr", "5e-3", "--warmup-steps", "1", "--log-interval", "2"]


@pytest.fixture(scope="module")
def cache(shared_cache):
    return shared_cache


def _job(args, cache, nproc=1):
    result = run_pretrain(COMMON + args, nproc=nproc, cache_dir=cache)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _evals(path) -> dict:
    return {m["step"]: m for m in read_metrics(path) if "eval/mlm_loss" in m}


@pytest.fixture(scope="module")
def best_run(tmp_path_factory, cache):
    """One process, 10 steps, an evaluation every 2 on 37 examples (not a multiple of the micro
    batch 4 nor of DP 2, so padding rows are exercised), --keep-best with --keep-last 1."""
    root = tmp_path_factory.mktemp("best")
    _job(["--train-steps", "10", "--eval-interval", "2", "--eval-samples", "37", "--save", str(root / "ckpt"),
          "--keep-last", "1", "--keep-best", "--metrics-file", str(root / "metrics.jsonl")], cache)
    return root


def test_same_weights_score_the_same_at_every_layout(best_run, tmp_path, cache):
    single = _evals(best_run / "metrics.jsonl")[10]  # the weights of the latest checkpoint
    assert single["eval/samples"] == 37 and single["eval/mlm_accuracy"] > 0
    for name, layout in {"tp2": ["--tensor-parallel", "2"], "pp2": ["--pipeline-parallel", "2"],
                         "dp2": ["--zero-stage", "2"], "dp2-zero3": ["--zero-stage", "3"]}.items():
        metrics = tmp_path / f"{name}.jsonl"
        _job(["--eval-only", "--load", str(best_run / "ckpt"), "--metrics-file", str(metrics), "--eval-samples", "37",
              *layout], cache, nproc=2)
        split = _evals(metrics)[10]  # logged at the checkpoint's step
        for key in ("eval/mlm_loss", "eval/mlm_accuracy", "eval/nsp_loss", "eval/nsp_accuracy"):
            assert split[key] == pytest.approx(single[key], abs=1e-5), (name, key)


def test_keep_best_survives_rotation_and_target_stops_the_run(best_run, tmp_path, cache):
    save = best_run / "ckpt"
    evals = _evals(best_run / "metrics.jsonl")
    assert sorted(evals) == [2, 4, 6, 8, 10]
    # Every line carries the training loop's seconds (curves against time: python -m bert_ds.plot --x seconds).
    seconds = [m["train_seconds"] for m in read_metrics(best_run / "metrics.jsonl")]
    assert seconds == sorted(seconds) and seconds[0] > 0 and len(seconds) == 5 + 5  # every 2 steps, and evaluations
    accuracy = {step: m["eval/mlm_accuracy"] for step, m in evals.items()}
    best_step = max(accuracy, key=lambda step: (accuracy[step], -step))  # the first of equal bests
    best = json.loads((save / "best.json").read_text())
    assert best["step"] == best_step and best["eval/mlm_accuracy"] == accuracy[best_step]
    kept = sorted(p.name for p in save.glob("step*"))
    assert kept == sorted({f"step{best_step:08d}", "step00000010"}), kept  # the best, and the newest one

    # The target: the best accuracy of steps 2-8, so the run stops at the first evaluation reaching it.
    target = max(accuracy[step] for step in (2, 4, 6, 8))
    stop = min(step for step in accuracy if accuracy[step] >= target)
    save, metrics = tmp_path / "target", tmp_path / "target.jsonl"
    result = _job(["--train-steps", "10", "--eval-interval", "2", "--eval-samples", "37", "--save", str(save),
                   "--target-mlm-accuracy", repr(target), "--metrics-file", str(metrics)], cache)
    assert f"reached the target held-out masked-LM accuracy {target:g}" in result.stdout
    reached = _evals(metrics)
    assert max(reached) == stop and reached[stop]["target/steps"] == stop
    assert reached[stop]["target/tokens"] == reached[stop]["consumed_tokens"] > 0
    assert reached[stop]["target/seconds"] > 0
    assert (save / f"step{stop:08d}" / "complete.json").is_file() and (save / "latest").read_text() == f"step{stop:08d}"


def test_evaluation_data_too_small_is_one_error_line(tmp_path, cache):
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"text": "One short held-out article. It has two sentences."}) + "\n")
    result = run_pretrain(COMMON + ["--train-steps", "2", "--eval-interval", "1", "--eval-data", str(small),
                                    "--eval-samples", "50"], cache_dir=cache)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Evaluation data too small for --eval-samples 50" in errors[0], result.stderr[-2000:]
    assert "the sources yield 1 of 50" in errors[0]


@pytest.mark.parametrize("args, message", [
    (["--eval-interval", "0"], "--eval-interval must be at least 1"),
    (["--eval-interval", "5", "--target-mlm-accuracy", "0"], "--target-mlm-accuracy must be in (0, 1], got 0.0"),
    (["--eval-interval", "5", "--target-mlm-accuracy", "1.5"], "--target-mlm-accuracy must be in (0, 1], got 1.5"),
    (["--target-mlm-accuracy", "0.7"], "--target-mlm-accuracy needs --eval-interval"),
    (["--eval-interval", "5", "--keep-best"], "--keep-best needs --eval-interval and --save"),
    (["--data", "x.jsonl", "--eval-interval", "5"], "--eval-interval needs --eval-data"),
    (["--eval-data", "x.jsonl"], "--eval-data needs --eval-interval"),
    (["--eval-interval", "5", "--eval-samples", "0"], "--eval-samples must be at least 1"),
])
def test_bad_evaluation_options_are_one_sentence(args, message):
    from bert_ds.config import ConfigError
    from bert_ds.training.config.args import parse_args

    with pytest.raises(ConfigError, match="Invalid options") as error:
        parse_args(args)
    assert message in str(error.value)


def test_the_sample_wikipedia_is_clean_text_with_the_hub_schema():
    from bert_ds.data.sources import SAMPLE_DIR

    titles = {}
    for name in ("enwiki-train.jsonl", "enwiki-held-out.jsonl"):
        records = [json.loads(line) for line in (SAMPLE_DIR / "wiki" / name).read_text(encoding="utf-8").splitlines()]
        assert records and all(set(r) == {"id", "url", "title", "text"} for r in records), name
        text = "\n".join(r["text"] for r in records)
        for markup in ("<unk>", "[[", "]]", "{{", "}}", "<ref", "|thumb", "{|", "=="):
            assert markup not in text, (name, markup)
        titles[name] = {r["title"] for r in records}
    assert not titles["enwiki-train.jsonl"] & titles["enwiki-held-out.jsonl"]  # held out: other articles


def test_the_sample_holds_its_evaluation_articles_out_of_training():
    from bert_ds.data.sources import SAMPLE_HELD_OUT_SPEC, parse_sources
    from bert_ds.training.config.args import parse_args

    run = parse_args(["--eval-interval", "10"])
    assert run.eval.eval_data == [SAMPLE_HELD_OUT_SPEC]
    held_out = parse_sources(run.eval.eval_data)[0].location
    trained = [source.location for source in parse_sources(run.data.sources)]
    assert held_out.endswith("enwiki-held-out.jsonl") and not any("enwiki-held-out" in t or "wiki/*" in t for t in trained)
    assert parse_args([]).data.sources == ["sample"]  # without evaluation the whole sample trains, as before


def test_empty_evaluation_source_is_named(tmp_path, sample_tokenizer):
    from bert_ds.config import DataConfig
    from bert_ds.data.sources import DataError
    from bert_ds.training.evaluation import eval_examples

    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"text": "   "}) + "\n")
    with pytest.raises(DataError, match="Evaluation data: Data source 'empty' has no usable document"):
        eval_examples([str(empty)], sample_tokenizer, DataConfig(dynamic_masking=False), None)


def test_evaluation_set_is_fixed_and_independent_of_the_training_seed(sample_tokenizer):
    from bert_ds.config import DataConfig
    from bert_ds.data.sources import SAMPLE_HELD_OUT_SPEC
    from bert_ds.training.evaluation import eval_examples

    one, _ = eval_examples([SAMPLE_HELD_OUT_SPEC], sample_tokenizer, DataConfig(seed=1, dynamic_masking=False), 30)
    two, _ = eval_examples([SAMPLE_HELD_OUT_SPEC], sample_tokenizer, DataConfig(seed=2, dynamic_masking=False), 30)
    assert len(one) == 30
    assert [(e.tokens_a, e.tokens_b, e.is_random_next) for e in one] == [(e.tokens_a, e.tokens_b, e.is_random_next) for e in two]
    assert 0 < sum(e.is_random_next for e in one) < 30


def test_dry_run_checks_the_evaluation_files_and_shows_layouts(tmp_path, cache, monkeypatch):
    from tests.support.hub_fixtures import bookcorpus_mirror, wikipedia_mirror

    bookcorpus_mirror(tmp_path / "hub", sentences=600)  # the hub's Parquet files, read from a local mirror
    wikipedia_mirror(tmp_path / "hub", articles=100, files=1)
    monkeypatch.setenv("BERT_DS_HUB_MIRROR", str(tmp_path / "hub"))
    missing = run_pretrain(["--dry-run", "cpu", "--eval-interval", "5", "--eval-data", str(tmp_path / "held.jsonl")],
                           cache_dir=cache)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"error: Data source 'held': file not found: {tmp_path / 'held.jsonl'}"]
    plan = run_pretrain(["--dry-run", "cpu", "--eval-interval", "5", "--tokenizer", "bert-base-uncased",
                         "--data", "hf:bookcorpus/bookcorpus@refs/convert/parquet@800", "wiki=hf:wikimedia/wikipedia:20231101.en@2500",
                         "--eval-data", str(FIXTURES_WIKI)], cache_dir=cache)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "layout sentences:256)" in plan.stdout and "layout article)" in plan.stdout
    assert "evaluation | every 5 steps, up to 1,000 fixed examples of" in plan.stdout


def test_evaluation_mixes_sources_as_training_does(tmp_path, sample_tokenizer):
    """Regression: the set was built source by source from the first examples of each block, so
    a NotNext partner always came from the same source and a small set held the opening of one
    document (a held-out book's first 500 pairs). Training draws partners from any source of
    a block (a book's sentence followed by an article's), so held-out NSP measured another task
    (train NSP accuracy 0.75, held-out 0.51 with a loss of 1.0 on books + Wikipedia)."""
    from bert_ds.config import DataConfig
    from bert_ds.training.evaluation import eval_examples

    words = {"x": "river bridge harbour canal ship", "y": "violin piano orchestra singer melody"}
    for name, vocabulary in words.items():
        with open(tmp_path / f"{name}.jsonl", "w") as handle:
            for d in range(12):
                sentences = [f"The {w} and the {v} near {u}." for w, v, u in zip(vocabulary.split(), vocabulary.split()[1:],
                                                                                 vocabulary.split()[2:])] * 6
                handle.write(json.dumps({"text": " ".join(sentences)}) + "\n")
    ids = {name: {i for w in words[name].split() for i in sample_tokenizer.encode_batch([w])[0]} for name in words}
    only = {name: ids[name] - ids["y" if name == "x" else "x"] for name in ids}

    def side(tokens):
        return {name for name, marks in only.items() if marks & set(tokens)}

    examples, _ = eval_examples([f"x={tmp_path / 'x.jsonl'}", f"y={tmp_path / 'y.jsonl'}"], sample_tokenizer,
                                DataConfig(seq_length=64, dynamic_masking=False), 60)
    assert len(examples) == 60
    crossing = [e for e in examples if side(e.tokens_a) != side(e.tokens_b)]
    assert crossing and all(e.is_random_next for e in crossing)  # a true next segment never changes source
    assert {"x"} in [side(e.tokens_a) for e in examples] and {"y"} in [side(e.tokens_a) for e in examples]
