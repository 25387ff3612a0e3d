"""Word and character counts of an Arrow string column, equal to Python's
`sum(len(text.split()) for text in texts)` and `sum(map(len, texts))` but computed on the column's
UTF-8 bytes with numpy (about 5x faster than the Python loop on 3 KB articles), so counting does
not dominate a prepare.

A word is a run of characters that are not whitespace in Python's sense (`str.isspace`): the
ASCII ones (tab, newline, vertical tab, form feed, carriage return, 0x1c-0x1f, space) and the
Unicode ones, which UTF-8 writes as 2 or 3 bytes: U+0085, U+00A0 (no-break space, common in
Wikipedia), U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
"""

from __future__ import annotations

import numpy as np

# Multi-byte whitespace by lead byte: the continuation bytes that make it whitespace.
_TWO_BYTE = {0xC2: (0x85, 0xA0)}
_THREE_BYTE = {(0xE1, 0x9A): (0x80,), (0xE2, 0x80): tuple(range(0x80, 0x8B)) + (0xA8, 0xA9, 0xAF),
               (0xE2, 0x81): (0x9F,), (0xE3, 0x80): (0x80,)}


def _utf8(array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes) of a pyarrow string or large_string array, zero-copy."""
    import pyarrow as pa

    width = np.int64 if pa.types.is_large_string(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=width)[array.offset:array.offset + len(array) + 1]
    data = array.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data[offsets[0]:offsets[-1]] if len(offsets) else data[:0]


def _whitespace(data: np.ndarray, leads: np.ndarray) -> np.ndarray:
    """Per byte: part of a whitespace character (`leads`: positions of the multi-byte characters'
    first bytes). Whole-array passes are cheap comparisons; the rare bytes that need a closer look
    (control characters, multi-byte characters) are found by position and fixed one kind at a
    time (a 256-entry lookup table is 20x slower per byte)."""
    space = data <= 32
    controls = np.flatnonzero(data < 28)  # mostly newlines and tabs
    space[controls[(data[controls] < 9) | (data[controls] > 13)]] = False  # 0-8, 14-27: not whitespace
    if len(leads):
        lead = data[leads]
        for first, seconds in _TWO_BYTE.items():
            at = leads[(lead == first) & (leads + 1 < len(data))]
            at = at[np.isin(data[at + 1], seconds)]
            space[at] = space[at + 1] = True
        for (first, second), thirds in _THREE_BYTE.items():
            at = leads[(lead == first) & (leads + 2 < len(data))]
            at = at[(data[at + 1] == second) & np.isin(data[at + 2], thirds)]
            space[at] = space[at + 1] = space[at + 2] = True
    return space


def count_words_and_characters(array) -> tuple[int, int]:
    """(words, characters) of a pyarrow string array holding valid UTF-8 (chunked arrays: chunk
    by chunk): `sum(len(t.split()) for t in texts)` and `sum(map(len, texts))`."""
    if hasattr(array, "chunks"):
        counts = [count_words_and_characters(chunk) for chunk in array.chunks]
        return sum(w for w, _ in counts), sum(c for _, c in counts)
    offsets, data = _utf8(array)
    if not len(data):
        return 0, 0
    leads = np.flatnonzero(data >= 0xC0)
    # A character is a byte less its continuation bytes: 1, 2 or 3 after a lead byte C0-DF, E0-EF, F0-F7.
    characters = len(data) - int(np.count_nonzero(data[leads] >= 0xC0) + np.count_nonzero(data[leads] >= 0xE0)
                                 + np.count_nonzero(data[leads] >= 0xF0))
    space = _whitespace(data, leads)
    # A word starts after whitespace, or at the start of a text: count the first kind across the
    # concatenated texts, then add the texts that start with a word where the text before them
    # ended in one (no whitespace between them in the buffer).
    words = int(np.count_nonzero(space[:-1] > space[1:])) + int(not space[0])
    begins = (offsets[1:-1] - offsets[0])[offsets[2:] > offsets[1:-1]]  # of the non-empty texts after the first
    begins = begins[begins > 0]
    return words + int(np.count_nonzero(~space[begins] & ~space[begins - 1])), characters
