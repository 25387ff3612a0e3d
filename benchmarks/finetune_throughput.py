"""Fine-tuning throughput: bert_ds's GLUE step against a plain Hugging Face loop, in one process.

Both train the same sequence classifier (a BERT preset, fresh weights, two labels) with the same
recipe (AdamW, lr 2e-5, weight decay 0.01 off biases and LayerNorm, linear warm-up over 10% then
decay, clipping 1.0, dropout 0.1) on the same micro batches in the same order:
  - bert_ds: the engine `finetune/glue.py` builds (DeepSpeed with the default config and
             `--precision P`: at one replica, fp32 at ZeRO stage 0 and bf16 with bert_ds's own fp32
             masters) stepped by finetune/core.py `train_micro_batch`, the function glue.py runs;
             unpadded as glue.py's default (model/unpadding.py);
  - bert_ds_padded: the same with glue.py's --no-unpad (the encoder computes on the padding too);
  - hf:      transformers.BertForSequenceClassification (SDPA attention) with torch AdamW
             (foreach on CPUs, fused on GPUs) and get_linear_schedule_with_warmup, the loop of
             Hugging Face's text-classification example; bf16 under `torch.autocast`.
Batches are GLUE SST-2 shaped: single sentences, padded per batch to the longest one (collate,
as glue.py pads). `--data-dir` reads a GLUE SST-2 folder (train.tsv); without it the sentences
come from the built-in sample corpus, cut to word counts drawn with SST-2 train's mean and median
(9.5 and 7 words). The two take turns (each repeat times a block of steps of each, after
warm-up), the median over repeats is reported, as in train_throughput.py.

Usage: python benchmarks/finetune_throughput.py [--preset base] [--precisions fp32 bf16]
       [--batch 32] [--max-seq-length 128] [--steps 8] [--warmup 2] [--repeats 5] [--data-dir DIR]
       [--threads N] [--json PATH] [--padded-too]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # hf_reference and train_throughput, beside this file

LR, WEIGHT_DECAY, WARMUP_SHARE, TOTAL_STEPS = 2e-5, 0.01, 0.1, 1000


def sample_sst2(folder: Path, rows: int = 4000, seed: int = 0) -> Path:
    """train.tsv and dev.tsv of SST-2's form from the built-in sample's books: word counts drawn
    from an exponential with SST-2 train's mean (9.5 words; its median, 7, comes with it)."""
    from bert_ds.data.sources import SAMPLE_DIR

    words = []
    for path in sorted((SAMPLE_DIR / "books").glob("*.txt")):
        words += path.read_text(encoding="utf-8", errors="replace").split()  # Gutenberg files: latin-1 here and there
    draw = random.Random(seed)
    lines = ["sentence\tlabel"]
    for _ in range(rows):
        length = min(52, max(1, round(draw.expovariate(1 / 9.5))))
        start = draw.randrange(len(words) - length)
        lines.append(" ".join(words[start:start + length]).replace('"', "") + f"\t{draw.randrange(2)}")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def micro_batches(data_dir: Path, batch: int, max_length: int, count: int, seed: int = 0) -> list[list[dict]]:
    """`count` micro batches of SST-2 features (glue.py's reader and tokenizer), in a seeded order."""
    from bert_ds.data.tokenizer.load import load_tokenizer
    from bert_ds.finetune.glue import build_task

    task = build_task("sst2", str(data_dir), load_tokenizer("bert-base-uncased"), max_length, say=lambda *_: None)
    order = list(range(len(task.train)))
    random.Random(seed).shuffle(order)
    return [[task.train[i] for i in order[k * batch:(k + 1) * batch]] for k in range(count)]


class BertDs:
    name = "bert_ds"

    def __init__(self, model_config, layout, batch: int, precision: str, unpad: bool = True):
        from bert_ds.model import build_model
        from bert_ds.training.config.batch_plan import BatchPlan
        from bert_ds.training.engine.build import build_engine
        from bert_ds.training.engine.ds_config import build_deepspeed_config
        from bert_ds.training.engine.optim import OptimizerSettings

        self.layout = layout
        self.name = "bert_ds" if unpad else "bert_ds_padded"
        setup = build_deepspeed_config("zero1", BatchPlan(batch, batch, 1), layout.device.type, precision=precision)
        model = build_model(model_config, layout, "classification", num_labels=2, seed=1, unpad=unpad)
        settings = OptimizerSettings(lr=LR, weight_decay=WEIGHT_DECAY, warmup_steps=int(WARMUP_SHARE * TOTAL_STEPS),
                                     total_steps=TOTAL_STEPS)
        self.engine = build_engine(model, layout, setup, settings)
        self.zero_stage, self.own_masters = setup.zero_stage, setup.keeps_own_masters

    def step(self, features: list[dict]) -> None:
        from bert_ds.finetune.core import train_micro_batch

        train_micro_batch(self.engine, features, "classification", False, 0, self.layout.device)


class HuggingFace:
    name = "hf"

    def __init__(self, model_config, precision: str):
        import transformers

        from bert_ds.runtime.device import device
        from hf_reference import hf_adamw, hf_bert_config

        model = transformers.BertForSequenceClassification(hf_bert_config(model_config, num_labels=2))
        self.model, self.precision = model.to(device()).train(), precision
        self.optimizer = hf_adamw(self.model, lr=LR, weight_decay=WEIGHT_DECAY, eps=1e-6)
        self.scheduler = transformers.get_linear_schedule_with_warmup(self.optimizer, int(WARMUP_SHARE * TOTAL_STEPS), TOTAL_STEPS)

    def step(self, features: list[dict]) -> None:
        from bert_ds.finetune.batches import collate
        from bert_ds.runtime.device import autocast, device

        batch = {k: v.to(device()) for k, v in collate(features, "classification", 0).items()}
        with autocast(self.precision):
            loss = self.model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)


def measure(preset: str, precision: str, args, batches: list) -> dict:
    from bert_ds.config import model_preset, padded_vocab_size
    from bert_ds.runtime.distributed import init_parallel, teardown_parallel
    from train_throughput import time_steps

    model_config = model_preset(preset, vocab_size=padded_vocab_size(30522))
    layout = init_parallel(model_config, 1, 1, seed=1)
    systems = [BertDs(model_config, layout, args.batch, precision), HuggingFace(model_config, precision)]
    if args.padded_too:
        systems.insert(1, BertDs(model_config, layout, args.batch, precision, unpad=False))
    for system in systems:
        time_steps(system, batches, args.warmup, 0)
    seconds = {s.name: [] for s in systems}
    for repeat in range(args.repeats):
        for system in systems:
            seconds[system.name].append(time_steps(system, batches, args.steps, args.warmup + repeat * args.steps))
    step = {name: statistics.median(values) for name, values in seconds.items()}
    tokens = statistics.mean(max(len(f["input_ids"]) for f in b) * len(b) for b in batches)
    real = statistics.mean(sum(len(f["input_ids"]) for f in b) for b in batches)
    figures = dict(preset=preset, precision=precision, batch=args.batch, threads=torch.get_num_threads(),
                   device=str(layout.device), zero_stage=systems[0].zero_stage, own_masters=systems[0].own_masters,
                   padded_tokens_per_batch=tokens, real_tokens_per_batch=real, bert_ds_steps_per_s=1 / step["bert_ds"], hf_steps_per_s=1 / step["hf"],
                   ratio=step["hf"] / step["bert_ds"], step_seconds=step)
    if "bert_ds_padded" in step:
        figures.update(padded_steps_per_s=1 / step["bert_ds_padded"], padded_ratio=step["hf"] / step["bert_ds_padded"])
    teardown_parallel()
    return figures


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["base"])
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, help="a GLUE SST-2 folder (default: sentences from the built-in sample)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--padded-too", action="store_true", help="also time bert_ds with --no-unpad")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from bert_ds.runtime.device import device
    from bert_ds.runtime.host_memory import tune_malloc_for_training

    tune_malloc_for_training(device().type, 0)  # as bert_ds does at one replica; Hugging Face gets it too
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = args.data_dir or sample_sst2(Path(scratch) / "SST-2")
        count = args.warmup + args.repeats * args.steps
        batches = micro_batches(data_dir, args.batch, args.max_seq_length, count)
    results = [measure(preset, precision, args, batches) for preset in args.presets for precision in args.precisions]
    print(f"SST-2-shaped batches of {args.batch} from {args.data_dir or 'the built-in sample'}: "
          f"{results[0]['padded_tokens_per_batch'] / args.batch:.1f} padded tokens per sentence, "
          f"{results[0]['real_tokens_per_batch'] / args.batch:.1f} real; "
          f"{results[0]['device']}, {torch.get_num_threads()} threads")
    print("| preset | precision | bert_ds steps/s | HF steps/s | bert_ds / HF | --no-unpad / HF | bert_ds's masters |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        masters = "bert_ds (stage 0)" if r["own_masters"] else ("none (fp32)" if r["precision"] == "fp32" else f"DeepSpeed ZeRO-{r['zero_stage']}")
        print(f"| {r['preset']} | {r['precision']} | {r['bert_ds_steps_per_s']:.2f} | {r['hf_steps_per_s']:.2f} | "
              f"{r['ratio']:.2f} | {r.get('padded_ratio', float('nan')):.2f} | {masters} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
