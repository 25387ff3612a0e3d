"""A local folder laid out as the hub's Parquet files (`datasets/ID@REVISION/PATH`, the revision
URL-quoted), read through BERT_DS_HUB_MIRROR with the same fsspec calls as the hub itself."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

WIKI_ID, WIKI_CONFIG = "wikimedia/wikipedia", "20231101.en"
BOOKS_ID, BOOKS_REVISION = "bookcorpus/bookcorpus", "refs/convert/parquet"


WORDS = ("river", "mountain", "city", "history", "music", "science", "war", "king", "school", "team", "season",
         "album", "species", "church", "village", "county", "railway", "island", "election", "film")


def article(i: int, sentences: int = 4) -> str:
    """A Wikipedia-like article: a title sentence, then paragraphs of seeded words (they compress
    as text does, not to nothing)."""
    rng = random.Random(i)
    body = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + "."
            for _ in range(sentences)]
    return f"Article {i} opens here.\n" + " ".join(body[: sentences // 2]) + "\n" + " ".join(body[sentences // 2:])


class CountingFileSystem(LocalFileSystem):
    """The local file system, counting the bytes read from each file (`countingfile://` URLs):
    what a hub reader would fetch over HTTP."""

    protocol = "countingfile"
    read_bytes: Counter = Counter()

    def _open(self, path, mode="rb", block_size=None, **kwargs):
        handle = super()._open(path, mode, block_size, **kwargs)
        if "r" not in mode:
            return handle
        original, name = handle.read, self._strip_protocol(path)

        def read(size=-1):
            data = original(size)
            CountingFileSystem.read_bytes[name] += len(data)
            return data

        handle.read = read
        return handle


fsspec.register_implementation("countingfile", CountingFileSystem, clobber=True)


def write_hub_file(root: Path, hub_id: str, revision: str, path: str, columns: dict, row_group_size: int) -> Path:
    target = Path(root) / "datasets" / f"{hub_id}@{quote(revision, safe='')}" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), target, row_group_size=row_group_size)
    return target


def wikipedia_mirror(root: Path, articles: int = 2000, files: int = 4, row_group_size: int = 20, sentences: int = 4) -> list[str]:
    """English Wikipedia as the hub holds it (`20231101.en/train-0000N-of-0000M.parquet`, columns
    id, url, title, text); returns the texts in file order."""
    texts = [article(i, sentences) for i in range(articles)]
    per_file = -(-articles // files)
    for k in range(files):
        part = range(k * per_file, min(articles, (k + 1) * per_file))
        write_hub_file(root, WIKI_ID, "main", f"{WIKI_CONFIG}/train-{k:05d}-of-{files:05d}.parquet", dict(
            id=[str(i) for i in part], url=[f"https://en.wikipedia.org/wiki?curid={i}" for i in part],
            title=[f"Title {i}" for i in part], text=[texts[i] for i in part]), row_group_size)
    return texts


def bookcorpus_mirror(root: Path, sentences: int = 3000, row_group_size: int = 100, partial: bool = False) -> list[str]:
    """BookCorpus as the hub's Parquet conversion holds it (`plain_text/train/0000.parquet`, one
    sentence per record, column text)."""
    texts = [f"sentence number {i} of the books ." for i in range(sentences)]
    folder = "partial-train" if partial else "train"
    half = sentences // 2
    for k, part in enumerate((texts[:half], texts[half:])):
        write_hub_file(root, BOOKS_ID, BOOKS_REVISION, f"plain_text/{folder}/{k:04d}.parquet", dict(text=part), row_group_size)
    return texts


class WordTokenizer:
    """One id per word: what a shard reads is under test here, not tokenizing."""

    unk_id = 0

    def encode_batch(self, sentences):
        return [[1] * len(sentence.split()) for sentence in sentences]
