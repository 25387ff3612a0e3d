"""Sentence splitters: paragraph (one line, whitespace-normalised) -> sentences.

`get_splitter(name)` returns the function; SPLITTERS lists the names a user may pass
(`--sentence-splitter`).
"""

from __future__ import annotations

from typing import Callable

SPLITTERS = ("regex",)
DEFAULT_SPLITTER = "regex"


def get_splitter(name: str) -> Callable[[str], list[str]]:
    if name == "regex":
        from bert_ds.data.text import regex_split

        return regex_split
    raise ValueError(f"Unknown sentence splitter {name!r}; choose one of {', '.join(SPLITTERS)}.")
