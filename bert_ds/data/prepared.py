"""A prepared corpus folder (written by `python -m bert_ds.data.prepare`) read as a source.

The folder holds Parquet shards of raw records and `manifest.json`: the shards in order with
their record, byte and word counts and sha256, the layout the loader should use, and where the
records came from. `--data NAME=FOLDER` reads it like any local Parquet source (a shard reads
only its own row groups), with the manifest's layout; `NAME=FOLDER@words` weighs the source by
its manifest's word count. At start-up every shard's size is checked against the manifest and
its sha256 once (cached, keyed by path, size and mtime), so a truncated or changed shard is one
error naming it, not a crash in a loader worker hours later.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from bert_ds.errors import DataError

MANIFEST = "manifest.json"
FORMAT = "bert_ds.prepared"
VERSION = 1
EXPECTED_RECORDS = {
    ("bookcorpus/bookcorpus", "plain_text"): 74_004_228,
    ("wikimedia/wikipedia", "20231101.en"): 6_407_814,
}
"""Train records of the paper's corpora as the hub holds them (BookCorpus: one sentence per
record; English Wikipedia of 2023-11-01: one article per record)."""


def is_prepared(location: str) -> bool:
    return os.path.isfile(os.path.join(location, MANIFEST))


def read_manifest(source_name: str, folder: str) -> dict:
    """The folder's manifest, or a DataError naming what is wrong with it."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise DataError(f"Data source {source_name!r}: cannot read {path}: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"Data source {source_name!r}: {path} is not a bert_ds manifest (no \"format\": \"{FORMAT}\").")
    if manifest.get("version", 0) > VERSION:
        raise DataError(f"Data source {source_name!r}: {path} has version {manifest['version']}, newer than this "
                        f"bert_ds reads ({VERSION}); update bert_ds.")
    if not manifest.get("complete"):
        raise DataError(f"Data source {source_name!r}: {folder} is still being prepared (its manifest is not complete); "
                        f"finish it by running the same command again: {manifest.get('command', 'python -m bert_ds.data.prepare')}")
    return manifest


def prepared_files(source_name: str, folder: str) -> list[str]:
    """The shards in the manifest's order, each checked to exist with the manifest's size."""
    return [path for path, _ in _shards(source_name, folder)]


def _shards(source_name: str, folder: str) -> list[tuple[str, dict]]:
    """(path, manifest entry) of every shard, each checked to exist with the manifest's size."""
    shards = []
    for shard in read_manifest(source_name, folder)["shards"]:
        path = os.path.join(folder, shard["path"])
        if not os.path.isfile(path):
            raise DataError(f"Data source {source_name!r}: shard {path} is missing (listed in {folder}/{MANIFEST}).")
        size = os.path.getsize(path)
        if size != shard["bytes"]:
            raise DataError(f"Data source {source_name!r}: shard {path} has {size:,} bytes, its manifest says "
                            f"{shard['bytes']:,}: it is truncated or was changed; prepare the folder again.")
        shards.append((path, shard))
    return shards


def verify_shards(source_name: str, folder: str) -> None:
    """Every shard's size and sha256 against the manifest (the hash computed once per file
    version, then cached). It stands in for the footer checks of other Parquet sources: a
    changed byte anywhere, footer included, fails here."""
    from bert_ds.data.records.index import index_files

    shards = _shards(source_name, folder)
    hashes = index_files(source_name, [path for path, _ in shards], "sha256", lambda path: dict(sha256=file_sha256(path)))
    for (path, shard), index in zip(shards, hashes):
        if index["sha256"] != shard["sha256"]:
            raise DataError(f"Data source {source_name!r}: shard {path} does not match its sha256 in "
                            f"{folder}/{MANIFEST}: it was changed or damaged; prepare the folder again.")


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def prepared_words(source_name: str, folder: str) -> int:
    return int(read_manifest(source_name, folder)["words"])


def prepared_layout(source_name: str, folder: str) -> Optional[str]:
    return read_manifest(source_name, folder).get("layout")


def shortfall_warning(source_name: str, manifest: dict) -> str:
    """A warning when a manifest of one of the paper's corpora holds fewer records than the hub's
    full dataset (a partial Parquet conversion), else ''."""
    expected = EXPECTED_RECORDS.get((manifest.get("hub_id"), manifest.get("config")))
    if not expected or manifest["records"] >= expected:
        return ""
    return (f"WARNING: data source {source_name!r} holds {manifest['records']:,} records, "
            f"{100 * manifest['records'] / expected:.1f}% of the {expected:,} of {manifest['hub_id']} "
            f"{manifest['config']}: the hub's Parquet conversion is partial (or the prepare was cut short).")
