"""bf16 gradient error: how far each side's bf16 gradient lies from its own fp32 gradient, for the
same weights and the same batches.

bert_ds's bf16 runs the whole model in bf16 behind fp32 master weights (Megatron's convention);
Hugging Face's runs `torch.autocast` over fp32 weights. Both update fp32 weights from bf16-computed
gradients, so the error of those gradients is what decides whether a bf16 run can learn as an fp32
one does. For each of `--batches` batches from bert_ds's loader: the pre-training loss gradients of
Hugging Face's BertForPreTraining in fp32 (its reference) and under autocast, and of bert_ds's
model with the same weights (through the Hugging Face mapping) in fp32 (its reference) and in bf16.
Printed per parameter kind and overall: the relative error |g_bf16 - g_fp32| / |g_fp32| and the
cosine; for scale, the difference between consecutive batches' fp32 gradients (the minibatch noise
every step has anyway).

Weights: `--parity-state` takes a learning-parity checkpoint's rank file (OUTPUT/state-*/step*/rank00000.pt
of benchmarks/learning_parity.py: Hugging Face's side as trained); without it, a fresh Hugging Face
initialisation. Dropout is 0 on both sides.

Usage: python benchmarks/bf16_gradient_error.py [--preset mini] [--batch 128] [--seq-length 128]
       [--batches 3] [--data SPEC ...] [--tokenizer T] [--parity-state FILE] [--threads N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

KINDS = ("embeddings", "layernorm", "encoder", "mlm head", "nsp head")


def kind(name: str) -> str:
    """A parameter's kind from its bert_ds or Hugging Face name."""
    lowered = name.lower()
    if "norm" in lowered:
        return "layernorm"
    if "embeddings" in lowered:
        return "embeddings"
    if any(part in lowered for part in ("pooler", "seq_relationship", "nsp")):
        return "nsp head"
    if "lm_head" in lowered or "predictions" in lowered:
        return "mlm head"
    return "encoder"


def hf_gradients(hf, batch: dict, precision: str) -> dict:
    hf.model.zero_grad(set_to_none=True)
    mlm, nsp = hf.losses(batch, precision)
    (mlm + nsp).backward()
    return {name: p.grad.float().clone() for name, p in hf.model.named_parameters() if p.grad is not None}


def bert_ds_gradients(model, batch: dict, layout) -> dict:
    from bert_ds.model.loss import pretraining_loss
    from bert_ds.training.loop.steps import read_on_host

    model.zero_grad(set_to_none=True)
    host, _, unpadded = read_on_host(batch)
    out = model(host["input_ids"], host["token_type_ids"], None if unpadded else host["attention_mask"],
                host["predicted_positions"])
    pretraining_loss(out.mlm_logits, host["predicted_labels"], out.nsp_logits, host["next_sentence_label"],
                     tp_group=layout.tp_group).loss.backward()
    return {name: p.grad.float().clone() for name, p in model.named_parameters() if p.grad is not None}


def error(reference: dict, measured: dict) -> dict:
    """Relative error per kind and overall ("all"), and the overall cosine."""
    sums = {k: [0.0, 0.0] for k in (*KINDS, "all")}
    dot = norm = 0.0
    for name, ref in reference.items():
        diff, size = float((measured[name] - ref).pow(2).sum()), float(ref.pow(2).sum())
        for key in (kind(name), "all"):
            sums[key][0] += diff
            sums[key][1] += size
        dot += float((measured[name] * ref).sum())
        norm += float(measured[name].pow(2).sum())
    result = {k: (d / s) ** 0.5 for k, (d, s) in sums.items() if s > 0}
    result["cosine"] = dot / (sums["all"][1] * norm) ** 0.5
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--data", nargs="+", help="training sources, --data syntax (default: the built-in sample)")
    parser.add_argument("--tokenizer", help="--tokenizer (default: the sample's sentencepiece)")
    parser.add_argument("--parity-state", help="a learning-parity checkpoint's rank file: its Hugging Face weights")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", help="write the errors to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from learning_parity import run_config
    from parity_sides import BertDsSide, HuggingFaceSide

    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import parse_sources
    from bert_ds.runtime.distributed import teardown_parallel
    from bert_ds.training import job
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.resolve import run_model_config
    from bert_ds.training.plan.tokenizer import resolve_tokenizer

    tokenizer = resolve_tokenizer(parse_args(["--tokenizer", args.tokenizer] if args.tokenizer else
                                             (["--data", *args.data] if args.data else [])))
    settings = argparse.Namespace(data=args.data, eval_data=None, seq_length=args.seq_length, batch=args.batch, lr=1e-4,
                                  warmup_fraction=0.1, adam_beta2=0.999, eval_samples=8, eval_interval=1,
                                  tokenizer=args.tokenizer)
    run = run_config(settings, args.preset, "fp32", 0, 100, 0.0)
    model_config = run_model_config(run, tokenizer.vocab_size)
    layout = job.setup_parallel(run, model_config)
    hf = HuggingFaceSide(run, model_config, layout, tokenizer, "fp32", 0)
    if args.parity_state:
        try:
            hf.model.load_state_dict(torch.load(args.parity_state, map_location="cpu", weights_only=False)["hf"]["model"])
        except (OSError, KeyError, RuntimeError) as failure:
            raise SystemExit(f"error: {args.parity_state}: not a learning-parity checkpoint of this preset "
                             f"({str(failure).splitlines()[0]})")
    ours = BertDsSide(run, model_config, layout, hf.initial_state())
    fp32_weights = {name: tensor.clone() for name, tensor in ours.model.state_dict().items() if torch.is_tensor(tensor)}
    batches = iter(PretrainingLoader(parse_sources(run.data.sources), tokenizer, run.with_num_workers(0).data_config()))
    rows, previous = [], None
    for index in range(args.batches):
        batch = next(batches)
        hf_fp32 = hf_gradients(hf, batch, "fp32")
        row = {"batch": index, "hf autocast": error(hf_fp32, hf_gradients(hf, batch, "bf16"))}
        ours_fp32 = bert_ds_gradients(ours.model, batch, layout)
        ours.model.to(torch.bfloat16)
        row["bert_ds bf16"] = error(ours_fp32, bert_ds_gradients(ours.model, batch, layout))
        ours.model.to(torch.float32).load_state_dict(fp32_weights, strict=False)
        if previous is not None:
            row["next batch, fp32"] = error(previous, hf_fp32)
        previous = hf_fp32
        rows.append(row)
        print(f"batch {index}:", flush=True)
        for label in ("hf autocast", "bert_ds bf16", "next batch, fp32"):
            if label in row:
                print(f"  {label:17s} " + " | ".join(f"{k} {v:.4f}" for k, v in row[label].items()), flush=True)
    teardown_parallel()
    result = {"preset": args.preset, "batch": args.batch, "seq_length": args.seq_length,
              "weights": args.parity_state or "fresh", "threads": torch.get_num_threads(), "batches": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
