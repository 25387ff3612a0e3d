"""One shard's stream of training examples, resumable from a small state.

Documents of every source are mixed by token share (each next document comes from the source
furthest below its share of the tokens drawn so far: deterministic, so the mix follows the
weights in tokens, not in documents, whose sizes differ 100-fold between books and articles).
Documents are read in blocks; a block's examples are built and shuffled with an RNG keyed by the
block's number. The state is therefore tiny: where each source stood when the current block
started, and how many of the block's examples were already handed out. Resuming re-reads that
block and continues with the next unseen example.

Shards split every source by chunks of records (chunk j of an epoch belongs to shard j mod
num_shards; data/records/index.py says what a chunk is), so a shard reads only its own chunks of a
local source, and a position means the same for any number of shards: data/reshard.py re-divides
a stream's state among a new number of shards (another DP size or worker count).
"""

from __future__ import annotations

import copy
import hashlib
import struct
from typing import Iterator, Optional

import numpy as np

from bert_ds.config import DataConfig
from bert_ds.data.pairs import Document, Example, build_examples
from bert_ds.data.sources import (
    DataError, DataSource, hub_parquet, load_source, record_layout, record_text, source_epoch, streams_whole,
)
from bert_ds.data.text.cleaning import TextStats, clean_document, split_sentences

# A block also ends when it holds this many tokens, bounding memory when documents are books.
BLOCK_TOKEN_LIMIT = 2_000_000


# A cursor beyond any record index ("every record of this epoch is consumed").
BEYOND = 1 << 62


class SourceReader:
    """Tokenized documents of one source for one shard, looping over epochs.

    The source's records are read in units of its layout's group (one record, or N consecutive
    one-sentence records: data/text/layouts.py); "unit u" below and every counter in the state mean
    unit u of the epoch. Units are owned by shards through their chunk (`ownership`):

    - "chunks" (local sources and hub Parquet files): unit u belongs to the chunk holding its first
      record (data/records/index.py) and chunk j to shard j % num_shards, so a shard seeks from one
      of its chunks to the next and never reads the others';
    - "records" (hub sources streamed by `datasets`, which are one stream read from its start; and
      the data state of a checkpoint written before chunks existed): unit u belongs to shard
      u % num_shards.

    No `consumed` layer may claim a unit the shard keeps. A layer, left by a re-division
    (data/reshard.py), describes what the shards of an earlier layout already read: unit u of
    `epoch` was consumed when u < cursors[owner], its owner under the layer's stride and ownership.
    `max_characters` cuts each document's text (the start-up check reads books this way).
    """

    def __init__(self, source: DataSource, tokenizer, config: DataConfig, shard_index: int, num_shards: int, stats: TextStats):
        self.source, self.tokenizer, self.config = source, tokenizer, config
        self.shard_index, self.num_shards, self.stats = shard_index, num_shards, stats
        self.epoch = 0
        self.documents_this_epoch = 0
        self.records_this_epoch = 0
        self.started_at = 0
        self.consumed: list[dict] = []
        self.streamed = streams_whole(source)
        self.ownership = "records" if self.streamed else "chunks"
        # A hub Parquet source reads one commit for the whole run (a resumed run: the checkpoint's).
        self.commit = hub_parquet(source).commit if source.is_hub and not self.streamed else None
        self._dataset = None
        self._records: Optional[Iterator[dict]] = None
        self._resume_from: Optional[dict] = None
        self._epoch_records = None  # local: this epoch's EpochRecords
        self._opened: dict = {}  # local: each file's index, kept across epochs
        self.layout = record_layout(source)
        self.max_characters: Optional[int] = None
        self.cut_documents = 0

    def state_dict(self) -> dict:
        dataset_state = None
        if self.streamed:
            dataset_state = self._dataset.state_dict() if self._records is not None else self._resume_from
        return dict(
            epoch=self.epoch,
            documents_this_epoch=self.documents_this_epoch,
            records_this_epoch=self.records_this_epoch,
            started_at=self.started_at,
            shard_index=self.shard_index,
            num_shards=self.num_shards,
            consumed=copy.deepcopy(self.consumed),
            ownership=self.ownership,
            dataset=copy.deepcopy(dataset_state),
            commit=self.commit,
        )

    def load_state_dict(self, state: dict) -> None:
        self.epoch = state["epoch"]
        self.documents_this_epoch = state["documents_this_epoch"]
        self.records_this_epoch = state["records_this_epoch"]
        self.started_at = state["started_at"]
        self.shard_index, self.num_shards = state["shard_index"], state["num_shards"]
        self.consumed = copy.deepcopy(state["consumed"])
        # A hub source a checkpoint streamed with `datasets` (written before hub Parquet files were
        # read by row group) finishes that epoch as a stream, then reads row groups.
        self.streamed = streams_whole(self.source) or (self.source.is_hub and state.get("dataset") is not None)
        # A state without the key predates chunks: its epoch continues by record.
        self.ownership = "records" if self.streamed else state.get("ownership", "records")
        if state.get("commit"):
            self.commit = state["commit"]
        # A chunked source's position is records_this_epoch alone; a hub stream resumes from `datasets`' state.
        self._resume_from = copy.deepcopy(state["dataset"]) if self.streamed else None
        self._dataset, self._records, self._epoch_records = None, None, None

    def _reader_error(self, error: Exception) -> DataError:
        detail = str(error) or f"the reader failed with {type(error).__name__}"
        return DataError(f"Data source {self.source.name!r} ({self.source.location}): {detail}")

    # --- which units are this shard's ---------------------------------------------------------

    def _chunk_of(self, unit: int, ownership: str) -> int:
        if ownership == "records":
            return unit
        return self._epoch_records.chunk_of(unit * self.layout.group)

    def _consumed_by_a_layer(self, unit: int) -> bool:
        return any(
            layer["epoch"] == self.epoch
            and unit < layer["cursors"][self._chunk_of(unit, layer.get("ownership", "records")) % layer["stride"]]
            for layer in self.consumed
        )

    def _next_owned_unit(self, unit: int) -> int:
        """The first unit at or after `unit` whose chunk is this shard's (local sources)."""
        chunk = self._chunk_of(unit, self.ownership)
        if chunk % self.num_shards == self.shard_index:
            return unit
        chunk += (self.shard_index - chunk) % self.num_shards
        if self.ownership == "records":
            return chunk
        starts = self._epoch_records.chunk_starts
        if chunk >= len(starts):
            return BEYOND
        return -(-int(starts[chunk]) // self.layout.group)  # the first unit starting in that chunk

    # --- reading --------------------------------------------------------------------------------

    def _next_epoch(self) -> None:
        whole_epoch = self.started_at == 0 and not any(layer["epoch"] == self.epoch for layer in self.consumed)
        if self.documents_this_epoch == 0 and whole_epoch:
            raise DataError(
                f"Data source {self.source.name!r} has no usable document for shard "
                f"{self.shard_index} of {self.num_shards} (data-parallel ranks x loader workers): "
                "it is empty or has fewer documents than shards; use fewer workers or more data."
            )
        self.consumed = [layer for layer in self.consumed if layer["epoch"] > self.epoch]
        self.epoch += 1
        self.documents_this_epoch = self.records_this_epoch = self.started_at = 0
        self.streamed = streams_whole(self.source)
        self.ownership = "records" if self.streamed else "chunks"
        self._records, self._epoch_records = None, None

    def _next_local_unit(self) -> Optional[tuple[int, list[dict]]]:
        """This shard's next unit of the epoch and its records, seeking past other shards' chunks."""
        if self._epoch_records is None:
            try:
                self._epoch_records = source_epoch(self.source, self.config.seed, self.epoch,
                                                   self.config.txt_documents, self._opened, self.commit)
            except DataError:
                raise
            except Exception as error:  # pyarrow on a damaged file, an I/O error
                raise self._reader_error(error) from None
        group = self.layout.group
        units = -(-self._epoch_records.total // group)
        unit = self.records_this_epoch
        while unit < units:
            owned = self._next_owned_unit(unit)
            if owned != unit:
                unit = owned
                continue
            self.records_this_epoch = unit + 1
            if self._consumed_by_a_layer(unit):
                unit += 1
                continue
            try:
                return unit, self._epoch_records.read(unit * group, (unit + 1) * group)
            except DataError:
                raise
            except Exception as error:  # a reader failing mid-file (corrupt row group, I/O error)
                raise self._reader_error(error) from None
        self.records_this_epoch = units
        return None

    def _open_hub(self) -> None:
        try:
            self._dataset = load_source(self.source)
            if self._resume_from is not None:
                self._dataset.load_state_dict(self._resume_from)
                self._resume_from = None
        except DataError:
            raise
        except Exception as error:
            raise self._reader_error(error) from None
        # `.iter(batch_size=1)` rather than `iter()`: inside a DataLoader worker, `datasets` would
        # otherwise split the shards among workers on its own, on top of our sharding.
        self._records = (
            {name: values[0] for name, values in batch.items()} for batch in self._dataset.iter(batch_size=1)
        )

    def _next_hub_unit(self) -> Optional[tuple[int, list[dict]]]:
        """This shard's next unit of the hub stream, read past every other shard's."""
        while True:
            if self._records is None:
                self._open_hub()
            unit = []
            try:
                while len(unit) < self.layout.group:
                    unit.append(next(self._records))
            except StopIteration:
                pass
            except DataError:
                raise
            except Exception as error:  # a reader failing mid-stream (an I/O or network error)
                raise self._reader_error(error) from None
            if not unit:
                return None
            index = self.records_this_epoch
            self.records_this_epoch += 1
            if index % self.num_shards == self.shard_index and not self._consumed_by_a_layer(index):
                return index, unit

    def _document(self, unit: list[dict], index: int) -> Document:
        first = index * self.layout.group
        texts = [record_text(record, self.source, first + k) for k, record in enumerate(unit)]
        text = clean_document("\n".join(texts), self.stats, self.layout.strips_licence)
        if self.max_characters is not None and len(text) > self.max_characters:
            text, self.cut_documents = text[: self.max_characters], self.cut_documents + 1
        sentences = split_sentences(text, self.stats, self.config.sentence_splitter, self.layout.paragraphs) if text else []
        return [ids for ids in self.tokenizer.encode_batch(sentences) if ids] if sentences else []

    def first_epoch_documents(self) -> Iterator[Document]:
        """This shard's documents up to the end of the current epoch, for reading a source once
        (the start-up check, the evaluation set); the document that would start the next epoch
        is read and dropped."""
        epoch = self.epoch
        while True:
            document = self.next_document()
            if self.epoch != epoch:
                return
            yield document

    def next_document(self) -> Document:
        """The next non-empty document of this shard as sentences of token ids; starts a new
        epoch at the end of the source."""
        while True:
            found = self._next_hub_unit() if self.streamed else self._next_local_unit()
            if found is None:
                self._next_epoch()
                continue
            index, unit = found
            document = self._document(unit, index)
            if document:
                self.documents_this_epoch += 1
                return document


def _occurrence_uid(*parts: int) -> int:
    digest = hashlib.blake2b(struct.pack(f"<{len(parts)}q", *parts), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


def furthest_below_share(shares: np.ndarray, tokens_drawn: np.ndarray, live: Optional[np.ndarray] = None) -> int:
    """The source furthest below its share of all tokens drawn so far (ties: lowest index), among
    the `live` ones when given: how sources mix in training, and in the held-out set."""
    deficit = shares * max(float(tokens_drawn.sum()), 1.0) - tokens_drawn
    return int(np.argmax(deficit if live is None else np.where(live, deficit, -np.inf)))


class ExampleStream:
    """Training examples for shard `shard_index` of `num_shards`, mixed from all sources.

    `generation` counts re-divisions (it keys block shuffles and example ids, so shards of two
    layouts never collide); `tails` are blocks of an earlier layout whose remaining examples
    this shard hands out first (data/reshard.py).
    """

    def __init__(self, sources: list[DataSource], tokenizer, config: DataConfig, shard_index: int = 0, num_shards: int = 1):
        self.sources, self.tokenizer = sources, tokenizer
        self.config, self.shard_index, self.num_shards = config, shard_index, num_shards
        self.stats = TextStats()
        self.readers = [SourceReader(s, tokenizer, config, shard_index, num_shards, self.stats) for s in sources]
        weights = np.array([s.weight for s in sources], dtype=np.float64)
        self.shares = weights / weights.sum()
        self.tokens_drawn = np.zeros(len(sources), dtype=np.int64)
        self.generation = 0
        self.block_index = 0
        self.examples_done = 0
        self.tails: list[dict] = []
        self._block_start: Optional[dict] = None
        self._block_end: Optional[dict] = None

    def _snapshot(self) -> dict:
        return dict(
            readers=[reader.state_dict() for reader in self.readers],
            tokens_drawn=self.tokens_drawn.tolist(),
            stats=self.stats.as_dict(),
        )

    def state_dict(self) -> dict:
        """Where the next unseen example is: the current block's start plus examples handed out
        (and where the block ended, which a re-division needs)."""
        return dict(
            block_start=copy.deepcopy(self._block_start or self._snapshot()),
            block_end=copy.deepcopy(self._block_end),
            block_index=self.block_index,
            examples_done=self.examples_done,
            shard_index=self.shard_index,
            num_shards=self.num_shards,
            generation=self.generation,
            tails=copy.deepcopy(self.tails),
        )

    def load_state_dict(self, state: dict) -> None:
        if (state["shard_index"], state["num_shards"]) != (self.shard_index, self.num_shards):
            raise DataError(
                f"Data-loader state is for shard {state['shard_index']} of {state['num_shards']}, "
                f"this stream is shard {self.shard_index} of {self.num_shards}."
            )
        start = state["block_start"]
        for reader, reader_state in zip(self.readers, start["readers"], strict=True):
            reader.load_state_dict(reader_state)
        self.tokens_drawn = np.array(start["tokens_drawn"], dtype=np.int64)
        self.stats.load_dict(start["stats"])
        self.block_index = state["block_index"]
        self.examples_done = state["examples_done"]
        self.generation = state["generation"]
        self.tails = copy.deepcopy(state["tails"])
        self._block_start = None
        self._block_end = copy.deepcopy(state["block_end"])  # until the block is read again

    def _next_source(self) -> int:
        return furthest_below_share(self.shares, self.tokens_drawn)

    def _read_block(self) -> list[Document]:
        documents, tokens = [], 0
        while len(documents) < self.config.block_documents and tokens < BLOCK_TOKEN_LIMIT:
            index = self._next_source()
            document = self.readers[index].next_document()
            size = sum(len(sentence) for sentence in document)
            self.tokens_drawn[index] += size
            tokens += size
            documents.append(document)
        return documents

    def _block_examples(self) -> Iterator[Example]:
        """The current block's examples from `examples_done` on."""
        config = self.config
        keys = [config.seed, self.generation, self.shard_index, self.num_shards, self.block_index]
        self._block_start = self._snapshot()
        documents = self._read_block()
        self._block_end = self._snapshot()
        rng = np.random.default_rng(keys)
        examples = build_examples(documents, config.objective, config.seq_length, config.short_seq_prob, rng)
        order = rng.permutation(len(examples))
        for k in range(self.examples_done, len(examples)):
            example = examples[order[k]]
            example.uid = _occurrence_uid(*keys, k)
            self.examples_done = k + 1
            yield example

    def _tail_examples(self) -> Iterator[Example]:
        """The rest of each inherited block, in the order its old shard would have handed it out."""
        while self.tails:
            state = self.tails[0]
            old = ExampleStream(self.sources, self.tokenizer, self.config, state["shard_index"], state["num_shards"])
            old.load_state_dict(state)
            for example in old._block_examples():
                self.tails[0] = old.state_dict()
                yield example
            self.tails.pop(0)

    def __iter__(self) -> Iterator[Example]:
        yield from self._tail_examples()
        while True:
            yield from self._block_examples()
            self.block_index += 1
            self.examples_done = 0
