"""The launch plan's data rows: each source as the run will read it, what one loader shard of
K = DP x workers costs, and, where a manifest gives word counts, how many epochs the run makes.

- local files: their count and size; a prepared folder (data/prepared.py) also its records and
  words, from the manifest;
- a hub dataset with Parquet files: its commit, files, records and row groups from the footers,
  and the largest share of the corpus one shard fetches (row groups are decoded whole, so too
  few or too large row groups for K show here, with the advice to prepare the source);
- a hub dataset without Parquet files: streamed by `datasets`, every shard reading all of it.

Tokens are words times the tokenizer's tokens per word on the source's first records; epochs are
the tokens the run draws from a source (its share of steps x global batch x sequence length,
padding counted) over the source's tokens: an upper bound.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Optional

from bert_ds.training.plan.report import amount

UNEVEN_SHARE = 1.5
"""A shard fetching more than this many times 1/K of a hub source is reported (row groups too few or too large)."""
WORDS_SAMPLE_RECORDS = 200
"""Records of a source tokenized to measure its tokens per word."""


@dataclass
class SourcePlan:
    """One data source as the run will read it."""

    name: str
    location: str
    share: float
    """Share of the training tokens (weights normalised)."""
    detail: str
    """Files and bytes, or how a hub dataset is read; layout; words and epochs where known."""
    words: Optional[int] = None
    tokens: Optional[int] = None
    """Estimated: words x tokens per word of the first records."""
    epochs: Optional[float] = None
    """Passes over the source in this run (upper bound: padding counted as drawn tokens)."""
    warnings: list[str] = field(default_factory=list)


def plan_sources(run, tokenizer, shards: int, run_tokens: int) -> list[SourcePlan]:
    """Every training source of `run` as a SourcePlan; `shards` = DP x loader workers."""
    from bert_ds.data.sources import parse_sources, record_layout

    sources = parse_sources(run.data.sources)
    total = sum(s.weight for s in sources)
    plans = []
    for source in sources:
        share = source.weight / total
        if source.is_hub:
            plan = _hub_plan(source, share, shards)
        else:
            plan = _local_plan(source, share)
        plan.detail += f"; layout {record_layout(source)}"
        if plan.words and tokenizer is not None:
            ratio = _tokens_per_word(source, tokenizer)
            if ratio:
                plan.tokens = int(plan.words * ratio)
                plan.epochs = share * run_tokens / plan.tokens
                plan.detail += (f"\n  {amount(plan.words)} words, ~{amount(plan.tokens)} tokens ({ratio:.2f} per word): "
                                f"this run reads it ~{plan.epochs:,.2f} times")
        plans.append(plan)
    return plans


def words_ratio_note(plans: list[SourcePlan]) -> Optional[str]:
    """The mix of two and more sources whose words are known, beside the paper's 800M : 2,500M."""
    known = [plan for plan in plans if plan.words]
    if len(known) < 2:
        return None
    words = " : ".join(f"{plan.name} {amount(plan.words)}" for plan in known)
    shares = " : ".join(f"{100 * plan.share:.1f}%" for plan in known)
    return (f"words by the manifests: {words} (BERT's paper: BooksCorpus 800M : Wikipedia 2,500M); "
            f"token shares {shares}")


def _local_plan(source, share: float) -> SourcePlan:
    from bert_ds.data.sources import local_files

    files = local_files(source)  # a missing or unreadable file is an error here
    size = sum(os.path.getsize(f) for f in files)
    if not source.is_prepared:
        return SourcePlan(source.name, source.location, share, f"{len(files):,} file(s), {size / 2**20:,.1f} MiB")
    from bert_ds.data.prepared import read_manifest, shortfall_warning

    manifest = read_manifest(source.name, source.location)
    origin = manifest.get("hub_id") and f"{manifest['hub_id']} {manifest.get('config') or ''} at {manifest.get('commit')}"
    detail = (f"prepared: {len(files):,} shard(s), {size / 2**20:,.1f} MiB, {manifest['records']:,} records"
              f"{' of ' + origin if origin else ''}")
    warning = shortfall_warning(source.name, manifest)
    return SourcePlan(source.name, source.location, share, detail, words=manifest["words"],
                      warnings=[warning] if warning else [])


def _hub_plan(source, share: float, shards: int) -> SourcePlan:
    from bert_ds.data.hub.parquet import shard_fetch_share
    from bert_ds.data.sources import hub_parquet

    found = hub_parquet(source)
    if found is None:
        return SourcePlan(source.name, source.location, share, "hub dataset without Parquet files: streamed by `datasets`",
                          warnings=[f"WARNING: data source {source.name!r} has no Parquet files on the hub: each of the "
                                    f"{shards:,} loader shards reads the whole stream ({shards:,} full passes per epoch). "
                                    f"Use its Parquet conversion (hf:ID@refs/convert/parquet) or prepare it once: "
                                    f"python -m bert_ds.data.prepare {source.location} --output DIR"])
    worst, groups = shard_fetch_share(found, shards)
    text = sum(size for _, size in found.row_groups)
    detail = (f"hub Parquet at commit {found.commit}: {len(found.files):,} files, {found.records:,} records in "
              f"{groups:,} row groups, {text / 2**30:,.2f} GiB of text; each of {shards:,} shards fetches "
              f"<= {100 * worst:.2f}% of it (1/K = {100 / shards:.2f}%)")
    warnings = []
    if groups < shards or worst > UNEVEN_SHARE / shards:
        warnings.append(f"WARNING: data source {source.name!r} has {groups:,} row groups for {shards:,} loader shards: one "
                        f"shard fetches {100 * worst:.1f}% of it, not ~{100 / shards:.2f}%. Prepare it into row groups of "
                        f"1,000 rows: python -m bert_ds.data.prepare {source.location} --output DIR")
    if found.partial:
        warnings.append(f"WARNING: data source {source.name!r}: the hub's Parquet conversion of {found.location.hub_id} "
                        "is partial (partial-train): it holds only the first part of the dataset.")
    return SourcePlan(source.name, source.location, share, detail, warnings=warnings)


def _tokens_per_word(source, tokenizer) -> Optional[float]:
    """Tokens per whitespace word of the source's first records (None if they hold no words)."""
    from bert_ds.data.sources import document_stream

    texts = [record["text"] for record in itertools.islice(document_stream(source, seed=0, epoch=0), WORDS_SAMPLE_RECORDS)
             if isinstance(record.get("text"), str)]
    words = sum(len(text.split()) for text in texts)
    if not words:
        return None
    return sum(len(ids) for ids in tokenizer.encode_batch(texts)) / words
