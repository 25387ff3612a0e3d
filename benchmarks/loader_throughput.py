"""Loader throughput: raw text -> masked NSP batches of 128 tokens, on one core.

Measures, in one run on the built-in sample corpus:
  - end to end: PretrainingLoader (num_workers=0) tokens/s, counting real (non-padding) tokens;
  - each stage alone over the same documents (read+clean, sentence split, tokenize, pair, mask+pad),
    giving each stage's share of the time;
  - the baseline: the tokenizer alone (sentencepiece encode of the same sentences), so the ratio
    loader / tokenizer says what the Python around the tokenizer costs.

Usage: python benchmarks/loader_throughput.py [--json PATH] [--batches N] [--vocab-size N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time

import numpy as np


def pin_to_one_core() -> None:
    """This process (and torch) on the first CPU of its affinity set, one thread (also for
    benchmarks/sentence_splitters.py)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import torch

    torch.set_num_threads(1)


def loader_tokens_per_s(tokenizer, config, batches: int, max_seconds: float = float("inf")) -> tuple[float, int, bool]:
    """Real tokens/s of PretrainingLoader on the sample corpus over `batches` batches from a cold
    start (opening the files counts), the tokens counted, and whether it stopped early at `max_seconds`."""
    from bert_ds.data.loader import PretrainingLoader
    from bert_ds.data.sources import sample_sources

    loader = iter(PretrainingLoader(sample_sources(), tokenizer, config))
    tokens, start, capped = 0, time.perf_counter(), False
    for batch in itertools.islice(loader, batches):
        tokens += int(batch["attention_mask"].sum())
        if time.perf_counter() - start > max_seconds:
            capped = True
            break
    return tokens / (time.perf_counter() - start), tokens, capped


def _timed(function):
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--batches", type=int, default=1000, help="batches of 32 for the end-to-end run")
    parser.add_argument("--vocab-size", type=int, default=16000)
    args = parser.parse_args(argv)
    pin_to_one_core()

    from bert_ds.config import DataConfig
    from bert_ds.data.masking import SpecialIds, collate
    from bert_ds.data.pairs import build_examples
    from bert_ds.data.sources import document_stream, iter_document_texts, record_text, sample_sources
    from bert_ds.data.text.cleaning import TextStats, clean_document, split_sentences
    from bert_ds.data.tokenizer.load import train_sentencepiece

    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = train_sentencepiece(iter_document_texts(None), scratch, vocab_size=args.vocab_size)
    config = DataConfig(seq_length=128, micro_batch_size=32, objective="mlm_nsp")

    # End to end, over several passes of the corpus so that block building is measured, not just
    # handing out an already built block.
    loader_tps, tokens, _ = loader_tokens_per_s(tokenizer, config, args.batches)

    # Stages alone, over one pass of the sample corpus.
    stats = TextStats()

    def read_and_clean():
        texts = []
        for source in sample_sources():
            for position, record in enumerate(document_stream(source, seed=0, epoch=0)):
                texts.append(clean_document(record_text(record, source, position), stats))
        return [t for t in texts if t]

    texts, t_read = _timed(read_and_clean)
    sentences, t_split = _timed(lambda: [split_sentences(t, stats) for t in texts])
    documents, t_tokenize = _timed(lambda: [[s for s in tokenizer.encode_batch(d) if s] for d in sentences])
    rng = np.random.default_rng(0)
    blocks = [documents[i : i + config.block_documents] for i in range(0, len(documents), config.block_documents)]
    examples, t_pair = _timed(
        lambda: [e for b in blocks for e in build_examples(b, "mlm_nsp", 128, 0.1, rng)]
    )
    for number, example in enumerate(examples):
        example.uid = number
    ids = SpecialIds.from_tokenizer(tokenizer)
    batches, t_mask = _timed(
        lambda: [collate(examples[i : i + 32], ids, 128, "mlm_nsp", 0, True) for i in range(0, len(examples), 32)]
    )
    stage_tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    stage_seconds = {"read_clean": t_read, "split": t_split, "tokenize": t_tokenize, "pair": t_pair, "mask_pad": t_mask}
    total = sum(stage_seconds.values())
    corpus_tokens = sum(len(s) for d in documents for s in d)
    tokenizer_tps = corpus_tokens / t_tokenize

    figures = {
        "tokens_per_s": round(loader_tps),
        "tokenizer_only_tokens_per_s": round(tokenizer_tps),
        "ratio_to_tokenizer": round(loader_tps / tokenizer_tps, 3),
        "stages_tokens_per_s": round(stage_tokens / total),
        "stage_share": {name: round(seconds / total, 3) for name, seconds in stage_seconds.items()},
        "batches": args.batches,
        "seq_length": 128,
        "micro_batch_size": 32,
        "vocab_size": tokenizer.vocab_size,
    }
    print(f"loader end to end (1 core): {loader_tps:,.0f} tokens/s over {tokens:,} tokens")
    print(f"tokenizer alone (baseline): {tokenizer_tps:,.0f} tokens/s  -> loader/tokenizer = {loader_tps / tokenizer_tps:.3f}")
    print(f"stages run one after another: {stage_tokens / total:,.0f} tokens/s; share of time:")
    for name, seconds in stage_seconds.items():
        print(f"  {name:<11} {seconds / total:6.1%}  ({seconds:.2f} s)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)
    return figures


if __name__ == "__main__":
    sys.exit(main() and 0)
