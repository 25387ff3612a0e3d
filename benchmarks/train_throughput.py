"""Training throughput: bert_ds's pre-training step against Hugging Face's, in one process.

Three contestants, same preset, sequence length, batch, batches, precision and thread count
(batches from the built-in sample corpus; the model vocabulary is BERT's 30522 entries):
  - bert_ds: the real engine (training/job.py setup_engine with `--precision P`: DeepSpeed with the
             default config; at one replica that is ZeRO stage 0, in bf16 with bert_ds's own fp32
             masters (training/engine/master_weights.py); our model, our loss in fp32);
  - bare:    our model, loss and the same fused torch AdamW in a plain loop, without DeepSpeed
             (the engine's own overhead is bert_ds / bare - 1); fp32 only: megatron's linear
             layers do not run under CPU autocast, and a bare bf16 loop would need DeepSpeed's
             fp32 masters, i.e. the engine itself;
  - hf:      transformers.BertForPreTraining + torch AdamW (SDPA attention; foreach, torch's
             fastest non-fused setting, better than its default loop on CPUs), labels -100
             outside the masked positions, gradient clipping 1.0 like ours; in bf16 wrapped in
             `torch.autocast(device, dtype=torch.bfloat16)`, the two lines a user would write.
They run alternately (each repeat times every contestant once, after warm-up steps); the median
over repeats is reported. Model FLOP/s use the same formula for all (training/loop/metrics.py: the
useful maths, decoder on predicted positions only) and are compared with a large matrix multiply
in the same precision, timed once per repeat next to the steps, median (MFU).

`--precisions fp32 bf16` measures both in one run: JSON rows keyed "<preset>" (fp32) and
"<preset>_bf16" with the same keys plus `speedup_vs_fp32` (bert_ds bf16 / bert_ds fp32, same run).
`--accumulation N` times the recipe's shape: N micro batches of `--batch` per optimizer step, on
every contestant (keys gain "_xN"). After the timing, two of bert_ds's steps are profiled
(op_profile.py op_table): the "non-matrix share" column is the part of its op time that is
not matrix multiplication.

Usage: python benchmarks/train_throughput.py [--presets base tiny] [--precisions fp32 bf16]
       [--seq-length 128] [--batch 8] [--accumulation 1] [--steps 4] [--warmup 2] [--repeats 5] [--threads N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # op_profile and hf_reference, beside this file


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def matmul_flops_per_s(precision: str, size: int = 2048, repeats: int = 10) -> float:
    """FLOP/s of a large square matrix multiply on this device in `precision` (the MFU baseline)."""
    from bert_ds.runtime.device import device, synchronize

    if device().type != "cpu":
        size, repeats = 8192, 50
    a, b = (torch.randn(size, size, device=device(), dtype=DTYPES[precision]) for _ in range(2))
    for _ in range(3):
        a @ b
    synchronize()
    began = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize()
    return 2 * size**3 * repeats / (time.perf_counter() - began)


def fixed_batches(tokenizer, seq_length: int, batch: int, count: int) -> tuple[list[dict], float]:
    """`count` batches from the real loader (main process), and the seconds it took per batch.

    They stay in host memory (page-locked when the device is a GPU), as a loader hands them out:
    every contestant moves each micro batch itself, and bert_ds reads what its step needs to know
    before the move (training/loop/steps.py)."""
    from bert_ds.config import DataConfig
    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import sample_sources
    from bert_ds.runtime.device import device, pins_host_memory

    loader = PretrainingLoader(sample_sources(), tokenizer, DataConfig(seq_length=seq_length, micro_batch_size=batch, seed=7))
    iterator = iter(loader)
    next(iterator)  # opening the sources is not per-batch work
    began = time.perf_counter()
    pin = pins_host_memory(device())
    batches = [{k: t.pin_memory() if pin else t for k, t in next(iterator).items()} for _ in range(count)]
    return batches, (time.perf_counter() - began) / count


class BertDs:
    name = "bert_ds"

    def __init__(self, preset: str, seq_length: int, batch: int, vocab_size: int, precision: str, zero_stage=None,
                 accumulation: int = 1):
        from bert_ds.training import job
        from bert_ds.training.plan.resolve import run_model_config
        from bert_ds.training.config.args import parse_args

        self.accumulation = accumulation
        run = parse_args(["--preset", preset, "--seq-length", str(seq_length), "--global-batch-size", str(batch * accumulation),
                          "--micro-batch-size", str(batch), "--lr", "1e-4", "--precision", precision]
                         + (["--zero-stage", str(zero_stage)] if zero_stage is not None else []))
        # The model's vocabulary is BERT's (30522, padded to 30592), whatever tokenizer made the batches.
        self.model_config = run_model_config(run, vocab_size)
        self.layout = job.setup_parallel(run, self.model_config)
        self.engine, self.model, _ = job.setup_engine(run, self.model_config, self.layout)

    def step(self, micro_batches: list[dict]) -> None:
        from bert_ds.training.loop.steps import plain_step

        plain_step(self.engine, iter(micro_batches), self.accumulation, self.layout)


class Bare:
    """Our model and loss in a plain torch loop: what DeepSpeed's engine adds is measured against it."""

    name = "bare"

    def __init__(self, reference: BertDs, precision: str):
        from bert_ds.model import build_model
        from bert_ds.training.engine.optim import parameter_groups

        self.layout = reference.layout
        self.model, self.precision = build_model(reference.model_config, reference.layout), precision
        # The engine's own optimizer setting (fused AdamW), so the difference is DeepSpeed's bookkeeping.
        self.optimizer = torch.optim.AdamW(parameter_groups(self.model, 0.01), lr=1e-4, eps=1e-6, fused=True)

    def step(self, micro_batches: list[dict]) -> None:
        from bert_ds.runtime.device import autocast, device, to_device
        from bert_ds.model.loss import pretraining_loss

        for batch in micro_batches:
            batch = to_device(batch, device())
            mask = batch["loss_mask"]
            with autocast(self.precision):
                out = self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], mask)
                losses = pretraining_loss(out.mlm_logits, batch["labels"][mask], out.nsp_logits, batch["next_sentence_label"],
                                          tp_group=self.layout.tp_group)
            (losses.loss / len(micro_batches)).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class HuggingFace:
    name = "hf"

    def __init__(self, model_config, precision: str):
        import transformers

        from bert_ds.runtime.device import device
        from hf_reference import hf_adamw, hf_bert_config

        model = transformers.BertForPreTraining(hf_bert_config(model_config))
        self.model, self.precision = model.to(device()).train(), precision
        self.optimizer = hf_adamw(self.model, lr=1e-4, eps=1e-6)

    def step(self, micro_batches: list[dict]) -> None:
        from bert_ds.runtime.device import autocast, device, to_device

        for batch in micro_batches:
            batch = to_device(batch, device())
            labels = batch["labels"].masked_fill(~batch["loss_mask"], -100)
            with autocast(self.precision):
                out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                 token_type_ids=batch["token_type_ids"], labels=labels,
                                 next_sentence_label=batch["next_sentence_label"])
            (out.loss / len(micro_batches)).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def time_steps(system, batches: list[list[dict]], steps: int, offset: int) -> float:
    """Seconds per `system.step` over `steps` calls from `offset`, the device synchronised around
    them; `batches` holds what each call takes (here a step's micro batches; one micro batch of
    features in finetune_throughput.py)."""
    from bert_ds.runtime.device import synchronize

    synchronize()
    began = time.perf_counter()
    for i in range(steps):
        system.step(batches[(offset + i) % len(batches)])
    synchronize()
    return (time.perf_counter() - began) / steps


def measure(preset: str, precision: str, args, tokenizer) -> dict:
    from bert_ds.training.loop.metrics import bert_flops_per_sequence

    from op_profile import op_table

    ours = BertDs(preset, args.seq_length, args.batch, args.vocab_size, precision, args.zero_stage, args.accumulation)
    systems = [ours, HuggingFace(ours.model_config, precision)]
    if precision == "fp32":
        systems.insert(1, Bare(ours, precision))
    micro, loader_seconds = fixed_batches(tokenizer, args.seq_length, args.batch, 8 * args.accumulation)
    batches = [micro[i:i + args.accumulation] for i in range(0, len(micro), args.accumulation)]
    tokens = statistics.mean(float(b["attention_mask"].sum()) for b in micro) * args.accumulation
    predicted = statistics.mean(float(b["loss_mask"].sum()) for b in micro) / args.batch
    warm = [time_steps(system, batches, args.warmup, 0) for system in systems]
    # At least ~1 s per timed block, so that millisecond steps (tiny) are not timed in noise.
    steps = max(args.steps, math.ceil(1.0 / min(warm)))
    seconds, matmul_rates = {s.name: [] for s in systems}, []
    for repeat in range(args.repeats):
        for system in systems:
            seconds[system.name].append(time_steps(system, batches, steps, repeat * steps))
        # The baseline is timed in every repeat too, so it sees the machine as the steps did.
        matmul_rates.append(matmul_flops_per_s(precision))
    step = {name: statistics.median(values) for name, values in seconds.items()}
    matmul = statistics.median(matmul_rates)
    config = ours.model_config
    flops = (bert_flops_per_sequence(config.num_layers, config.hidden_size, config.vocab_size, args.seq_length, predicted)
             * args.batch * args.accumulation)
    # Where bert_ds's step goes, profiled after the timing (torch.profiler slows the ops it records).
    profile = op_table(lambda i: ours.step(batches[i % len(batches)]), 2)
    figures = dict(
        preset=preset, seq_length=args.seq_length, batch=args.batch, accumulation=args.accumulation,
        threads=torch.get_num_threads(), non_matrix_share=1 - profile["matrix_share"],
        non_matrix_seconds=profile["non_matrix_seconds"],
        precision=precision, device=str(ours.layout.device), timed_steps_per_repeat=steps,
        bert_ds_tokens_per_s=tokens / step["bert_ds"], hf_tokens_per_s=tokens / step["hf"],
        bare_tokens_per_s=tokens / step["bare"] if "bare" in step else None, ratio=step["hf"] / step["bert_ds"],
        mfu=flops / step["bert_ds"] / matmul, hf_mfu=flops / step["hf"] / matmul,
        engine_overhead=step["bert_ds"] / step["bare"] - 1 if "bare" in step else None, step_seconds=step,
        matmul_flops_per_s=matmul,
        # Without DataLoader workers the loader runs on the training process: its share of a step.
        data_share=loader_seconds * args.accumulation / (loader_seconds * args.accumulation + step["bert_ds"]),
    )
    from bert_ds.runtime.distributed import teardown_parallel

    teardown_parallel()
    return figures


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["base", "tiny"])
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="micro batch")
    parser.add_argument("--accumulation", type=int, default=1, help="micro batches per optimizer step")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per repeat (at least ~1 s of them)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--zero-stage", type=int, default=None, help="override the engine's ZeRO stage (default: zero1)")
    parser.add_argument("--vocab-size", type=int, default=30522, help="model vocabulary (BERT's uncased WordPiece)")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16", "fp16"], default=["fp32"],
                        help="each measured in this run (fp16: GPUs only)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from bert_ds.runtime.device import device
    from bert_ds.runtime.host_memory import tune_malloc_for_training

    # bert_ds does this once its engine is built (at ZeRO-0, the default for one fp32 replica);
    # here it comes first, so the matrix-multiply baseline and Hugging Face get the same malloc.
    tune_malloc_for_training(device().type, args.zero_stage or 0)

    from bert_ds.training.plan.tokenizer import resolve_tokenizer
    from bert_ds.training.config.args import parse_args

    tokenizer = resolve_tokenizer(parse_args([]))
    results = [measure(preset, precision, args, tokenizer) for preset in args.presets for precision in args.precisions]
    fp32 = {r["preset"]: r for r in results if r["precision"] == "fp32"}
    for r in results:
        base = fp32.get(r["preset"])
        if r["precision"] != "fp32":
            r["speedup_vs_fp32"] = r["bert_ds_tokens_per_s"] / base["bert_ds_tokens_per_s"] if base else None
    for precision in args.precisions:
        rates = ", ".join(f"{r['matmul_flops_per_s'] / 1e9:.1f}" for r in results if r["precision"] == precision)
        print(f"{precision} matrix multiply (median per preset): {rates} GFLOP/s ({results[0]['device']}, "
              f"{torch.get_num_threads()} threads)")
    print("| preset | precision | seq x micro x accumulation | bert_ds tokens/s | HF tokens/s | bert_ds / HF | MFU bert_ds "
          "| MFU HF | bert_ds vs its fp32 | non-matrix share | engine overhead | data share (0 workers) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        speedup = f"{r['speedup_vs_fp32']:.2f}x" if r.get("speedup_vs_fp32") else "-"
        overhead = f"{r['engine_overhead']:+.1%}" if r["engine_overhead"] is not None else "-"
        print(f"| {r['preset']} | {r['precision']} | {r['seq_length']} x {r['batch']} x {r['accumulation']} | "
              f"{r['bert_ds_tokens_per_s']:,.0f} | {r['hf_tokens_per_s']:,.0f} | {r['ratio']:.2f} | {r['mfu']:.1%} | "
              f"{r['hf_mfu']:.1%} | {speedup} | {r['non_matrix_share']:.0%} | {overhead} | {r['data_share']:.1%} |")
    if args.json:
        keyed = {r["preset"] + ("" if r["precision"] == "fp32" else f"_{r['precision']}")
                 + ("" if args.accumulation == 1 else f"_x{args.accumulation}"): r for r in results}
        Path(args.json).write_text(json.dumps(keyed, indent=1))
    return results


if __name__ == "__main__":
    main()
