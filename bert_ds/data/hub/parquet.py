"""A hub dataset read as its Parquet files, by row group, so each loader shard fetches about 1/K
of the corpus instead of streaming all of it.

The hub serves datasets as Parquet: `wikimedia/wikipedia` as it was uploaded
(`20231101.en/train-00000-of-00041.parquet`), and any other dataset through its automatic
conversion on the `refs/convert/parquet` branch (`plain_text/train/0000.parquet`;
`partial-train/` where the conversion stopped early, for datasets over 5 GB). A source lists the
train split's files at its pinned commit (data/hub/fs.py), reads their footers once (cached in
BERT_DS_CACHE/hub-index, keyed by dataset, commit, file and size: a commit never changes), and
its shards read their own row groups (data/records/parquet.py). A dataset with no Parquet files
at that revision is streamed by `datasets` instead: every shard then reads the whole stream.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from dataclasses import dataclass
from typing import Optional

from bert_ds.data.hub.fs import (
    HUB_MIRROR_ENV, CountingFile, HubLocation, hub_filesystem, one_line, parse_hub_location, pin_revision, repo_root,
    with_retries,
)
from bert_ds.data.records.parquet import ParquetFooter, ParquetRecords, check_text_column
from bert_ds.errors import DataError

INDEX_VERSION = 1
TRAIN_FOLDERS = ("train", "partial-train")


@dataclass(frozen=True)
class HubParquetFile:
    path: str
    """The file's path in the hub file system (`datasets/ID@COMMIT/...`)."""
    size: int
    footer: ParquetFooter
    metadata: bytes
    """The serialized footer, handed to pyarrow so that a shard never fetches it again."""


@dataclass(frozen=True)
class HubParquet:
    """A hub source's train split as Parquet files at one commit."""

    location: HubLocation
    commit: str
    files: tuple[HubParquetFile, ...]
    partial: bool
    """The hub's conversion stopped early (`partial-train`): the files hold a prefix of the data."""

    @property
    def records(self) -> int:
        return sum(sum(f.footer.rows) for f in self.files)

    @property
    def row_groups(self) -> list[tuple[int, int]]:
        """(rows, text bytes) of every row group, file by file."""
        return [pair for f in self.files for pair in zip(f.footer.rows, f.footer.text_bytes)]


_RESOLVED: dict[tuple, Optional[HubParquet]] = {}
"""(source name, location, commit, mirror) -> what resolve() found, so a process lists a source once."""


def resolve(source_name: str, location: str, commit: Optional[str] = None) -> Optional[HubParquet]:
    """The source's Parquet files at `commit` (default: its revision's commit now), their
    footers read (or taken from the cache); None when the revision holds no Parquet file."""
    mirror = os.environ.get(HUB_MIRROR_ENV)
    key = (source_name, location, commit, mirror)
    if key not in _RESOLVED:
        hub = parse_hub_location(location)
        fs = hub_filesystem()
        pinned = commit or pin_revision(fs, source_name, hub)
        root = repo_root(hub.hub_id, pinned)
        try:
            paths = _parquet_files(fs, hub, root)
        except Exception as error:  # HTTP 401/403 (gated), a dropped connection after its retries
            raise DataError(f"Data source {source_name!r}: cannot list the files of {hub} at {pinned}: "
                            f"{one_line(error)}") from None
        if not paths:
            _RESOLVED[key] = None
        else:
            chosen = train_files(source_name, hub, root, sorted(paths))
            partial = any(f"/{TRAIN_FOLDERS[1]}/" in path for path in chosen)
            footers = _footers(fs, source_name, hub, pinned, [(path, paths[path]) for path in chosen])
            files = tuple(HubParquetFile(path, paths[path], ParquetFooter.of(_parse(metadata)), metadata)
                          for path, metadata in zip(chosen, footers))
            _RESOLVED[key] = HubParquet(hub, pinned, files, partial)
        if commit is None:
            _RESOLVED[(source_name, location, pinned, mirror)] = _RESOLVED[key]
    return _RESOLVED[key]


def _parquet_files(fs, hub: HubLocation, root: str) -> dict[str, int]:
    """Path -> size of the revision's Parquet files: those of the config's folder where it has
    one (`wikimedia/wikipedia` holds hundreds of configs), else of the whole repository."""
    def find(folder: str) -> dict:
        try:
            return with_retries(lambda: fs.find(folder, detail=True), f"the file list of {hub}")
        except FileNotFoundError:
            return {}

    listing = find(f"{root}/{hub.config}") if hub.config else {}
    if not any(path.endswith(".parquet") for path in listing):
        listing = find(root)
    return {path: info["size"] for path, info in listing.items() if path.endswith(".parquet")}


def train_files(source_name: str, hub: HubLocation, root: str, paths: list[str]) -> list[str]:
    """The train split's files among a revision's Parquet files: those of the named config (its
    folder), or of the only one; within it, a `train`/`partial-train` folder or `train-*` files."""
    relative = [path[len(root) + 1:] for path in paths]
    configs = sorted({path.split("/")[0] for path in relative if "/" in path})
    if hub.config:
        if hub.config not in configs:
            raise DataError(f"Data source {source_name!r}: hub dataset {hub.hub_id!r} at {hub.revision} has no config "
                            f"{hub.config!r} (its Parquet folders: {', '.join(configs) or 'none'}).")
        config = hub.config
    elif len(configs) == 1:
        config = configs[0]
    elif not configs:  # files at the top of the repository
        chosen = [root + "/" + path for path in relative if _is_train(path)]
        if not chosen:
            raise DataError(f"Data source {source_name!r}: hub dataset {hub.hub_id!r} has no train split among its "
                            f"Parquet files ({', '.join(relative)[:300]}).")
        return chosen
    else:
        raise DataError(f"Data source {source_name!r}: hub dataset {hub.hub_id!r} has configs {', '.join(configs)}; "
                        f"name one: hf:{hub.hub_id}:CONFIG.")
    chosen = [root + "/" + path for path in relative if path.startswith(config + "/") and _is_train(path[len(config) + 1:])]
    if not chosen:
        raise DataError(f"Data source {source_name!r}: hub dataset {hub.hub_id!r} config {config!r} has no train split "
                        f"among its Parquet files ({', '.join(p for p in relative if p.startswith(config + '/'))[:300]}).")
    full = [path for path in chosen if f"/{TRAIN_FOLDERS[1]}/" not in path]
    return full or chosen  # a full conversion where there is one, the partial one otherwise


def _is_train(path: str) -> bool:
    folder, _, name = path.rpartition("/")
    return folder.split("/")[0] in TRAIN_FOLDERS if folder else name.startswith(("train-", "train.", "train_"))


def _footers(fs, source_name: str, hub: HubLocation, commit: str, files: list[tuple[str, int]]) -> list[bytes]:
    """Every file's serialized footer: from the cache, else fetched now (and cached)."""
    from bert_ds.runtime.cache import cache_dir, publish, staging_path

    key = json.dumps([hub.hub_id, commit, files, os.environ.get(HUB_MIRROR_ENV), INDEX_VERSION])
    target = cache_dir() / "hub-index" / f"{hashlib.sha1(key.encode()).hexdigest()}.json"
    if target.exists():
        return [base64.b64decode(value) for value in json.loads(target.read_text())["footers"]]
    footers = [_read_footer(fs, source_name, hub, path) for path, _ in files]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = staging_path(target)
        staging.write_text(json.dumps(dict(dataset=str(hub), commit=commit, files=files,
                                           footers=[base64.b64encode(footer).decode() for footer in footers])))
        publish(staging, target)
    except OSError as error:
        raise DataError(f"Cannot write the hub index of {hub} into {target.parent}: {error.strerror}; "
                        "set BERT_DS_CACHE to a writable folder.") from None
    return footers


def _read_footer(fs, source_name: str, hub: HubLocation, path: str) -> bytes:
    """The file's footer, checked (a string `text` column without nulls) and serialized."""
    import pyarrow.parquet as pq

    def read():
        with fs.open(path, "rb", cache_type="none") as handle:
            parquet = pq.ParquetFile(handle)
            return parquet.schema_arrow, parquet.metadata

    try:
        schema, metadata = with_retries(read, path)
    except Exception as error:
        raise DataError(f"Data source {source_name!r}: unreadable Parquet footer of {path} ({hub}): {error}") from None
    check_text_column(source_name, path, schema, metadata)
    sink = io.BytesIO()
    metadata.write_metadata_file(sink)
    return sink.getvalue()


def _parse(footer: bytes):
    import pyarrow.parquet as pq

    return pq.read_metadata(io.BytesIO(footer))


class RemoteParquetRecords(ParquetRecords):
    """A hub Parquet file's records: every row group one chunk, fetched by range requests (with
    retries), the footer never again. `bytes_read` is what its reads fetched."""

    def __init__(self, source_name: str, hub_file: HubParquetFile, group: int):
        super().__init__(source_name, hub_file.path, group, hub_file.footer, whole_row_groups=True)
        self._hub_file = hub_file
        self._fetched = [0]
        self._handle = None

    def _open(self):
        import pyarrow.parquet as pq

        self._handle = with_retries(lambda: hub_filesystem().open(self.path, "rb", cache_type="none"), self.path)
        return pq.ParquetFile(CountingFile(self._handle, self._fetched), metadata=_parse(self._hub_file.metadata))

    def row_group_table(self, g: int, columns: tuple[str, ...]):
        def reopen():
            self.close()

        table = with_retries(lambda: super(RemoteParquetRecords, self).row_group_table(g, columns),
                             f"{self.path} row group {g}", before_retry=reopen)
        self.bytes_read = self._fetched[0]
        return table

    def close(self) -> None:
        super().close()
        if self._handle is not None:  # pyarrow closes only the files it opened itself
            self._handle.close()
        self._handle = None


def shard_fetch_share(hub: HubParquet, shards: int) -> tuple[float, int]:
    """(The largest share of the text bytes one of `shards` shards fetches, row groups of the
    source), with row group j of the epoch's order the shard j mod K's (file order of epoch 0
    stands for every epoch: the shares differ by a row group at most)."""
    sizes = [size for _, size in hub.row_groups]
    total = sum(sizes) or 1
    per_shard = [sum(sizes[k::shards]) for k in range(shards)]
    return max(per_shard) / total, len(sizes)


def footer_columns(hub_file: HubParquetFile) -> list[str]:
    """The file's column names, from its footer."""
    return _parse(hub_file.metadata).schema.to_arrow_schema().names
