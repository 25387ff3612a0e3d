"""Where a pre-trained model's attention looks: per layer and head, the mean distance between a
token and the tokens it attends to, and the attention entropy, on held-out batches.

A BERT still in its frequent-token phase attends almost uniformly (a mean distance near the
uniform (s^2 - 1) / 3s, 42.7 at 128 tokens, and an entropy near log s) or onto a few special
tokens: it predicts a masked word from the bag of words around it, not from its neighbours. A
model that has left that phase has heads that look at the next or previous token (mean distance
of a few positions). So this probe names why a curve is flat, and when it bends.

Usage: python benchmarks/attention_probe.py CHECKPOINT [CHECKPOINT ...] [--held-out SPEC ...]
       [--batches 2] [--batch 8] [--json PATH]
CHECKPOINT: a pre-training --save folder or one of its stepNNNNNNNN folders (its preset,
layer-norm position and tokenizer are read from it, as `python -m bert_ds.demo --init` does).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def probe(checkpoint: str, held_out: list[str], batches: int, batch: int) -> dict:
    from bert_ds import demo
    from bert_ds.config import DataConfig
    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import parse_sources
    from bert_ds.model import attention
    from bert_ds.runtime.device import to_device

    captured: list[torch.Tensor] = []
    forward = attention.SDPACoreAttention.forward

    def recording(self, query, key, value, attention_mask, /, **kwargs):
        # [s, b, heads, d] -> probabilities [b, heads, s, s], as the layer computes them (no padding in these batches)
        q, k = (t.permute(1, 2, 0, 3).float() for t in (query, key))
        captured.append(torch.softmax(q @ k.transpose(-2, -1) * self.softmax_scale, dim=-1).cpu())
        return forward(self, query, key, value, attention_mask, **kwargs)

    attention.SDPACoreAttention.forward = recording
    try:
        result = demo._load(argparse.Namespace(init=checkpoint, held_out=held_out, precision="auto", seed=1))
        loader = PretrainingLoader(parse_sources(held_out), result.tokenizer,
                                   DataConfig(seq_length=128, micro_batch_size=batch, seed=3, short_seq_prob=0.0))
        model, device = result.trainer.model.eval(), result.trainer.layout.device
        captured.clear()
        with torch.no_grad():
            for item in itertools.islice(loader, batches):
                item = to_device(item, device)
                model(item["input_ids"], item["token_type_ids"], item["attention_mask"], item["loss_mask"])
        layers = len(captured) // batches
        state = result.trainer.state
    finally:
        attention.SDPACoreAttention.forward = forward
    rows = []
    for layer in range(layers):
        probs = torch.cat(captured[layer::layers])  # [n, heads, s, s]
        s = probs.shape[-1]
        offsets = (torch.arange(s)[None, :] - torch.arange(s)[:, None]).abs().float()
        distance = (probs * offsets).sum(-1).mean((0, 2))
        entropy = -(probs.clamp_min(1e-12).log() * probs).sum(-1).mean((0, 2))
        rows.append(dict(layer=layer, mean_distance=distance.tolist(), entropy=entropy.tolist()))
    uniform = (s * s - 1) / (3 * s)
    return dict(checkpoint=checkpoint, step=state.step, tokens=state.consumed_tokens, sequence=s,
                uniform_distance=uniform, uniform_entropy=math.log(s), layers=rows,
                nearest_head_distance=min(d for row in rows for d in row["mean_distance"]))


def main(argv=None) -> list[dict]:
    from bert_ds.demo import HELD_OUT

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--held-out", nargs="+", default=[HELD_OUT])
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = [probe(checkpoint, args.held_out, args.batches, args.batch) for checkpoint in args.checkpoints]
    for r in results:
        print(f"{r['checkpoint']} (step {r['step']:,}, {r['tokens'] / 1e6:.1f}M tokens): uniform attention would be "
              f"{r['uniform_distance']:.1f} positions away, entropy {r['uniform_entropy']:.2f}")
        for row in r["layers"]:
            print(f"  layer {row['layer']}: mean distance per head "
                  + " ".join(f"{d:5.1f}" for d in row["mean_distance"])
                  + " | entropy " + " ".join(f"{e:.2f}" for e in row["entropy"]))
        print(f"  nearest-looking head: {r['nearest_head_distance']:.1f} positions")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
