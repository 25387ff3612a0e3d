"""Launch plans (`--dry-run`) as users run them: every shipped Slurm script with its own defaults at
1-64 nodes, the paper's recipe read back from what the parser and the scripts resolve, and bad
values ending in one `error:` line with nothing written. No GPU, no real Slurm: the scripts see
the variables Slurm would set, and plan for GPUs (PLAN_DEVICE=gpu) as on the cluster."""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bert_ds.config import model_preset, padded_vocab_size
from tests.support.glue_fixtures import write_all_tasks
from tests.support.helpers import REPO, run_entrypoint
from tests.support.task_fixtures import write_conll, write_squad, write_swag

NODES = (1, 2, 4, 8, 16, 64)
FINETUNE_NODES = (1, 2, 4, 8, 64)
"""Data parallel 8-512: fine-tuning batches of 16 and 32 fit, fill exactly, then need TP."""
TASKS_PER_NODE = 8
PRETRAIN_SCRIPTS = ("slurm/pretrain_large.sh", "slurm/pretrain_large_phase2.sh")
FINETUNE_SCRIPTS = {"slurm/finetune_glue.sh": 32, "slurm/finetune_squad.sh": 32, "slurm/finetune_swag.sh": 16,
                    "slurm/finetune_ner.sh": 32}
"""Fine-tuning script -> its default global batch (the paper's)."""
PAPER = dict(global_batch_size=256, lr=1e-4, adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-6, weight_decay=0.01,
             warmup_steps=10_000, train_steps=1_000_000, hidden_dropout=0.1, attention_dropout=0.1, clip_grad=1.0)


def _large_checkpoint_marker(save_dir: Path, step: int, seq_length: int = 128, stop_at_step: int | None = 900_000) -> None:
    """A save folder as pre-training leaves it, without DeepSpeed's files (plans never open them):
    latest, the tag's complete.json with the model's shape, the run's tokenizer."""
    from bert_ds.data.tokenizer.load import load_tokenizer

    tag = save_dir / f"step{step:08d}"
    tag.mkdir(parents=True, exist_ok=True)
    config = model_preset("large", vocab_size=padded_vocab_size(30522)).__dict__
    marker = dict(step=step, world_size=32, layout=dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=32, num_workers=0),
                  files={}, model_config=config, zero_stage=1, precision="bf16",
                  run=dict(preset="large", seq_length=seq_length, stop_at_step=stop_at_step, train_steps=1_000_000,
                           global_batch_size=256))
    (tag / "complete.json").write_text(json.dumps(marker))
    (save_dir / "latest").write_text(tag.name)
    if not (save_dir / "tokenizer").is_dir():
        load_tokenizer("bert-base-uncased").save(save_dir / "tokenizer")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A user's checkout: the repository's code, with data where the scripts' defaults look for it
    (books as one .txt per book, glue_data as GLUE's download script writes it, the official SQuAD
    JSON and SWAG CSV) and phase 1's checkpoint at step 900000 in runs/bert-large."""
    root = tmp_path_factory.mktemp("checkout")
    for name in ("bert_ds", "slurm", "ds_configs"):
        (root / name).symlink_to(Path(REPO) / name)
    books = root / "data" / "bookcorpus"
    books.mkdir(parents=True)
    for book in (Path(REPO) / "bert_ds" / "data" / "sample" / "books").glob("*.txt"):
        shutil.copy(book, books / book.name)
    _prepared_corpora(root / "data" / "prepared", tmp_path_factory.mktemp("hub"))
    write_all_tasks(root / "glue_data")
    rng = random.Random(0)
    write_squad(root / "squad_data", rng)
    write_swag(root / "swagaf" / "data", rng)
    write_conll(root / "conll2003", rng, train=8, dev=4, test=4)
    _large_checkpoint_marker(root / "runs" / "bert-large", 900_000)
    return root


def _prepared_corpora(folder: Path, hub: Path) -> None:
    """data/prepared/{bookcorpus,wikipedia} as slurm/prepare_data.sh leaves them, made by the
    prepare command from a local mirror of the hub's Parquet files (real English: the sample's
    books one sentence per record, its Wikipedia articles one per record)."""
    from bert_ds.data.prepare.command import main as prepare_main
    from tests.support.hub_fixtures import BOOKS_ID, BOOKS_REVISION, WIKI_CONFIG, WIKI_ID, write_hub_file

    sample = Path(REPO) / "bert_ds" / "data" / "sample"
    sentences = [line.strip() for book in sorted((sample / "books").glob("*.txt"))[:3]
                 for line in book.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    write_hub_file(hub, BOOKS_ID, BOOKS_REVISION, "plain_text/train/0000.parquet", dict(text=sentences), 1000)
    articles = [json.loads(line)["text"] for line in (sample / "wiki" / "enwiki-train.jsonl").read_text().splitlines()]
    write_hub_file(hub, WIKI_ID, "main", f"{WIKI_CONFIG}/train-00000-of-00001.parquet", dict(text=articles), 10)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BERT_DS_HUB_MIRROR", str(hub))
        patch.setenv("BERT_DS_CACHE", str(hub / "cache"))
        for name, spec in (("bookcorpus", f"hf:{BOOKS_ID}@{BOOKS_REVISION}"), ("wikipedia", f"hf:{WIKI_ID}:{WIKI_CONFIG}")):
            assert prepare_main([spec, "--output", str(folder / name)]) == 0


def _slurm_env(checkout: Path, nodes: int, cache: str, **settings) -> dict:
    """What sbatch gives a batch script on `nodes` nodes x 8 tasks (no srun step yet)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK"))}
    return {
        **env, "SLURM_JOB_ID": "4242", "SLURM_NTASKS": str(nodes * TASKS_PER_NODE), "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS_PER_NODE": str(TASKS_PER_NODE), "SLURM_JOB_NODELIST": f"gpu[001-{nodes:03d}]",
        "SLURM_SUBMIT_DIR": str(checkout), "PYTHON": sys.executable, "DRY_RUN": "1", "PLAN_DEVICE": "gpu",
        "BERT_DS_CACHE": cache, "OMP_NUM_THREADS": "1", **settings,
    }


def _plan_script(checkout: Path, script: str, env: dict, plan_json: Path):
    result = subprocess.run(["bash", str(checkout / script), "--plan-json", str(plan_json)], capture_output=True,
                            text=True, env=env, cwd=checkout, timeout=300)
    return result, json.loads(plan_json.read_text()) if plan_json.exists() else None


def _expected_failure(world: int, tp: int, pp: int, global_batch: int, pipeline_allowed: bool) -> bool:
    """Whether a layout cannot run: computed here from the rules, independently of the planner."""
    if pp > 1 and not pipeline_allowed:
        return True
    if world % (tp * pp):
        return True
    dp = world // (tp * pp)
    return dp > global_batch or global_batch % dp != 0


def _assert_one_error_line(result) -> None:
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stdout[-1000:] + result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == errors[0] and "Traceback" not in result.stderr


def test_every_shipped_script_plans_with_its_own_defaults_at_every_size(checkout, tmp_path):
    """Pre-training scripts at 6 node counts x TP 1/2/4 x PP 1/2; fine-tuning scripts (one planner,
    no pipeline) at the node counts where their batch rules change, PP=2 refused at one: a plan that
    adds up, or one sentence."""
    cache = str(tmp_path / "cache")
    cases = [(script, nodes, tp, pp) for script in PRETRAIN_SCRIPTS
             for nodes in NODES for tp in (1, 2, 4) for pp in (1, 2)]
    cases += [(script, nodes, tp, 1) for script in FINETUNE_SCRIPTS for nodes in FINETUNE_NODES for tp in (1, 2, 4)]
    cases += [(script, 1, tp, 2) for script in FINETUNE_SCRIPTS for tp in (1, 2, 4)]

    def run(case):
        script, nodes, tp, pp = case
        plan_json = tmp_path / f"{Path(script).stem}-{nodes}-{tp}-{pp}.json"
        env = _slurm_env(checkout, nodes, cache, TP=str(tp), PP=str(pp))
        return case, *_plan_script(checkout, script, env, plan_json)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(run, cases))
    planned = 0
    for (script, nodes, tp, pp), result, plan in outcomes:
        world = nodes * TASKS_PER_NODE
        pretraining = script in PRETRAIN_SCRIPTS
        global_batch = 256 if pretraining else FINETUNE_SCRIPTS[script]
        if _expected_failure(world, tp, pp, global_batch, pipeline_allowed=pretraining):
            _assert_one_error_line(result)
            assert plan is None, (script, nodes, tp, pp)
            continue
        assert result.returncode == 0, (script, nodes, tp, pp, result.stderr[-2000:])
        planned += 1
        dp = world // (tp * pp)
        assert (plan["world_size"], plan["tensor_parallel"], plan["data_parallel"]) == (world, tp, dp)
        batches = [plan] if pretraining else plan["batches"].values()
        for batch in batches:
            assert batch["micro_batch_size"] * dp * batch["accumulation"] == batch["global_batch_size"]
        assert plan["precision"] == "bf16"
        if pretraining:
            assert plan["pipeline_parallel"] == pp and plan["zero_stage"] == 1
            ceiling = 64 if plan["seq_length"] == 128 else 16
            assert plan["micro_batch_size"] == max(m for m in range(1, ceiling + 1) if (256 // dp) % m == 0)
    assert planned >= 50  # most layouts run; the rest failed for the reasons computed above
    assert not (checkout / "runs" / "bert-large" / "logs").exists()  # dry runs write nothing


def test_the_recipe_is_what_the_scripts_resolve(checkout, tmp_path):
    """The paper's constants, read back from the plans of the shipped scripts at their #SBATCH size."""
    cache = str(tmp_path / "cache")

    def plan(script, **settings):
        nodes = 4 if script in PRETRAIN_SCRIPTS else 1  # the scripts' own #SBATCH --nodes
        env = _slurm_env(checkout, nodes, cache, **settings)
        result, resolved = _plan_script(checkout, script, env, tmp_path / f"{Path(script).stem}{len(settings)}.json")
        assert result.returncode == 0, result.stderr[-2000:]
        return resolved

    phase1, phase2 = plan("slurm/pretrain_large.sh"), plan("slurm/pretrain_large_phase2.sh")
    for resolved in (phase1, phase2):
        assert {k: resolved[k] for k in PAPER} == PAPER
        assert resolved["preset"] == "large" and resolved["objective"] == "mlm_nsp"
        assert resolved["model"]["num_layers"] == 24 and resolved["model"]["hidden_size"] == 1024
        assert resolved["tokenizer"].startswith("bert-base-uncased") and "uncased" in resolved["tokenizer"]
        assert resolved["padded_vocab_size"] == 30592 and resolved["vocab_size"] == 30522
        # The prepared corpora, mixed by their manifests' word counts (as the paper mixed them).
        words = [json.loads((checkout / "data" / "prepared" / n / "manifest.json").read_text())["words"]
                 for n in ("bookcorpus", "wikipedia")]
        assert [d["share"] for d in resolved["data"]] == pytest.approx([w / sum(words) for w in words])
        assert [d["words"] for d in resolved["data"]] == words and all(d["epochs"] is not None for d in resolved["data"])
    assert (phase1["seq_length"], phase1["stop_at_step"], phase1["start_step"]) == (128, 900_000, 900_000)
    assert phase1["stop_at_step"] == 0.9 * phase1["train_steps"]  # 90% of the steps at 128 tokens
    assert (phase2["seq_length"], phase2["stop_at_step"], phase2["phase_start_step"]) == (512, None, 900_000)
    assert (phase2["start_step"], phase2["last_step"]) == (900_000, 1_000_000)
    assert phase1["data"][0]["epochs"] == 0 and phase2["data"][0]["epochs"] > 0  # phase 1 is done in this checkout
    assert phase1["unk_check"] and all(s["unk_share"] < 0.01 for s in phase1["unk_check"])
    assert (phase1["precision"], phase1["precision_reason"]) == ("bf16", "planned for a GPU with bf16 (Ampere or later)")
    assert plan("slurm/pretrain_large.sh", PRECISION="fp16")["precision"] == "fp16"  # PRECISION reaches the run
    assert phase1["evaluation"] is None  # no held-out data by default
    # Loader workers: the checkpoint's count when resuming one (exact data stream), else 2 per GPU.
    assert phase1["data_config"]["num_workers"] == 0 and "checkpoint's count" in phase1["loader"]
    fresh = plan("slurm/pretrain_large.sh", OUTPUT_DIR=str(tmp_path / "fresh"), STOP_AT_STEP="")
    assert fresh["data_config"]["num_workers"] == 2 and "pinned host memory" in fresh["loader"]
    assert plan("slurm/pretrain_large.sh", NUM_WORKERS="4")["data_config"]["num_workers"] == 4
    held_out = f"wiki={checkout}/bert_ds/data/sample/wiki/enwiki-held-out.jsonl"
    evaluated = plan("slurm/pretrain_large.sh", EVAL_INTERVAL="2000", EVAL_DATA=held_out, EVAL_SAMPLES="10000",
                     TARGET_MLM_ACCURACY="0.72", KEEP_BEST="1")["evaluation"]
    assert evaluated == dict(data=[held_out], interval=2000, samples=10000, target_mlm_accuracy=0.72, keep_best=True)

    grid = plan("slurm/finetune_glue.sh")
    by_task = {t["name"]: t for t in grid["tasks"]}
    assert len(by_task) == 9
    for name, task in by_task.items():
        settings = {(r["batch_size"], r["lr"], r["epochs"]) for r in task["runs"]}
        assert settings == {(32, lr, 3) for lr in (5e-5, 4e-5, 3e-5, 2e-5)}, name  # Table 1: lr chosen on dev
        assert task["restarts"] == (5 if name in ("cola", "stsb", "mrpc", "rte") else 1), name
    squad = plan("slurm/finetune_squad.sh")
    assert {(r["batch_size"], r["lr"], r["epochs"]) for r in squad["tasks"][0]["runs"]} == {(32, 5e-5, 3)}
    assert squad["max_seq_length"] == 384
    assert squad["tasks"][0]["options"] == {"doc stride": 128, "max query length": 64, "n-best": 20, "max answer length": 30}
    v2 = tmp_path / "v2"
    v2.mkdir()
    for split in ("train", "dev"):  # answerable questions only: valid SQuAD 2.0 files too
        shutil.copy(checkout / "squad_data" / f"{split}-v1.1.json", v2 / f"{split}-v2.0.json")
    squad2 = plan("slurm/finetune_squad.sh", VERSION="2.0", DATA_DIR=str(v2))
    assert {(r["batch_size"], r["lr"], r["epochs"]) for r in squad2["tasks"][0]["runs"]} == {(48, 5e-5, 2)}
    swag = plan("slurm/finetune_swag.sh")
    assert swag["precision"] == "bf16" and plan("slurm/finetune_swag.sh", PRECISION="fp32")["precision"] == "fp32"
    assert {(r["batch_size"], r["lr"], r["epochs"]) for r in swag["tasks"][0]["runs"]} == {(16, 2e-5, 3)}
    ner = plan("slurm/finetune_ner.sh")
    assert {(r["batch_size"], r["lr"], r["epochs"]) for r in ner["tasks"][0]["runs"]} == {(32, 2e-5, 3)}
    assert ner["max_seq_length"] == 128 and ner["tasks"][0]["kind"] == "tagging"
    for resolved in (grid, squad, swag, ner):
        assert resolved["model"]["num_layers"] == 24 and resolved["warmup_proportion"] == 0.1
        assert resolved["weight_decay"] == 0.01


def test_paper_grid_is_the_finetuning_default(checkout, tmp_path):
    """`--grid` without overrides is appendix A.3's grid: batch {16, 32} x lr {5e-5, 3e-5, 2e-5} x epochs {2, 3, 4}."""
    plan_json = tmp_path / "grid.json"
    result = run_entrypoint("bert_ds/finetune/glue.py", [
        "--dry-run", "gpu", "--world-size", "8", "--task", "rte", "--data-dir", str(checkout / "glue_data"),
        "--init", str(checkout / "runs" / "bert-large"), "--output", str(tmp_path / "out"), "--grid",
        "--plan-json", str(plan_json)])
    assert result.returncode == 0, result.stderr[-2000:]
    runs = json.loads(plan_json.read_text())["tasks"][0]["runs"]
    assert sorted((r["batch_size"], r["lr"], r["epochs"]) for r in runs) == sorted(
        (b, lr, e) for b in (16, 32) for lr in (5e-5, 3e-5, 2e-5) for e in (2, 3, 4))
    assert not (tmp_path / "out").exists()


def test_finetuning_takes_the_shared_optimizer_options(checkout, tmp_path):
    """Fine-tuning's recipe section is pre-training's optimizer section: --optimizer and Adam's
    betas and epsilon reach the plan (table and JSON), as the engine reads them."""
    plan_json = tmp_path / "lamb.json"
    result = run_entrypoint("bert_ds/finetune/glue.py", [
        "--dry-run", "gpu", "--world-size", "8", "--task", "rte", "--data-dir", str(checkout / "glue_data"),
        "--init", str(checkout / "runs" / "bert-large"), "--output", str(tmp_path / "out"), "--optimizer", "lamb",
        "--adam-beta2", "0.98", "--adam-eps", "1e-8", "--plan-json", str(plan_json)])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "LAMB betas 0.9/0.98, eps 1e-08, weight decay 0.01" in result.stdout
    plan = json.loads(plan_json.read_text())
    assert (plan["optimizer"], plan["adam_beta2"], plan["adam_eps"]) == ("lamb", 0.98, 1e-8)


def test_bad_values_are_one_error_line_and_write_nothing(checkout, tmp_path):
    large = ["--preset", "large", "--data", f"books={checkout}/data/bookcorpus/*.txt", "--dry-run", "gpu",
             "--save", str(tmp_path / "save"), "--plan-json", str(tmp_path / "plan.json")]
    early = tmp_path / "early"
    _large_checkpoint_marker(early, 12_000)  # phase 1 at step 12,000 of its 900,000
    cases = [
        (["--world-size", "12", "--tensor-parallel", "8"], "world size 12 is not divisible by tensor parallel x pipeline parallel = 8 x 1 = 8"),
        (["--world-size", "8", "--tokenizer", "bert-large-uncasd"], "'bert-large-uncasd' is neither an existing path nor a built-in name"),
        (["--world-size", "8", "--load", str(early), "--seq-length", "512"],
         "written by a 128-token run that stops at step 900,000: switching to 512 tokens now would cut that phase short"),
        (["--world-size", "8", "--load", str(early), "--seq-length", "512", "--phase-start-step", "900000"],
         "This phase starts at step 900,000 but the newest checkpoint in"),
        (["--world-size", "512"], "global batch size 256 is smaller than data parallel 512"),
        (["--world-size", "32", "--micro-batch-size", "16"], "16 x 32 = 512; use --micro-batch-size auto or a divisor of 256 / 32 = 8"),
        (["--world-size", "8", "--pipeline-parallel", "2", "--zero-stage", "2"],
         "ZeRO stage 2 cannot be combined with pipeline parallelism 2"),
    ]
    for extra, message in cases:
        result = run_entrypoint("bert_ds/pretrain.py", large + extra)
        _assert_one_error_line(result)
        assert message in result.stderr, (extra, result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["early"]  # no save folder, no plan file
    # A deliberate early switch names the step it starts at.
    ok = run_entrypoint("bert_ds/pretrain.py", large + ["--world-size", "8", "--load", str(early), "--seq-length", "512",
                                                          "--phase-start-step", "12000"])
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "sequence length 128 -> 512" in ok.stdout


def test_finetuning_bad_values_are_one_error_line(checkout, tmp_path):
    common = ["--dry-run", "gpu", "--task", "rte", "--data-dir", str(checkout / "glue_data"), "--output", str(tmp_path / "out")]
    cases = [
        (["--world-size", "64", "--init", str(checkout / "runs" / "bert-large")], "global batch size 32 is smaller than data parallel 64: every data-parallel rank needs at least one sequence per step; raise --batch-size"),
        (["--world-size", "8", "--init", str(tmp_path / "nowhere")], "no such folder"),
        (["--world-size", "8", "--init", str(checkout / "runs" / "bert-large"), "--tensor-parallel", "3"],
         "16 attention heads are not divisible by tensor parallel size 3"),
        (["--world-size", "8", "--tokenizer", "bert-base-uncasd"], "is neither an existing path nor a built-in name"),
    ]
    for extra, message in cases:
        result = run_entrypoint("bert_ds/finetune/glue.py", common + extra)
        _assert_one_error_line(result)
        assert message in result.stderr, (extra, result.stderr)
    assert not (tmp_path / "out").exists()


def test_world_size_comes_from_the_launchers_variables(checkout):
    """Without --world-size the plan reads what the real run would: torchrun's WORLD_SIZE, srun's
    step variables, or inside a batch script the job's SLURM_NTASKS."""
    from bert_ds.training.plan.resolve import world_size_from_environment

    assert world_size_from_environment({"RANK": "0", "WORLD_SIZE": "16"})[0] == 16
    assert world_size_from_environment({"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "64", "SLURM_NTASKS": "64"})[0] == 64
    assert world_size_from_environment({"SLURM_NTASKS": "32", "SLURM_JOB_ID": "7"}) == (32, "the Slurm job's SLURM_NTASKS")
    assert world_size_from_environment({})[0] == 1
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    result = subprocess.run(
        [sys.executable, "bert_ds/pretrain.py", "--dry-run", "gpu", "--preset", "large", "--data",
         f"books={checkout}/data/bookcorpus/*.txt"], capture_output=True, text=True, cwd=REPO,
        env={**env, "SLURM_NTASKS": "32", "SLURM_JOB_ID": "7"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "world 32 = TP 1 x PP 1 x DP 32 (world from the Slurm job's SLURM_NTASKS)" in result.stdout
    assert "global 256 = micro 8 x DP 32 x accumulation 1" in result.stdout


def test_without_the_prepared_corpora_the_plan_names_the_command_that_makes_them(checkout, tmp_path):
    env = _slurm_env(checkout, 4, str(tmp_path / "cache"), DATA_DIR=str(tmp_path / "nowhere"))
    result, plan = _plan_script(checkout, "slurm/pretrain_large.sh", env, tmp_path / "plan.json")
    _assert_one_error_line(result)
    assert plan is None and f"error: {tmp_path}/nowhere/bookcorpus is not prepared" in result.stderr
    assert (f"python -m bert_ds.data.prepare hf:bookcorpus/bookcorpus@refs/convert/parquet --output "
            f"{tmp_path}/nowhere/bookcorpus" in result.stderr)


def test_prepare_data_script_makes_the_folders_the_recipe_reads_and_resumes(checkout, tmp_path):
    """slurm/prepare_data.sh as documented, against a local mirror of the hub, then the recipe's
    plan on its output; a second run (a requeue) finds both folders complete."""
    hub = tmp_path / "hub"
    _prepared_corpora(tmp_path / "unused", hub)  # writes the mirror (and a first copy elsewhere)
    env = {**os.environ, "BERT_DS_HUB_MIRROR": str(hub), "BERT_DS_CACHE": str(tmp_path / "cache"), "PYTHON": sys.executable,
           "SLURM_SUBMIT_DIR": str(checkout), "DATA_DIR": str(tmp_path / "prepared"), "NUM_PROC": "1"}
    first = subprocess.run(["bash", str(checkout / "slurm/prepare_data.sh")], capture_output=True, text=True, env=env,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    for name in ("bookcorpus", "wikipedia"):
        assert json.loads((tmp_path / "prepared" / name / "manifest.json").read_text())["complete"]
    again = subprocess.run(["bash", str(checkout / "slurm/prepare_data.sh")], capture_output=True, text=True, env=env,
                           timeout=300)
    assert again.returncode == 0 and again.stderr.count("is prepared already") == 2
    plan_env = _slurm_env(checkout, 4, str(tmp_path / "cache"), DATA_DIR=str(tmp_path / "prepared"))
    result, plan = _plan_script(checkout, "slurm/pretrain_large.sh", plan_env, tmp_path / "plan.json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert [d["location"] for d in plan["data"]] == [str(tmp_path / "prepared" / n) for n in ("bookcorpus", "wikipedia")]


@pytest.mark.parametrize("device, dp, saved, expected", [
    ("cpu", 4, None, 0), ("gpu", 4, None, 2),  # fresh: 0 on CPUs, 2 per GPU rank
    ("gpu", 4, dict(data_parallel=4, num_workers=0), 0),  # the same DP size: the checkpoint's count
    ("cpu", 2, dict(data_parallel=1, num_workers=2), 0),  # 2 shards over 2 ranks: one each, no worker needed
    ("gpu", 2, dict(data_parallel=1, num_workers=4), 2),  # 4 shards over 2 ranks: 2 workers each
    ("gpu", 3, dict(data_parallel=2, num_workers=2), 2),  # 4 shards do not divide over 3: re-divided, the default
])
def test_auto_loader_workers_keep_a_resumed_checkpoints_data_shards(device, dp, saved, expected):
    from bert_ds.training.plan.resolve import loader_workers

    workers, reason = loader_workers(None, device, dp, saved)
    assert workers == expected, reason
    assert loader_workers(3, device, dp, saved) == (3, "--num-workers")
