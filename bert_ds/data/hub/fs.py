"""The Hugging Face hub as a file system: where a hub dataset's files are, at which commit, and
how to read them without giving up on the first dropped connection.

A hub source `hf:ID[:CONFIG][@REVISION]` is read through fsspec: `huggingface_hub.HfFileSystem`,
whose files are `datasets/ID@REVISION/PATH` and whose reads are HTTP range requests. Set
BERT_DS_HUB_MIRROR to a folder or fsspec URL laid out the same way (`datasets/ID@REVISION/PATH`,
the revision URL-quoted: `datasets/bookcorpus/bookcorpus@refs%2Fconvert%2Fparquet/...`) to read
a mirror instead: an internal copy of the hub's Parquet files, or a test's fixture.

A run pins the revision it was given (a branch such as `main`) to a commit when it first opens
the source, and a checkpoint keeps that commit: the files a resumed run reads are the ones it
started with, whatever was pushed to the branch since.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar
from urllib.parse import quote, unquote

from bert_ds.errors import DataError

HUB_MIRROR_ENV = "BERT_DS_HUB_MIRROR"
DEFAULT_REVISION = "main"
RETRIES = 5
"""Attempts of a hub request that failed with a transient error (connection, timeout, 429, 5xx)."""
FIRST_WAIT_SECONDS = 2.0
"""Wait before the first retry; it doubles with each one (2, 4, 8, 16 s)."""
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

T = TypeVar("T")


@dataclass(frozen=True)
class HubLocation:
    """A hub dataset as a source names it: `hf:ID[:CONFIG][@REVISION]`."""

    hub_id: str
    config: Optional[str]
    revision: str = DEFAULT_REVISION

    def __str__(self) -> str:
        config = f":{self.config}" if self.config else ""
        return f"hf:{self.hub_id}{config}@{self.revision}"


def parse_hub_location(location: str) -> HubLocation:
    """`hf:ID[:CONFIG][@REVISION]` -> HubLocation (a revision may hold '/': `refs/convert/parquet`);
    a DataError unless ID is `namespace/name`."""
    body, at, revision = location[3:].partition("@")
    hub_id, _, config = body.partition(":")
    if not _HUB_ID.match(hub_id):
        raise DataError(f"Hub dataset {location!r}: the id must be namespace/name (e.g. wikimedia/wikipedia), got {hub_id!r}.")
    return HubLocation(hub_id, config or None, revision if at and revision else DEFAULT_REVISION)


def hub_filesystem():
    """The hub's fsspec file system, or the mirror that BERT_DS_HUB_MIRROR names."""
    mirror = os.environ.get(HUB_MIRROR_ENV)
    if mirror:
        import fsspec
        from fsspec.implementations.dirfs import DirFileSystem

        fs, root = fsspec.core.url_to_fs(mirror)
        return DirFileSystem(root, fs)
    from huggingface_hub import HfFileSystem

    return HfFileSystem()


def repo_root(hub_id: str, revision: str) -> str:
    """The folder of the dataset at `revision` in the file system's paths."""
    return f"datasets/{hub_id}@{quote(revision, safe='')}"


def is_mirror(fs) -> bool:
    return type(fs).__name__ != "HfFileSystem"


def pin_revision(fs, source_name: str, location: HubLocation) -> str:
    """The commit `location.revision` stands for now (on a mirror: the revision folder itself);
    a DataError naming the id or the revision when the hub has no such dataset or revision."""
    if is_mirror(fs):
        try:
            if fs.isdir(repo_root(location.hub_id, location.revision)):
                return location.revision
            present = [unquote(path.rpartition("@")[2]) for path in fs.glob(f"datasets/{location.hub_id}@*")]
        except OSError as error:
            raise DataError(f"Data source {source_name!r}: cannot read the hub mirror {os.environ.get(HUB_MIRROR_ENV)}: "
                            f"{error}") from None
        raise _missing(source_name, location, present or None)
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        info = with_retries(lambda: HfApi().dataset_info(location.hub_id, revision=location.revision),
                            f"hub dataset {location.hub_id!r}")
    except RevisionNotFoundError:
        raise _missing(source_name, location, []) from None
    except RepositoryNotFoundError:
        raise _missing(source_name, location, None) from None
    except Exception as error:
        raise DataError(f"Data source {source_name!r}: cannot reach hub dataset {location.hub_id!r} ({one_line(error)}); "
                        f"nodes without internet read a prepared copy: python -m bert_ds.data.prepare {location} "
                        "--output DIR on a node with internet, then --data NAME=DIR") from None
    return info.sha


def _missing(source_name: str, location: HubLocation, revisions: Optional[list[str]]) -> DataError:
    if revisions is None:
        return DataError(f"Data source {source_name!r}: the hub has no dataset {location.hub_id!r} (or it is private or "
                         "gated: log in with `hf auth login` or set HF_TOKEN).")
    present = f" (revisions here: {', '.join(sorted(revisions))})" if revisions else ""
    return DataError(f"Data source {source_name!r}: hub dataset {location.hub_id!r} has no revision "
                     f"{location.revision!r}{present}.")


def transient(error: BaseException) -> bool:
    """Whether a failed hub request is worth repeating: a dropped connection or time-out, or an
    HTTP status that says "later" (408, 429, 5xx); not HF_HUB_OFFLINE's refusal."""
    if type(error).__name__ == "OfflineModeIsEnabled":
        return False
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    status = getattr(getattr(error, "response", None), "status_code", None)
    if status in _TRANSIENT_STATUS:
        return True
    # httpx (huggingface_hub's client) and aiohttp raise their own transport errors.
    return type(error).__name__ in {"ConnectError", "ReadError", "ReadTimeout", "ConnectTimeout", "RemoteProtocolError",
                                    "ServerDisconnectedError", "ClientConnectionError", "WriteError", "PoolTimeout"}


def with_retries(action: Callable[[], T], what: str, attempts: int = RETRIES, first_wait: Optional[float] = None,
                 before_retry: Callable[[], None] = lambda: None) -> T:
    """`action()`, repeated with exponential back-off (from `first_wait`, default
    FIRST_WAIT_SECONDS) while it fails with a transient error; the last error is raised as it
    came. `before_retry` runs before each repeat (e.g. reopen a file)."""
    first_wait = FIRST_WAIT_SECONDS if first_wait is None else first_wait
    for attempt in range(attempts):
        try:
            return action()
        except Exception as error:
            if not transient(error) or attempt == attempts - 1:
                raise
            wait = first_wait * 2 ** attempt
            print(f"bert_ds: warning: reading {what} failed ({one_line(error)}); retry {attempt + 1} of "
                  f"{attempts - 1} in {wait:g} s", file=sys.stderr, flush=True)
            time.sleep(wait)
            before_retry()
    raise AssertionError("unreachable")


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


class CountingFile:
    """A file object that counts the bytes read through it (what a remote file fetched)."""

    def __init__(self, handle, counter: list):
        self._handle, self._counter = handle, counter

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self._counter[0] += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()
