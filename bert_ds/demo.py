"""`make demo` for now: a forward/backward smoke of the tiny model on CPU.

The real demo (pre-training on the built-in sample corpus) replaces this once the pre-training
engine lands. Until then this shows the model, loss and optimiser working end to end: the tiny
preset memorises one fixed masked batch of random tokens, so its MLM and NSP losses must fall.
"""

from __future__ import annotations

import argparse
import time

import torch

from bert_ds.config import model_preset
from bert_ds.distributed import init_parallel, teardown_parallel
from bert_ds.model import build_pretraining_model
from bert_ds.model.loss import pretraining_loss


def _fixed_batch(vocab_size: int, batch: int, seq: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(5, vocab_size, (batch, seq), generator=gen)
    loss_mask = torch.rand(batch, seq, generator=gen) < 0.15
    loss_mask[:, 1] = True
    # Selected positions show [MASK] (id 4 here): the model has to recall them from context.
    input_ids = labels.masked_fill(loss_mask, 4)
    return dict(
        input_ids=input_ids,
        token_type_ids=(torch.arange(seq) >= seq // 2).long().expand(batch, seq),
        attention_mask=torch.ones(batch, seq, dtype=torch.long),
        loss_mask=loss_mask,
        labels=labels,
        next_sentence_label=torch.randint(0, 2, (batch,), generator=gen),
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)

    print("bert_ds demo: SMOKE TEST of the tiny model (forward/backward/AdamW on one fixed batch).")
    print("Pre-training on the sample corpus replaces this demo when the pre-training engine lands.\n")
    config = model_preset("tiny", vocab_size=512)
    layout = init_parallel(config, seed=args.seed)
    model = build_pretraining_model(config, layout).train()
    params = sum(p.numel() for p in model.parameters())
    print(f"model: tiny preset, {config.num_layers} layers, hidden {config.hidden_size}, "
          f"{config.num_attention_heads} heads, {params / 1e6:.2f} M parameters, device {layout.device}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    batch = {k: v.to(layout.device) for k, v in _fixed_batch(config.vocab_size, 8, 64, args.seed).items()}
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["loss_mask"])
        losses = pretraining_loss(
            out.mlm_logits, batch["labels"][batch["loss_mask"]], out.nsp_logits, batch["next_sentence_label"]
        )
        optimizer.zero_grad()
        losses.loss.backward()
        optimizer.step()
        if step == 1 or step % 10 == 0 or step == args.steps:
            print(f"step {step:4d}  mlm_loss {losses.mlm_loss.item():.3f}  mlm_acc {losses.mlm_accuracy.item():.2f}"
                  f"  nsp_loss {losses.nsp_loss.item():.3f}  nsp_acc {losses.nsp_accuracy.item():.2f}")
            if step == 1:
                first = losses.loss.item()
    elapsed = time.perf_counter() - start
    print(f"\nloss {first:.3f} -> {losses.loss.item():.3f} in {args.steps} steps ({elapsed:.1f} s): "
          "the model, masked-token loss and NSP head train end to end.")
    teardown_parallel()


if __name__ == "__main__":
    main()
