"""Re-dividing the data stream among another number of shards: no document lost or repeated, the
blocks in progress finished exactly, and an unchanged shard count continues bit for bit."""

import itertools
import json

import pytest
import torch

from bert_ds.config import DataConfig
from bert_ds.data.loader import PretrainingLoader
from bert_ds.data.reshard import reshard_stream_states
from bert_ds.data.sources import parse_sources
from bert_ds.data.stream import ExampleStream, SourceReader

SIZES = {"books": 23, "wiki": 200}  # records per source; books are longer. Wiki: chunks of 4 records (data/records/index.py)


@pytest.fixture
def sources(tmp_path):
    specs = []
    for name, count in SIZES.items():
        sentences = 12 if name == "books" else 4
        path = tmp_path / f"{name}.jsonl"
        with path.open("w") as out:
            for i in range(count):
                text = " ".join(f"The {name} record {i} says thing {j} about item {i * j}." for j in range(sentences))
                out.write(json.dumps({"text": text}) + "\n")
        specs.append(f"{name}={path}")
    return parse_sources(specs)


@pytest.fixture
def taken(monkeypatch):
    """Every document a reader takes: (source, epoch, record index, shard, num_shards)."""
    log = []
    original = SourceReader.next_document

    def logged(self):
        document = original(self)
        log.append((self.source.name, self.epoch, self.records_this_epoch - 1, self.shard_index, self.num_shards))
        return document

    monkeypatch.setattr(SourceReader, "next_document", logged)
    return log


def _config():
    return DataConfig(seq_length=48, micro_batch_size=2, block_documents=4, seed=3)


def _uids(examples):
    return [example.uid for example in examples]


def _epoch0_records(log, shards):
    """Records of epoch 0 read by readers of a layout with `shards` shards, per source."""
    per_source = {name: [] for name in SIZES}
    for name, epoch, index, _, num_shards in log:
        if epoch == 0 and num_shards == shards:
            per_source[name].append(index)
    return per_source


def _run_until_next_epoch(stream, log, limit=4000):
    """Examples of `stream` until each of its readers has started epoch 1."""
    examples = []
    iterator = iter(stream)
    while not all(reader.epoch >= 1 for reader in stream.readers):
        examples.append(next(iterator))
        assert len(examples) < limit
    return examples


@pytest.mark.parametrize("layouts", [(2, 3), (2, 1), (1, 2), (3, 2, 1)], ids=["2to3", "2to1", "1to2", "3to2to1"])
def test_every_document_read_once_and_blocks_in_progress_finished(sources, sample_tokenizer, taken, layouts):
    config = _config()
    seen = []
    streams = [ExampleStream(sources, sample_tokenizer, config, k, layouts[0]) for k in range(layouts[0])]
    states, expected_tails = [], []
    for count, new_count in itertools.pairwise(layouts):
        states, expected_tails = [], []
        for k, stream in enumerate(streams):
            iterator = iter(stream)
            seen += _uids(itertools.islice(iterator, 5 + 7 * k))
            states.append(stream.state_dict())
            # What the old shard would have handed out next, up to the end of its block (not logged:
            # this look-ahead reads the next block too).
            mark = len(taken)
            rest = ExampleStream(sources, sample_tokenizer, config, k, count)
            rest.load_state_dict(states[-1])
            block = rest.block_index if not rest.tails else None
            tail = []
            for example in rest:
                if rest.tails == [] and rest.block_index != block:
                    break
                tail.append(example.uid)
            expected_tails.append(tail)
            del taken[mark:]
        new_states = reshard_stream_states(states, new_count)
        streams = []
        for k, state in enumerate(new_states):
            stream = ExampleStream(sources, sample_tokenizer, config, k, new_count)
            stream.load_state_dict(state)
            streams.append(stream)
    after = [_run_until_next_epoch(stream, taken) for stream in streams]

    # The last re-division's blocks in progress are finished exactly as their old shards would have.
    handed = [uid for examples in after for uid in _uids(examples)]
    assert any(expected_tails)
    for tail in expected_tails:
        assert set(tail) <= set(handed)
    # No example twice, across every layout.
    everything = seen + handed
    assert len(everything) == len(set(everything))
    # Every record of epoch 0 read by exactly one layout. (A tail is re-read by its old layout's
    # readers, so a layout's records are counted as a set; within a layout the shards' residue
    # classes are disjoint by construction.)
    for name, size in SIZES.items():
        per_layout = [set(_epoch0_records(taken, count)[name]) for count in layouts]
        assert set().union(*per_layout) == set(range(size)), name
        assert sum(len(records) for records in per_layout) == size, name


def test_same_shard_count_continues_bit_for_bit(sample_tokenizer, tmp_path):
    """DP=2 with one worker each -> DP=1 with two workers: the same two shards, unchanged."""
    config = dict(seq_length=64, micro_batch_size=2, block_documents=4, seed=5)
    from bert_ds.data.sources import sample_sources

    ranks = [PretrainingLoader(sample_sources(), sample_tokenizer, DataConfig(**config), r, 2) for r in range(2)]
    iterators = [iter(loader) for loader in ranks]
    for _ in range(3):
        for iterator in iterators:
            next(iterator)
    states = [loader.state_dict() for loader in ranks]
    continued = [[next(iterator) for _ in range(3)] for iterator in iterators]

    merged = PretrainingLoader(sample_sources(), sample_tokenizer, DataConfig(**config, num_workers=2), 0, 1)
    merged.load_redistributed_state(states)
    batches = list(itertools.islice(iter(merged), 6))
    interleaved = [continued[r][i] for i in range(3) for r in range(2)]
    for got, want in zip(batches, interleaved, strict=True):
        assert torch.equal(got["input_ids"], want["input_ids"]) and torch.equal(got["example_uid"], want["example_uid"])
