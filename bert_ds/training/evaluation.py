"""Held-out evaluation during pre-training: one fixed set, scored the same way at any layout.

The set is built once per run from `--eval-data` (the same source syntax as `--data`), before
training starts: the first documents of each source (one shard, first epoch), paired and masked
with `EVAL_SEED` and static masks, so every evaluation of a run scores the same examples, and runs
at other layouts, seeds or batch sizes score the same set (the MLPerf BERT practice of a fixed
eval set; Megatron's --eval-interval is the cadence). The sources are mixed as training mixes
them: blocks of documents drawn by token share, NotNext partners from any document of the block,
each block's examples in a seeded order (held-out NSP accuracy measures the task training poses).

Scoring sums (model/loss.py evaluation_sums) rather than averages: the set is dealt out to
data-parallel ranks (example i to rank i mod DP), every rank runs the same number of
micro-batches of the training micro-batch size (padding rows count nowhere, so ZeRO-3's
collective forwards and pipelines' fixed shapes hold), and the sums add up over ranks to the
same token-weighted MLM and example-weighted NSP means as one process. Dropout is off (eval
mode); the training RNG streams are not drawn from, so evaluating does not change training.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from bert_ds.data.sources import DataError

EVAL_SEED = 20181011
"""Pairs and masks of every evaluation set (the BERT paper's arXiv date): fixed, not --seed."""
DEFAULT_EVAL_SAMPLES = 1_000
"""Examples scored without --eval-samples (fewer, with a note, when the eval data holds fewer)."""


@dataclass
class EvalSet:
    batches: list
    """This rank's micro-batches (dicts of CPU tensors), padded to the same count on every rank."""
    samples: int
    """Examples in the whole set (every rank)."""


@dataclass
class EvalResult:
    mlm_loss: float
    mlm_accuracy: float
    nsp_loss: Optional[float]
    nsp_accuracy: Optional[float]
    samples: int
    seconds: float

    def record(self, state) -> dict:
        """The metrics-file line of this evaluation at `state` (training/loop/trainer.py TrainState): its
        progress keys and the `eval/` keys (TensorBoard's names too)."""
        return {"step": state.step, "consumed_samples": state.consumed_samples,
                "consumed_tokens": state.consumed_tokens, "eval/mlm_loss": self.mlm_loss, "eval/mlm_accuracy": self.mlm_accuracy,
                "eval/nsp_loss": self.nsp_loss, "eval/nsp_accuracy": self.nsp_accuracy,
                "eval/samples": self.samples, "eval/seconds": self.seconds}


def eval_examples(specs: list[str], tokenizer, config, samples: Optional[int]) -> tuple[list, str]:
    """The evaluation examples of `specs` (at most `samples`, default DEFAULT_EVAL_SAMPLES);
    a DataError when a source is empty or (with an explicit `samples`) the sources hold fewer."""
    from bert_ds.data.sources import check_sources, parse_sources

    config = dataclasses.replace(config, dynamic_masking=False, seed=EVAL_SEED, num_workers=0)
    sources = parse_sources(specs)
    check_sources(sources, config.txt_documents)
    wanted = samples or DEFAULT_EVAL_SAMPLES
    try:
        examples, drawn = _mixed_examples(sources, tokenizer, config, wanted)
    except DataError as error:
        raise DataError(f"Evaluation data: {error}") from None
    empty = [source.name for source, count in zip(sources, drawn) if not count]
    if empty:
        raise DataError(f"Evaluation data: source {empty[0]!r} holds no document with text.")
    short = f"the sources yield {len(examples):,} of {wanted:,}" if len(examples) < wanted else ""
    if short and samples:
        raise DataError(
            f"Evaluation data too small for --eval-samples {samples:,} at {config.seq_length} tokens: "
            f"{short}. Lower --eval-samples or add held-out text to --eval-data."
        )
    note = f"evaluation set: {len(examples):,} examples ({short}: all they hold)" if short else ""
    return examples, note


def _mixed_examples(sources, tokenizer, config, wanted: int) -> tuple[list, list[int]]:
    """The first `wanted` examples of the sources' first epoch, mixed as the training stream mixes
    them (data/stream.py's ExampleStream): blocks of `block_documents` documents drawn by token
    share, so a NotNext partner comes from any source of the block (a book's sentence followed by
    a Wikipedia one, as in training and in the paper's data), and each block's examples in a
    seeded random order, so a small set samples every document of its block rather than the
    first one. Returns the examples and the documents drawn from each source."""
    from bert_ds.data.pairs import build_examples
    from bert_ds.data.stream import BLOCK_TOKEN_LIMIT, SourceReader, furthest_below_share
    from bert_ds.data.text.cleaning import TextStats

    readers = [SourceReader(source, tokenizer, config, 0, 1, TextStats()).first_epoch_documents() for source in sources]
    weights = np.array([source.weight for source in sources], dtype=np.float64)
    shares, tokens = weights / weights.sum(), np.zeros(len(sources))
    live, drawn = np.ones(len(sources), dtype=bool), [0] * len(sources)
    examples, block_index = [], 0
    while len(examples) < wanted and live.any():
        block, block_tokens = [], 0
        while len(block) < config.block_documents and block_tokens < BLOCK_TOKEN_LIMIT and live.any():
            index = furthest_below_share(shares, tokens, live)
            document = next(readers[index], None)
            if document is None:  # this source's first epoch is read
                live[index] = False
                continue
            size = sum(len(sentence) for sentence in document)
            tokens[index] += size
            block_tokens += size
            drawn[index] += 1
            block.append(document)
        if not block:
            break
        rng = np.random.default_rng([EVAL_SEED, block_index])
        found = build_examples(block, config.objective, config.seq_length, config.short_seq_prob, rng)
        examples += [found[k] for k in rng.permutation(len(found))]
        block_index += 1
    return examples[:wanted], drawn


def load_eval_examples(run, tokenizer) -> tuple[list, str]:
    """The run's evaluation examples (read before the model is built, so bad eval data fails in
    seconds) and a note when the data held fewer than the default number."""
    examples, note = eval_examples(run.eval.eval_data, tokenizer, run.data_config(), run.eval.eval_samples)
    if not examples:
        raise DataError(f"Evaluation data {' '.join(run.eval.eval_data)} yields no example of {run.data.seq_length} tokens.")
    return examples, note


def build_eval_set(run, tokenizer, layout, examples: list) -> EvalSet:
    """This rank's share of `examples`, collated into micro-batches of the training micro-batch
    size; every rank gets the same number of micro-batches."""
    import torch

    from bert_ds.data.masking import SpecialIds, collate

    for uid, example in enumerate(examples):
        example.uid = uid
    mine = examples[layout.dp_rank :: layout.data_parallel]
    micro = run.optim.micro_batch_size
    per_rank = -(-len(examples) // layout.data_parallel)
    count = -(-per_rank // micro)
    ids = SpecialIds.from_tokenizer(tokenizer)
    batches = []
    for k in range(count):
        chunk = mine[k * micro : (k + 1) * micro]
        real = len(chunk)
        chunk += [examples[0]] * (micro - real)  # padding rows: selected nowhere, below
        batch = collate(chunk, ids, run.data.seq_length, run.data.objective, EVAL_SEED, False, run.data_config().mask_prob)
        batch["loss_mask"][real:] = False
        if "next_sentence_label" in batch:
            batch["next_sentence_label"][real:] = -1
        batches.append({name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in batch.items()})
    return EvalSet(batches, len(examples))


def evaluate(engine, model, eval_set: EvalSet, layout) -> EvalResult:
    """Collective (every rank): the held-out metrics of the current weights."""
    import torch
    import torch.distributed as dist

    from bert_ds.model.loss import EVAL_SUM_FIELDS

    start = time.perf_counter()
    if layout.pipeline_parallel > 1:
        sums = _pipeline_sums(engine, model, eval_set, layout)
    else:
        sums = _plain_sums(engine, eval_set, layout)
    if sums is None:  # a pipeline stage without the loss: receives the last stage's sums below
        sums = torch.zeros(len(EVAL_SUM_FIELDS), dtype=torch.float64)
    sums = sums.to(layout.device)
    dist.all_reduce(sums, group=layout.dp_group)
    if layout.pipeline_parallel > 1:
        dist.broadcast(sums, src=dist.get_global_rank(layout.pp_group, layout.pipeline_parallel - 1), group=layout.pp_group)
    mlm_loss, mlm_correct, mlm_count, nsp_loss, nsp_correct, nsp_count = sums.cpu().tolist()
    mlm_count = max(mlm_count, 1.0)
    return EvalResult(
        mlm_loss / mlm_count, mlm_correct / mlm_count,
        nsp_loss / nsp_count if nsp_count else None, nsp_correct / nsp_count if nsp_count else None,
        eval_set.samples, time.perf_counter() - start,
    )


def _plain_sums(engine, eval_set: EvalSet, layout):
    import torch

    from bert_ds.model.loss import evaluation_sums
    from bert_ds.runtime.device import to_device
    from bert_ds.training.loop.steps import read_on_host
    from bert_ds.training.loop.watchdog import watching

    total, watchdog = None, watching()
    engine.eval()
    try:
        with torch.no_grad():
            for batch in eval_set.batches:
                # The predicted positions come from the host copy, as in training (no device read).
                batch = to_device(read_on_host(batch)[0], layout.device)
                positions = batch["predicted_positions"]
                out = engine(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], positions)
                sums = evaluation_sums(out.mlm_logits, batch["predicted_labels"], out.nsp_logits,
                                       batch.get("next_sentence_label"), tp_group=layout.tp_group)
                total = sums if total is None else total + sums
                watchdog.beat()  # a long evaluation progresses batch by batch
    finally:
        engine.train()
    return total


def _pipeline_sums(engine, model, eval_set: EvalSet, layout):
    from bert_ds.training.engine.pipeline_loss import pipeline_batch
    from bert_ds.runtime.device import to_device
    from bert_ds.training.loop.steps import read_on_host
    from bert_ds.training.loop.watchdog import watching

    watchdog = watching()

    def feed():
        for batch in eval_set.batches:
            watchdog.beat()
            yield pipeline_batch(to_device(read_on_host(batch)[0], layout.device))

    needs_data = engine.is_first_stage() or engine.is_last_stage()
    # eval_batch switches the module to eval mode (dropout off; the loss records sums) and the
    # next train_batch back to training.
    engine.eval_batch(data_iter=feed() if needs_data else None, num_micro_batches=len(eval_set.batches))
    return model.loss_fn.metrics.eval_sums if model.last_stage else None
