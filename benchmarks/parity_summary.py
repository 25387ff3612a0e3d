"""The learning-parity benchmark's summaries (benchmarks/learning_parity.py): strict mode's
per-step differences, recipe mode's accuracies, speeds, times to accuracy and loss windows, and
the tables printed from them. Pure functions of the pairs train_pair returns or read_pairs reads."""

from __future__ import annotations

import statistics
from typing import Optional


def time_to(evals: list[dict], target: float):
    """Training seconds at which the held-out MLM accuracy first reaches `target`, interpolated
    between evaluations, from 0% at 0 s before the first."""
    from bert_ds.training.loop.metrics_file import crossing

    return crossing(evals, target, "train_seconds", start=(0.0, 0.0))


def strict_summary(pair: dict) -> dict:
    ours, hf = pair["records"]["bert_ds"], pair["records"]["hf"]
    diffs = {key: [abs(a[key] - b[key]) for a, b in zip(ours, hf)] for key in ("mlm_loss", "nsp_loss")}
    relative = [abs(a["mlm_loss"] - b["mlm_loss"]) / b["mlm_loss"] for a, b in zip(ours, hf)]
    first = min(100, len(ours))
    final = {side: pair["evals"][side][-1] for side in ("bert_ds", "hf")}
    return dict(
        preset=pair["preset"], steps=pair["steps"], first_step_mlm_diff=diffs["mlm_loss"][0],
        max_mlm_diff_first_100=max(diffs["mlm_loss"][:first]), max_nsp_diff_first_100=max(diffs["nsp_loss"][:first]),
        max_mlm_relative_diff_first_100=max(relative[:first]), max_mlm_diff=max(diffs["mlm_loss"]),
        mean_mlm_diff_last_100=statistics.mean(diffs["mlm_loss"][-100:]),
        final_mlm_accuracy={s: f["eval/mlm_accuracy"] for s, f in final.items()},
        final_nsp_accuracy={s: f["eval/nsp_accuracy"] for s, f in final.items()},
        accuracy_gap_points=100 * (final["bert_ds"]["eval/mlm_accuracy"] - final["hf"]["eval/mlm_accuracy"]),
        seconds=pair["seconds"],
    )


def _mean_std(values: list[float]) -> dict:
    return dict(mean=statistics.mean(values), std=statistics.stdev(values) if len(values) > 1 else 0.0, values=values)


def mean_curve(pairs: list[dict], side: str) -> list[dict]:
    """One side's held-out curve averaged over seeds: at each evaluation, the mean accuracy and the
    mean training seconds (every seed evaluates at the same steps)."""
    curves = [p["evals"][side] for p in pairs]
    return [{"step": points[0]["step"],
             "train_seconds": statistics.mean(x["train_seconds"] for x in points),
             "eval/mlm_accuracy": statistics.mean(x["eval/mlm_accuracy"] for x in points)}
            for points in zip(*curves)]


def loss_windows(pair: dict) -> list[dict]:
    """Between consecutive evaluations: each side's mean training MLM and NSP loss over those steps
    and its held-out accuracy at the end of them (the per-step curves of a long pair in a table)."""
    rows, start = [], 0
    for at, point in enumerate(pair["evals"]["hf"]):
        row = {"steps": f"{start + 1}-{point['step']}", "consumed_tokens": point["consumed_tokens"]}
        for side in ("bert_ds", "hf"):
            window = [r for r in pair["records"][side] if start < r["step"] <= point["step"]]
            row[side] = dict(mlm_loss=statistics.mean(r["mlm_loss"] for r in window),
                             nsp_loss=statistics.mean(r["nsp_loss"] for r in window),
                             mlm_accuracy=pair["evals"][side][at]["eval/mlm_accuracy"],
                             nsp_accuracy=pair["evals"][side][at]["eval/nsp_accuracy"])
        rows.append(row)
        start = point["step"]
    return rows


def recipe_summary(pairs: list[dict], until: Optional[float] = None) -> dict:
    """Final accuracies, speeds and the time each side takes to HF's final accuracy; with `until`
    (--until-accuracy) also the time to that accuracy, which both sides of an ended pair reached."""
    # Each side at the pair's last evaluation; a chase's later ones count only for the time to HF's accuracy.
    final = {side: [[e for e in p["evals"][side] if e["step"] <= p["steps"]][-1] for p in pairs] for side in ("bert_ds", "hf")}
    ratios, times = [], {"bert_ds": [], "hf": []}
    for pair in pairs:
        target = pair["evals"]["hf"][-1]["eval/mlm_accuracy"]
        reached = {side: time_to(pair["evals"][side], target) for side in ("bert_ds", "hf")}
        for side, seconds in reached.items():
            times[side].append(seconds)
        ratios.append(reached["bert_ds"] / reached["hf"] if reached["bert_ds"] is not None else None)
    speed = {side: [p["records"][side][-1]["step"] / p["seconds"][side] for p in pairs] for side in ("bert_ds", "hf")}
    chases = [dict(seed=p["seed"], start=p["steps"], end=p["evals"]["bert_ds"][-1]["step"],
                   accuracy=p["evals"]["bert_ds"][-1]["eval/mlm_accuracy"], target=p["evals"]["hf"][-1]["eval/mlm_accuracy"])
               for p in pairs if p["evals"]["bert_ds"][-1]["step"] > p["steps"]]
    # One seed's final accuracy moves by about a tenth of a point between seeds: a side ending a
    # hair below the other's final accuracy never "reaches" it. The seed-mean curves are the
    # headline; the per-seed ratios show the spread.
    means = {side: mean_curve(pairs, side) for side in ("bert_ds", "hf")}
    target = means["hf"][-1]["eval/mlm_accuracy"]
    mean_reached = {side: time_to(means[side], target) for side in means}
    to_target = {}
    if until is not None:
        seconds = {side: time_to(means[side], until) for side in means}
        to_target = dict(target_accuracy=until, seed_mean_curve_seconds_to_target=seconds,
                         seed_mean_curve_target_ratio=(seconds["bert_ds"] / seconds["hf"]
                                                       if None not in seconds.values() else None))
    return dict(**to_target, loss_windows=[loss_windows(p) for p in pairs], bert_ds_alone_after_the_pair=chases,
        preset=pairs[0]["preset"], precision=pairs[0]["precision"], steps=pairs[0]["steps"], seeds=[p["seed"] for p in pairs],
        mlm_accuracy={s: _mean_std([f["eval/mlm_accuracy"] for f in final[s]]) for s in final},
        nsp_accuracy={s: _mean_std([f["eval/nsp_accuracy"] for f in final[s]]) for s in final},
        accuracy_gap_points=100 * (statistics.mean(f["eval/mlm_accuracy"] for f in final["bert_ds"])
                                   - statistics.mean(f["eval/mlm_accuracy"] for f in final["hf"])),
        steps_per_second={s: _mean_std(v) for s, v in speed.items()},
        seconds_to_hf_final_accuracy=times, time_to_accuracy_ratio=ratios,
        mean_time_to_accuracy_ratio=statistics.mean(ratios) if all(r is not None for r in ratios) else None,
        seed_mean_curve_target=target, seed_mean_curve_seconds=mean_reached,
        seed_mean_curve_ratio=(mean_reached["bert_ds"] / mean_reached["hf"] if mean_reached["bert_ds"] is not None else None),
    )


def print_tables(results: dict) -> None:
    for row in results["strict"]:
        acc = row["final_mlm_accuracy"]
        print(f"strict {row['preset']} fp32, {row['steps']} steps: step-1 MLM loss diff {row['first_step_mlm_diff']:.2e}; "
              f"first 100 steps max |ΔMLM| {row['max_mlm_diff_first_100']:.2e} (relative {row['max_mlm_relative_diff_first_100']:.1e}), "
              f"max |ΔNSP| {row['max_nsp_diff_first_100']:.2e}; all steps max |ΔMLM| {row['max_mlm_diff']:.3f}; "
              f"held-out MLM accuracy bert_ds {acc['bert_ds']:.4f} vs HF {acc['hf']:.4f} ({row['accuracy_gap_points']:+.2f} points)")
    if results["recipe"]:
        print("| preset | precision | steps x seeds | MLM acc bert_ds | MLM acc HF | gap (points) | NSP acc bert_ds | NSP acc HF "
              "| steps/s bert_ds | steps/s HF | time to HF's accuracy, seed-mean curves, bert_ds / HF | per seed |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in results["recipe"]:
        m, n, s = row["mlm_accuracy"], row["nsp_accuracy"], row["steps_per_second"]
        ratio = row["seed_mean_curve_ratio"]
        ratios = ", ".join("never" if r is None else f"{r:.2f}" for r in row["time_to_accuracy_ratio"])
        print(f"| {row['preset']} | {row['precision']} | {row['steps']} x {len(row['seeds'])} | "
              f"{m['bert_ds']['mean']:.4f} ± {m['bert_ds']['std']:.4f} | {m['hf']['mean']:.4f} ± {m['hf']['std']:.4f} | "
              f"{row['accuracy_gap_points']:+.2f} | {n['bert_ds']['mean']:.3f} | {n['hf']['mean']:.3f} | "
              f"{s['bert_ds']['mean']:.2f} | {s['hf']['mean']:.2f} | "
              f"{'never' if ratio is None else f'{ratio:.2f}'} | {ratios} |")
    for row in results["recipe"]:
        if "target_accuracy" in row:
            seconds, ratio = row["seed_mean_curve_seconds_to_target"], row["seed_mean_curve_target_ratio"]
            print(f"{row['preset']} {row['precision']}: time to {row['target_accuracy']:.0%} held out (seed-mean curves): "
                  + ", ".join(f"{side} {'never' if t is None else f'{t:.0f} s'}" for side, t in seconds.items())
                  + ("" if ratio is None else f", bert_ds / HF {ratio:.2f}"))
        for c in row["bert_ds_alone_after_the_pair"]:
            print(f"{row['preset']} {row['precision']} seed {c['seed']}: bert_ds went on alone from step {c['start']} "
                  f"to {c['end']}: {c['accuracy']:.2%} held out against HF's final {c['target']:.2%}")
        if row["steps"] >= 1000:  # a long pair: its curves as a table, window by window
            print(f"{row['preset']} {row['precision']} seed {row['seeds'][0]}: mean training loss (MLM / NSP) and "
                  "held-out MLM accuracy per evaluation window")
            print("| steps | tokens | bert_ds MLM / NSP loss | HF MLM / NSP loss | held-out MLM bert_ds | HF |")
            print("|---|---|---|---|---|---|")
            for w in row["loss_windows"][0]:
                b, h = w["bert_ds"], w["hf"]
                print(f"| {w['steps']} | {w['consumed_tokens'] / 1e6:.1f}M | {b['mlm_loss']:.3f} / {b['nsp_loss']:.3f} | "
                      f"{h['mlm_loss']:.3f} / {h['nsp_loss']:.3f} | {b['mlm_accuracy']:.2%} | {h['mlm_accuracy']:.2%} |")
