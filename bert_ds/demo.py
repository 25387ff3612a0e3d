"""`make demo`: pre-train a small BERT on the built-in sample corpus (on the CPU, or a GPU where there is one), then show what it learned.

It trains on the sample's books and one half of its Wikipedia articles through the real engine
(DeepSpeed ZeRO-1, the streaming loader, checkpointing), evaluating on the other half (held-out
articles the model never saw) as it goes; then it masks words in those articles and prints its
top guesses beside the true words, the masked-token accuracy on held-out text, and draws the
training and held-out curves into OUTPUT/curves.png.

`python -m bert_ds.demo --init DIR` trains nothing: it loads a pre-training checkpoint (a --save
folder or one of its stepNNNNNNNN folders, any preset, with the tokenizer the run kept in the save
folder) and shows its guesses on the same held-out sentences, so a longer run can be set beside
the 300-step demo (`--held-out SPEC` scores other text).
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch

from bert_ds.runtime.device import to_device

from bert_ds.data.sources import SAMPLE_HELD_OUT_SPEC as HELD_OUT
from bert_ds.data.sources import SAMPLE_TRAIN_SPECS as TRAIN_DATA


def _train(args):
    from bert_ds.training.job import run_pretraining
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.plan.tokenizer import resolve_tokenizer, sample_tokenizer_dir

    # The sample tokenizer (trained once, then cached); it only segments text, it learned no weights.
    resolve_tokenizer(parse_args(["--data", "sample"]))
    tokenizer_path = str(sample_tokenizer_dir() / "tokenizer.model")
    run = parse_args([
        "--preset", args.preset, "--data", *TRAIN_DATA, "--tokenizer", tokenizer_path,
        "--train-steps", str(args.steps), "--global-batch-size", "32", "--micro-batch-size", "32",
        "--lr", "3e-4", "--warmup-steps", str(max(1, args.steps // 10)), "--log-interval", str(args.log_interval),
        "--save", args.output, "--metrics-file", _metrics_file(args), "--seed", str(args.seed),
        "--precision", args.precision, "--eval-data", HELD_OUT, "--eval-interval", str(max(1, args.steps // 6)),
        "--eval-samples", "256",
    ])
    return run_pretraining(run)


def _load(args):
    """The checkpoint `args.init`, loaded for evaluation with the settings it was trained with."""
    import json

    from bert_ds.checkpoint.convert import resolve_tag_dir
    from bert_ds.checkpoint.zero import COMPLETE, TOKENIZER_DIR
    from bert_ds.errors import CheckpointError
    from bert_ds.training.config.args import parse_args
    from bert_ds.training.job import run_pretraining

    tag_dir = resolve_tag_dir(args.init)
    marker = json.loads((tag_dir / COMPLETE).read_text())
    model = marker["model_config"]
    tokenizer = tag_dir.parent / TOKENIZER_DIR
    if not tokenizer.is_dir():
        raise CheckpointError(f"{tag_dir.parent} holds no {TOKENIZER_DIR}/ folder (the run's tokenizer, kept in its "
                              "--save folder); --init takes a pre-training --save folder or one of its step folders.")
    run = parse_args([
        "--preset", marker["run"]["preset"], "--layer-norm-position", model["layer_norm_position"],
        "--objective", "ltr" if model["causal"] else "mlm_nsp", "--tokenizer", str(tokenizer),
        "--load", str(tag_dir), "--eval-only", "--eval-data", *args.held_out, "--eval-samples", "256",
        "--precision", args.precision, "--seed", str(args.seed),
    ])
    return run_pretraining(run)


def _metrics_file(args) -> str:
    return f"{args.output}/metrics.jsonl"


@torch.no_grad()
def held_out_accuracy(result, batches: int = 20, held_out: tuple[str, ...] = (HELD_OUT,)) -> tuple[float, float]:
    """Masked-token accuracy on held-out articles (static masks, the loss's own definition), and
    the accuracy of always guessing the most frequent masked token there (the unigram baseline)."""
    from bert_ds.config import DataConfig
    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import parse_sources
    from bert_ds.model.loss import vocab_parallel_accuracy

    model = result.trainer.model.eval()
    loader = PretrainingLoader(
        parse_sources(list(held_out)), result.tokenizer,
        DataConfig(seq_length=128, micro_batch_size=16, dynamic_masking=False, seed=7),
    )
    correct = total = 0.0
    targets = []
    device = result.trainer.layout.device
    for batch in itertools.islice(loader, batches):
        batch = to_device(batch, device)
        loss_mask = batch["loss_mask"]
        targets.append(batch["labels"][loss_mask])
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], loss_mask)
        count = int(loss_mask.sum())
        correct += float(vocab_parallel_accuracy(out.mlm_logits, batch["labels"][loss_mask], result.trainer.layout.tp_group)) * count
        total += count
    unigram = torch.cat(targets).bincount().max().item() / max(total, 1.0)
    return correct / max(total, 1.0), unigram


def baseline_share(accuracy: float, unigram: float) -> str:
    """How much of the held-out accuracy the most-frequent-token guess accounts for, in words."""
    if accuracy <= unigram:
        return (f"The most-frequent-token guess explains all of it: the model is {100 * (unigram - accuracy):.1f} points "
                "below that baseline, still in its first phase.")
    return (f"The most-frequent-token guess explains {unigram / accuracy:.0%} of that accuracy; the model's own "
            f"learning adds {100 * (accuracy - unigram):.1f} points.")


def _piece(tokenizer, token_id: int) -> str:
    # sentencepiece marks a word start with "▁"; quoting shows where the piece begins and ends.
    return repr(tokenizer.ids_to_tokens([token_id])[0].replace("\u2581", " ").strip() or " ")


@torch.no_grad()
def show_predictions(result, sentences: int = 6, top_k: int = 3, held_out: tuple[str, ...] = (HELD_OUT,)) -> None:
    """Mask about one word in six of held-out sentences and print the model's top guesses."""
    from bert_ds.data.sources import iter_document_texts
    from bert_ds.data.text.cleaning import TextStats, split_sentences

    tokenizer, model = result.tokenizer, result.trainer.model.eval()
    texts = itertools.islice(iter_document_texts(list(held_out)), 3)
    candidates = [s for text in texts for s in split_sentences(text, TextStats()) if 60 < len(s) < 160]
    generator = torch.Generator().manual_seed(0)
    device = result.trainer.layout.device
    for sentence in candidates[:: max(1, len(candidates) // sentences)][:sentences]:
        ids = torch.tensor([[tokenizer.cls_id, *tokenizer.encode_batch([sentence])[0], tokenizer.sep_id]])
        real = ~torch.from_numpy(tokenizer.is_special)[ids]
        chosen = real & (torch.rand(ids.shape, generator=generator) < 0.15)
        if not chosen.any():
            chosen[0, int(torch.nonzero(real[0])[0])] = True
        masked = ids.masked_fill(chosen, tokenizer.mask_id)
        on = to_device(dict(ids=masked, types=torch.zeros_like(ids), attention=torch.ones_like(ids), chosen=chosen), device)
        out = model(on["ids"], on["types"], on["attention"], on["chosen"])
        guesses = out.mlm_logits[:, : tokenizer.vocab_size].topk(top_k, dim=-1).indices.cpu()
        print("\n  " + tokenizer.decode(masked[0, 1:-1].tolist()))
        for truth, options in zip(ids[chosen].tolist(), guesses.tolist()):
            words = ", ".join(_piece(tokenizer, o) for o in options)
            print(f"    [MASK] = {_piece(tokenizer, truth):<14} model's top {top_k}: {words}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mini", help="model size (default mini)")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps of 32 x 128 tokens")
    parser.add_argument("--output", default="runs/demo", help="checkpoints and metrics go here")
    parser.add_argument("--log-interval", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                        help="auto: bf16 where this CPU multiplies bf16 matrices fast (AMX, AVX512-BF16), else fp32")
    parser.add_argument("--init", metavar="DIR", help="train nothing: show the guesses of this pre-training checkpoint "
                                                      "(a --save folder or one of its stepNNNNNNNN folders)")
    parser.add_argument("--held-out", nargs="+", default=[HELD_OUT], metavar="SPEC",
                        help="held-out text to mask and score (--data syntax; default: the sample's held-out articles)")
    args = parser.parse_args(argv)
    if args.init:
        return _show_checkpoint(args)

    from bert_ds.runtime.precision import choose_precision

    from bert_ds.runtime.device import describe_device, device

    precision = choose_precision(args.precision, device().type)
    print(f"bert_ds demo: pre-training the {args.preset} preset for {args.steps} steps on the built-in sample "
          f"(books + half the Wikipedia articles), on {describe_device()} in {precision.describe()}.\n")
    from pathlib import Path

    Path(_metrics_file(args)).unlink(missing_ok=True)  # each demo is a fresh run: its own curves only
    result = _train(args)
    _report(result, args.held_out, f"Held-out Wikipedia articles, words masked at random; the model's guesses ({args.preset}, "
                                   f"{result.trainer.state.step} steps, {result.trainer.state.consumed_tokens:,} tokens seen):")
    from bert_ds.plot import main as plot

    plot([_metrics_file(args), "--labels", f"demo ({args.preset})", "-o", f"{args.output}/curves.png"])
    print("A small BERT needs tens of millions of tokens to leave the guess-the-frequent-token phase, more "
          "than this sample holds: docs/pretraining.md, 'The desk recipe', trains one on a real corpus in about "
          f"two hours of 2 CPU cores. Checkpoint, metrics and curves: {args.output}/")
    from bert_ds.runtime.distributed import teardown_parallel

    teardown_parallel()
    return 0


def _show_checkpoint(args) -> int:
    from bert_ds.errors import USER_ERRORS, report
    from bert_ds.runtime.distributed import teardown_parallel

    try:
        result = _load(args)
    except USER_ERRORS as error:
        return report(error)
    state, run = result.trainer.state, result.trainer.run
    _report(result, args.held_out, f"Held-out text, words masked at random; the guesses of {args.init} "
                                   f"({run.model.preset}, {state.step:,} steps, {state.consumed_tokens:,} tokens seen):")
    teardown_parallel()
    return 0


def _report(result, held_out: list[str], heading: str) -> None:
    """The model's guesses on held-out sentences, its held-out accuracy and the baseline's share."""
    print("\n" + heading)
    show_predictions(result, held_out=tuple(held_out))
    accuracy, unigram = held_out_accuracy(result, held_out=tuple(held_out))
    print(f"\nMasked-token accuracy on held-out text: {accuracy:.1%} (always guessing the most frequent "
          f"token: {unigram:.1%}; chance: {1 / result.tokenizer.vocab_size:.2%}).")
    print(baseline_share(accuracy, unigram))


if __name__ == "__main__":
    sys.exit(main())
