"""Re-divide the data-stream states of K shards among K' shards (a new DP size or worker count).

Guarantee: every document of the corpus is read by exactly one shard per epoch, before and after,
and every example of the blocks that were being handed out is handed out exactly once. How:

- Records: unit u of an epoch belonged to old shard (chunk of u) mod K (data/stream.py). Each old
  shard had read its units up to the end of its current block (a cursor). The new shards keep a
  "consumed" layer per epoch listing those cursors, split the units by chunk mod K', and skip
  what a layer claims. They start at the smallest old cursor (everything below it was consumed
  by someone).
- Blocks in progress: their documents count as consumed (they lie below the cursors); the
  examples an old shard had not yet handed out are handed out by a new shard first ("tails"),
  rebuilt exactly as the old shard would have (same documents, same shuffle).

When K' == K the states are kept as they are: the continuation is exactly the old one.
"""

from __future__ import annotations

import copy
import json
from typing import Optional

from bert_ds.data.stream import BEYOND
from bert_ds.data.text.cleaning import TextStats


def initial_reader_state(shard_index: int, num_shards: int) -> dict:
    """A reader that has read nothing yet (SourceReader.state_dict() of a fresh reader)."""
    return dict(
        epoch=0, documents_this_epoch=0, records_this_epoch=0, started_at=0,
        shard_index=shard_index, num_shards=num_shards, consumed=[], ownership=None, dataset=None,
    )


def reshard_reader_states(old: list[dict], new_count: int) -> list[dict]:
    """One source's readers at their cursors (old[k] is shard k of len(old)) -> new_count readers."""
    first_epoch = min(state["epoch"] for state in old)
    last_epoch = max(state["epoch"] for state in old)
    layers = _unique(layer for state in old for layer in state["consumed"] if layer["epoch"] >= first_epoch)
    for epoch in range(first_epoch, last_epoch + 1):
        cursors = [
            state["records_this_epoch"] if state["epoch"] == epoch else (BEYOND if state["epoch"] > epoch else 0)
            for state in old
        ]
        # Every shard of a layout owns the epoch's units the same way (a fresh reader says None).
        owned = [s.get("ownership", "records") for s in old if s["epoch"] == epoch]
        ownership = next((way for way in owned if way is not None), "chunks")
        layers.append(dict(epoch=epoch, stride=len(old), cursors=cursors, ownership=ownership))
    start = min((s for s in old if s["epoch"] == first_epoch), key=lambda s: s["records_this_epoch"])
    position = start["records_this_epoch"]
    # Layers of the first epoch that claim nothing at or after the start position are spent.
    layers = [layer for layer in layers if layer["epoch"] > first_epoch or max(layer["cursors"]) > position]
    return [
        dict(
            epoch=first_epoch, documents_this_epoch=0, records_this_epoch=position, started_at=position,
            shard_index=k, num_shards=new_count, consumed=copy.deepcopy(layers), ownership="chunks",
            dataset=copy.deepcopy(start["dataset"]),
        )
        for k in range(new_count)
    ]


def _unique(layers) -> list[dict]:
    seen, kept = set(), []
    for layer in layers:
        key = json.dumps(layer, sort_keys=True)
        if key not in seen:
            seen.add(key)
            kept.append(copy.deepcopy(layer))
    return kept


def _cursor_snapshot(state: dict) -> dict:
    """The snapshot at the end of the block in progress (its start if no block was read yet)."""
    return state["block_end"] if state["block_end"] is not None and state["examples_done"] > 0 else state["block_start"]


def reshard_stream_states(old: list[Optional[dict]], new_count: int, drop_partial_blocks: bool = False) -> list[Optional[dict]]:
    """ExampleStream states of shards 0..K-1 (None: a shard that handed out nothing) -> K' states.

    `drop_partial_blocks`: do not finish the blocks in progress (their examples would be cut for
    another sequence length); their documents still count as read.
    """
    if len(old) == new_count and not drop_partial_blocks:
        return copy.deepcopy(old)
    known = [state for state in old if state is not None]
    if not known:
        return [None] * new_count
    num_sources = len(known[0]["block_start"]["readers"])
    snapshots = [
        _cursor_snapshot(state) if state is not None
        else dict(readers=[initial_reader_state(k, len(old))] * num_sources, tokens_drawn=[0] * num_sources, stats={})
        for k, state in enumerate(old)
    ]
    readers = [
        reshard_reader_states([snapshot["readers"][source] for snapshot in snapshots], new_count)
        for source in range(num_sources)
    ]
    tails: list[dict] = []
    for state in known:
        tails += state["tails"]
        if state["examples_done"] > 0:
            tails.append(dict(copy.deepcopy(state), tails=[]))
    if drop_partial_blocks:
        tails = []
    stats = TextStats()
    for snapshot in snapshots:
        if snapshot["stats"]:
            stats.add(TextStats(**snapshot["stats"]))
    tokens = [sum(s["tokens_drawn"][i] for s in snapshots) // new_count for i in range(num_sources)]
    generation = max(state["generation"] for state in known) + 1
    return [
        dict(
            block_start=dict(
                readers=[readers[source][k] for source in range(num_sources)],
                tokens_drawn=list(tokens),
                stats=(stats if k == 0 else TextStats()).as_dict(),
            ),
            block_end=None, block_index=0, examples_done=0, shard_index=k, num_shards=new_count,
            generation=generation, tails=tails[k::new_count],
        )
        for k in range(new_count)
    ]
