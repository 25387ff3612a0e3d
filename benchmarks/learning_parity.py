"""Learning parity: bert_ds against Hugging Face's BertForPreTraining, same batches, same recipe.

Both sides train in one process, in lockstep: every step draws one batch from bert_ds's loader
(the built-in sample's books + training Wikipedia articles, dynamic masks) and gives it to each
side (which side goes first alternates), so both see the same data and the same machine. Only
their steps are timed (the loader is not). Every `--eval-interval` steps, and at the end, both are
scored on the same fixed held-out set (training/evaluation.py: the held-out Wikipedia articles,
static masks and pairs) by the same function (model/loss.py evaluation_sums).

The two sides (benchmarks/parity_sides.py): bert_ds's real engine and transformers'
BertForPreTraining with the Hugging Face Trainer's optimizer groups and schedule.

Modes:
  strict: the same initial weights (HF's random initialisation, brought into bert_ds through the
          Hugging Face weight mapping the importer uses), dropout 0, fp32. Reports the per-step
          MLM and NSP loss differences and each side's final held-out accuracy.
  recipe: each side its own initialisation (seeded), dropout 0.1, over `--seeds` seeds and each
          of `--precisions`: held-out MLM/NSP accuracy (mean ± std per side) and time to accuracy:
          the training seconds each side needs to first reach the held-out MLM accuracy HF ends
          at, linearly interpolated between evaluations, on the seed-mean curves (and per seed);
          the ratio is bert_ds / HF (below 1: bert_ds gets there sooner).

Usage: python benchmarks/learning_parity.py [--modes strict recipe] [--presets mini base]
       [--strict-steps 300] [--recipe-steps 600] [--seeds 3] [--precisions fp32 bf16]
       [--batch 32] [--seq-length 128] [--lr 3e-4] [--warmup-fraction 0.1] [--eval-interval 50]
       [--eval-samples 512] [--data SPEC ...] [--eval-data SPEC ...] [--tokenizer T]
       [--recipe-dropout 0.1] [--adam-beta2 0.999] [--until-accuracy 0.25 [--chase [ACCURACY]]]
       [--init own|hf] [--alone] [--save-interval N] [--stop-at-step N] [--output DIR] [--json PATH]
       [--summarize]
A real corpus: --data books=DIR/books@words wiki=DIR/wiki@words --eval-data ... --tokenizer
bert-base-uncased. Both sides are post-LN (Hugging Face's BERT has no pre-LN variant).
Writes OUTPUT/<mode>-<preset>-<precision>-seed<S>-<side>.jsonl (metrics files with train_seconds)
and OUTPUT/<mode>-<preset>.png (`python -m bert_ds.plot --x seconds` of seed 0's runs).
A pair that ends at --until-accuracy with bert_ds a little below HF's final accuracy has no time
to that accuracy for bert_ds; --chase lets bert_ds go on alone (the same batch stream, each step
timed as in the pair) until it reaches it, so the ratio exists. The table's accuracies stay those
at the pair's end.
The initial draw held equal: --init hf starts recipe mode's bert_ds side from Hugging Face's seeded
draw (strict mode's import; in bf16 its fp32 masters too), and --alone trains that side only, on
the batches a pair of the same seed and settings saw (the loader's stream does not depend on the
sides), so its curve compares with that pair's Hugging Face side at a third of the pair's cost.
A pair of hours: --save-interval N (and --stop-at-step, SIGTERM, SIGINT) save both sides under
OUTPUT/state-*; the same command goes on from there (benchmarks/parity_state.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity_summary import mean_curve, print_tables, recipe_summary, strict_summary  # noqa: E402


def run_config(args, preset: str, precision: str, seed: int, steps: int, dropout: float):
    from bert_ds.data.sources import SAMPLE_HELD_OUT_SPEC, SAMPLE_TRAIN_SPECS
    from bert_ds.training.config.args import parse_args

    return parse_args([
        "--preset", preset, "--data", *(args.data or SAMPLE_TRAIN_SPECS), "--seq-length", str(args.seq_length),
        "--global-batch-size", str(args.batch), "--micro-batch-size", str(args.batch), "--lr", str(args.lr),
        "--warmup-steps", str(max(1, round(steps * args.warmup_fraction))), "--train-steps", str(steps),
        "--precision", precision, "--seed", str(seed), "--dropout", str(dropout), "--adam-beta2", str(args.adam_beta2),
        "--eval-data", *(args.eval_data or [SAMPLE_HELD_OUT_SPEC]), "--eval-samples", str(args.eval_samples),
        "--eval-interval", str(args.eval_interval), *(["--tokenizer", args.tokenizer] if args.tokenizer else []),
    ])


def timed(side, batch) -> tuple[tuple[float, float, float], float]:
    from bert_ds.runtime.device import synchronize

    synchronize()
    began = time.perf_counter()
    losses = side.step(batch)
    synchronize()
    return losses, time.perf_counter() - began


def train_pair(args, tokenizer, mode: str, preset: str, precision: str, seed: int) -> dict:
    """Both sides through `steps` lockstep steps; their per-step losses, times and evaluations.
    With --save-interval or --stop-at-step it saves and resumes (benchmarks/parity_state.py)."""
    import parity_state
    from parity_sides import BertDsSide, HuggingFaceSide

    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import parse_sources
    from bert_ds.runtime.distributed import teardown_parallel
    from bert_ds.training.evaluation import build_eval_set, load_eval_examples
    from bert_ds.runtime.device import to_device

    strict = mode == "strict"
    steps = args.strict_steps if strict else args.recipe_steps
    run = run_config(args, preset, precision, seed, steps, 0.0 if strict else args.recipe_dropout)
    # HF first: in strict mode its initialisation is the one both sides start from.
    from bert_ds.training import job
    from bert_ds.training.plan.resolve import run_model_config

    model_config = run_model_config(run, tokenizer.vocab_size)
    layout = job.setup_parallel(run, model_config)
    hf = HuggingFaceSide(run, model_config, layout, tokenizer, precision, seed)
    ours = BertDsSide(run, model_config, layout, hf.initial_state() if strict or args.init == "hf" else None)
    # --alone: HF's side is built (its initial draw, for --init hf) but never stepped.
    sides = [ours] if args.alone else [ours, hf]
    eval_set = build_eval_set(run, tokenizer, ours.layout, load_eval_examples(run, tokenizer)[0])
    loader = PretrainingLoader(parse_sources(run.data.sources), tokenizer, run.with_num_workers(0).data_config())
    root = parity_state.state_root(Path(args.output), mode, preset, precision, seed)
    settings = parity_state.settings_of(args, steps)
    progress = parity_state.resume(root, ours, hf, loader, settings, seed) or dict(
        step=0, tokens=0, seconds={s.name: 0.0 for s in sides}, records={s.name: [] for s in sides},
        evals={s.name: [] for s in sides})
    # A pair that was saved once keeps saving when stopped, whatever this command's options.
    saving = bool(args.save_interval or args.stop_at_step or progress["step"])
    records, seconds, evals = progress["records"], progress["seconds"], progress["evals"]
    if progress["step"]:
        print(f"  {mode} {preset} {precision} seed {seed}: resumed from {root} at step {progress['step']}", flush=True)
    if args.stop_at_step and progress["step"] >= args.stop_at_step:
        teardown_parallel()
        print(f"  {mode} {preset} {precision} seed {seed}: {root} is at step {progress['step']}, "
              f"not before --stop-at-step {args.stop_at_step}: nothing to do", flush=True)
        sys.exit(0)
    from bert_ds.training.loop.trainer import StopRequest

    stop = StopRequest(parity_state.EXIT_CODE_FOR_SIGNAL)
    # Once the pair has ended, --chase lets bert_ds go on alone: progress["chase"] = {start, target}.
    chase = progress.get("chase")
    if chase is None and reached(evals, sides, args.until_accuracy, progress["step"]):
        # A pair saved where it ended: the same command again summarises it without recomputing.
        print(f"  {mode} {preset} {precision} seed {seed}: ended at step {progress['step']} ({'bert_ds' if args.alone else 'both sides'} at "
              f"{args.until_accuracy:.0%} or more held out)", flush=True)
        chase = progress["chase"] = start_chase(args, evals, progress["step"])
        if chase is None:
            steps = progress["step"]
    elif chase and chased(evals, chase, progress["step"]):
        print(f"  {mode} {preset} {precision} seed {seed}: bert_ds reached {chase['target']:.2%} held out alone at "
              f"step {progress['step']} (the pair ended at {chase['start']})", flush=True)
        steps = progress["step"]
    batches = iter(loader)
    began = time.perf_counter()
    for step in range(progress["step"], steps):
        batch = to_device(next(batches), layout.device)
        batch_tokens = int(batch["attention_mask"].sum())
        progress["tokens"] += batch_tokens
        active = [ours] if chase else sides if step % 2 == 0 else sides[::-1]
        for side in active:
            (mlm, nsp, lr), spent = timed(side, batch)
            seconds[side.name] += spent
            records[side.name].append(dict(step=step + 1, consumed_tokens=progress["tokens"], train_seconds=seconds[side.name],
                                           loss=mlm + nsp, mlm_loss=mlm, nsp_loss=nsp, lr=lr,
                                           tokens_per_s=batch_tokens / spent))
        progress["step"] = step + 1
        finished = False
        if (step + 1) % args.eval_interval == 0 or step + 1 == steps:
            for side in active:
                mlm_acc, nsp_acc, mlm_loss = side.evaluate(eval_set)
                evals[side.name].append({"step": step + 1, "consumed_tokens": progress["tokens"], "train_seconds": seconds[side.name],
                                         "eval/mlm_accuracy": mlm_acc, "eval/nsp_accuracy": nsp_acc, "eval/mlm_loss": mlm_loss})
            print(f"  {mode} {preset} {precision} seed {seed}: step {step + 1}/{steps} | "
                  + " | ".join(f"{s.name} mlm_acc {evals[s.name][-1]['eval/mlm_accuracy']:.4f} "
                               f"({seconds[s.name]:.0f}s)" for s in active)
                  + f" | {time.perf_counter() - began:.0f}s", flush=True)
            if chase:
                finished = chased(evals, chase, step + 1)
            # Both sides past the target: the run has shown what it is for, unless bert_ds goes on alone.
            elif reached(evals, sides, args.until_accuracy, step + 1):
                chase = progress["chase"] = start_chase(args, evals, step + 1)
                finished = chase is None
        stopping = stop.signal or step + 1 == args.stop_at_step
        if saving and (stopping or finished or (args.save_interval and (step + 1) % args.save_interval == 0)):
            print(f"  saved {parity_state.save(root, ours, hf, loader, progress, settings)}", flush=True)
        if stopping:
            teardown_parallel()
            print(f"  stopped at step {step + 1} ({'signal ' + str(stop.signal) if stop.signal else '--stop-at-step'}); "
                  "the same command goes on from there", flush=True)
            sys.exit(stop.exit_code())
        if finished:
            break
    teardown_parallel()
    # The pair's steps are HF's: a chase adds steps to bert_ds's side only.
    return dict(mode=mode, preset=preset, precision=precision, seed=seed, steps=records[sides[-1].name][-1]["step"],
                records=records, evals=evals, seconds=seconds)


def start_chase(args, evals: dict, step: int) -> Optional[dict]:
    """At the end of a pair, with --chase: the accuracy bert_ds goes on to alone (HF's final one
    unless --chase names one), or None when there is nothing to chase."""
    if args.chase is None:
        return None
    target = evals["hf"][-1]["eval/mlm_accuracy"] if args.chase == "hf" else args.chase
    if evals["bert_ds"][-1]["eval/mlm_accuracy"] >= target:
        return None
    print(f"  the pair ended at step {step}; bert_ds goes on alone until {target:.2%} held out "
          f"(at most to step {args.recipe_steps})", flush=True)
    return dict(start=step, target=target)


def reached(evals: dict, sides, target: Optional[float], step: int) -> bool:
    """Whether both sides' evaluation at `step` reached the --until-accuracy target."""
    return target is not None and all(evals[s.name] and evals[s.name][-1]["step"] == step
                                and evals[s.name][-1]["eval/mlm_accuracy"] >= target for s in sides)


def chased(evals: dict, chase: dict, step: int) -> bool:
    """Whether bert_ds's evaluation at `step` reached the accuracy it chases alone."""
    last = evals["bert_ds"][-1]
    return last["step"] == step and last["eval/mlm_accuracy"] >= chase["target"]


def write_curves(pairs: list[dict], output: Path, name: str) -> Path:
    from bert_ds.plot import main as plot

    files, labels = [], []
    for pair in pairs:
        for side in pair["records"]:
            path = output / f"{pair['mode']}-{pair['preset']}-{pair['precision']}-seed{pair['seed']}-{side}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in pair["records"][side] + pair["evals"][side]))
            if pair["seed"] == pairs[0]["seed"]:
                files.append(str(path))
                labels.append(f"{side} {pair['precision']}")
    png = output / f"{name}.png"
    plot([*files, "--labels", *labels, "--x", "seconds", "--title", f"learning parity: {name}", "-o", str(png)])
    return png


def plot_mean_curves(pairs: list[dict], png: Path) -> Path:
    """Held-out MLM accuracy against training seconds, seed-mean curves of both sides for each
    precision, with the accuracy HF ends at marked: time to accuracy as a picture."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    precisions = sorted({p["precision"] for p in pairs}, key=["fp32", "bf16"].index)
    figure, axes = plt.subplots(1, len(precisions), figsize=(6 * len(precisions), 4), squeeze=False)
    for axis, precision in zip(axes[0], precisions):
        chosen = [p for p in pairs if p["precision"] == precision]
        for side in ("bert_ds", "hf"):
            curve = mean_curve(chosen, side)
            axis.plot([x["train_seconds"] for x in curve], [x["eval/mlm_accuracy"] for x in curve],
                      marker="o", markersize=3, label=f"{side} (mean of {len(chosen)} seeds)")
        axis.axhline(mean_curve(chosen, "hf")[-1]["eval/mlm_accuracy"], color="grey", linestyle=":", label="HF's final accuracy")
        axis.set(title=f"{chosen[0]['preset']} {precision}: held-out MLM accuracy", xlabel="training seconds", ylabel="accuracy")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    return png


def read_pairs(output: Path, mode: str, preset: str) -> list[dict]:
    """The pairs a run wrote to `output` (write_curves' files), as train_pair returns them."""
    pairs = {}
    for path in sorted(output.glob(f"{mode}-{preset}-*-seed*-*.jsonl")):
        precision, seed, side = path.stem[len(f"{mode}-{preset}-"):].rsplit("-", 2)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        pair = pairs.setdefault((precision, int(seed[4:])), dict(mode=mode, preset=preset, precision=precision,
                                                             seed=int(seed[4:]), records={}, evals={}, seconds={}))
        pair["records"][side] = [x for x in lines if "loss" in x]
        pair["evals"][side] = [x for x in lines if "eval/mlm_accuracy" in x]
        pair["seconds"][side] = pair["records"][side][-1]["train_seconds"]
        pair["steps"] = pair["records"][side][-1]["step"]
    return [pairs[key] for key in sorted(pairs)]


def chase_target(text: str):
    """--chase's value: an accuracy, or "hf" (its default) for HF's final one."""
    return text if text == "hf" else float(text)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", choices=["strict", "recipe"], default=["strict", "recipe"])
    parser.add_argument("--presets", nargs="+", default=["mini"])
    parser.add_argument("--strict-steps", type=int, default=300)
    parser.add_argument("--recipe-steps", type=int, default=600)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"],
                        help="recipe mode's precisions (strict mode is fp32)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--warmup-fraction", type=float, default=0.1)
    parser.add_argument("--eval-interval", type=int, default=50)
    parser.add_argument("--eval-samples", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--data", nargs="+", help="training sources, --data syntax (default: the built-in sample)")
    parser.add_argument("--eval-data", nargs="+", help="held-out sources (default: the sample's held-out articles)")
    parser.add_argument("--tokenizer", help="--tokenizer of both sides (default: the sample's sentencepiece)")
    parser.add_argument("--recipe-dropout", type=float, default=0.1, help="dropout of recipe mode (the paper's 0.1)")
    parser.add_argument("--adam-beta2", type=float, default=0.999)
    parser.add_argument("--until-accuracy", type=float, default=None,
                        help="end a pair early once both sides reach this held-out MLM accuracy (at an evaluation; "
                             "0 ends it at the first); it is saved there when saving")
    parser.add_argument("--chase", nargs="?", const="hf", type=chase_target, metavar="ACCURACY",
                        help="once a pair ends at --until-accuracy, bert_ds goes on alone (same batches) until its held-out "
                             "MLM accuracy reaches HF's final one, or ACCURACY, or --recipe-steps: its time to HF's final "
                             "accuracy then exists when it ended the pair a little below it")
    parser.add_argument("--init", choices=["own", "hf"], default="own",
                        help="recipe mode's initial weights: each side its own draw (own), or bert_ds starting from "
                             "Hugging Face's seeded draw, as strict mode always does (hf): the draw held equal")
    parser.add_argument("--alone", action="store_true",
                        help="recipe mode: train bert_ds only (Hugging Face's side is drawn, not stepped), on the batches "
                             "a pair of the same seed and settings sees: compare its curve with that pair's")
    parser.add_argument("--save-interval", type=int, default=0,
                        help="save both sides every N steps under OUTPUT/state-*; the same command resumes (0: never)")
    parser.add_argument("--stop-at-step", type=int, default=0,
                        help="save and stop once this step is done (a long pair in several sittings; 0: run to the end)")
    parser.add_argument("--output", default="runs/learning-parity")
    parser.add_argument("--json", help="write the summaries to this file")
    parser.add_argument("--summarize", action="store_true",
                        help="train nothing: summarise the runs already in --output")
    args = parser.parse_args(argv)
    if args.alone and (args.chase is not None or args.modes != ["recipe"]):
        parser.error("--alone trains bert_ds's side of recipe mode only: give --modes recipe and no --chase")
    if args.chase is not None and args.until_accuracy is None:
        parser.error("--chase goes on after a pair that ended at --until-accuracy: give --until-accuracy too")
    if args.summarize and args.alone:
        parser.error("--summarize compares the two sides of a pair; a run --alone is read with python -m bert_ds.plot")
    if args.summarize:
        results = {"strict": [], "recipe": [], "args": vars(args)}
        for preset in args.presets:
            if "strict" in args.modes:
                results["strict"] += [strict_summary(pair) for pair in read_pairs(Path(args.output), "strict", preset)]
            if "recipe" in args.modes:
                # A run --alone in the same folder has no Hugging Face side to compare.
                pairs = [p for p in read_pairs(Path(args.output), "recipe", preset) if "hf" in p["records"]]
                if pairs:
                    results["recipe_mean_curves"] = str(plot_mean_curves(pairs, Path(args.output) / f"recipe-{preset}-mean.png"))
                for precision in args.precisions:
                    chosen = [p for p in pairs if p["precision"] == precision]
                    if chosen:
                        results["recipe"].append(recipe_summary(chosen, args.until_accuracy))
        print_tables(results)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return results
    if args.alone and any(Path(args.output).glob("recipe-*-hf.jsonl")):
        parser.error(f"{args.output} holds a pair's curves, which --alone would overwrite on bert_ds's side: give another --output")
    if args.threads:
        torch.set_num_threads(args.threads)
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.tokenizer import resolve_tokenizer

    tokenizer = resolve_tokenizer(parse_args(["--data", *args.data] if args.data else [])
                                  if not args.tokenizer else parse_args(["--tokenizer", args.tokenizer]))
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    results = {"strict": [], "recipe": [], "threads": torch.get_num_threads(), "args": vars(args)}
    for preset in args.presets:
        if "strict" in args.modes:
            pair = train_pair(args, tokenizer, "strict", preset, "fp32", 0)
            results["strict"].append(dict(strict_summary(pair), curves=str(write_curves([pair], output, f"strict-{preset}"))))
        if "recipe" in args.modes:
            everything = []
            for precision in args.precisions:
                pairs = [train_pair(args, tokenizer, "recipe", preset, precision, seed) for seed in range(args.seeds)]
                if not args.alone:
                    results["recipe"].append(recipe_summary(pairs, args.until_accuracy))
                everything += pairs
            results["recipe_curves"] = str(write_curves(everything, output, f"recipe-{preset}"))
            if args.alone:
                for pair in everything:
                    final = pair["evals"]["bert_ds"][-1]
                    print(f"recipe {preset} {pair['precision']} seed {pair['seed']}, bert_ds alone: {final['eval/mlm_accuracy']:.2%} "
                          f"held out at step {final['step']}; against a pair: python -m bert_ds.plot "
                          f"{output}/recipe-{preset}-{pair['precision']}-seed{pair['seed']}-bert_ds.jsonl PAIR_HF.jsonl --crossings ...")
            else:
                results["recipe_mean_curves"] = str(plot_mean_curves(everything, output / f"recipe-{preset}-mean.png"))
    print_tables(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
