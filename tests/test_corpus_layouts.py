"""Real corpus schemas -> documents (data/text/layouts.py): the hub's BookCorpus (one sentence per
record), the hub's Wikipedia (id, url, title, text), Google's create_pretraining_data.py input,
plain text files; fixtures in tests/fixtures/corpus/ in their exact shapes."""

import json
from pathlib import Path

import pytest

from bert_ds.config import DataConfig
from bert_ds.data.sources import DataError, parse_sources, record_layout
from bert_ds.data.stream import ExampleStream, SourceReader
from bert_ds.data.text.cleaning import TextStats

FIXTURES = Path(__file__).parent / "fixtures" / "corpus"
BOOK = Path(__file__).parent.parent / "bert_ds" / "data" / "sample" / "books" / "austen-persuasion.txt"


@pytest.fixture(scope="module")
def bookcorpus_records(tmp_path_factory):
    """A book as the hub's BookCorpus holds it: one `text` record per sentence, in order, no book id."""
    from bert_ds.data.text.cleaning import split_sentences

    sentences = split_sentences(BOOK.read_text(encoding="utf-8"), TextStats())[:3000]
    path = tmp_path_factory.mktemp("bookcorpus") / "bookcorpus.jsonl"
    path.write_text("".join(json.dumps({"text": sentence}) + "\n" for sentence in sentences))
    return path, sentences


def _documents(spec, tokenizer):
    return list(SourceReader(parse_sources([spec])[0], tokenizer, DataConfig(), 0, 1, TextStats()).first_epoch_documents())


def _examples(spec, tokenizer, count=300):
    stream = iter(ExampleStream(parse_sources([spec]), tokenizer, DataConfig(seq_length=128, block_documents=8)))
    return [next(stream) for _ in range(count)]


def _real_tokens(example) -> int:
    return len(example.tokens_a) + len(example.tokens_b) + 3


def test_bookcorpus_runs_of_sentences_give_real_continuations_and_full_sequences(bookcorpus_records, sample_tokenizer):
    path, sentences = bookcorpus_records
    # Read as one document per record (the mistake): NSP pairs are pieces of one sentence, sequences short.
    ungrouped = _examples(f"books={path}#article", sample_tokenizer)
    grouped = _examples(f"books={path}#sentences:256", sample_tokenizer)
    mean = lambda examples: sum(map(_real_tokens, examples)) / len(examples)  # noqa: E731
    assert mean(ungrouped) < 80, mean(ungrouped)
    assert mean(grouped) > 110, mean(grouped)  # 128 but for the paper's 10% of shorter targets

    # Every IsNext pair is consecutive text of one run of 256 records: A, then B right after it
    # (truncation trims a long pair at its segments' ends: the gap), both inside the run.
    ids = [sample_tokenizer.encode_batch([s])[0] for s in sentences]
    stream, starts, run_of = [], [], []
    for index, sentence in enumerate(ids):
        starts.append(len(stream))
        stream += sentence
        run_of += [index // 256] * len(sentence)
    text = " " + " ".join(map(str, stream)) + " "

    def occurrences(tokens):
        needle, at = " " + " ".join(map(str, tokens)) + " ", -1
        while (at := text.find(needle, at + 1)) >= 0:
            yield text.count(" ", 0, at)

    is_next = [e for e in grouped if e.is_random_next == 0]
    assert len(is_next) > 100
    for example in is_next:
        # A short segment ("Oh!") occurs many times in a book: some occurrence of A must be followed
        # by B within the truncation gap, inside one run.
        follows = [(a, b) for a in occurrences(example.tokens_a) for b in occurrences(example.tokens_b)
                   if 0 <= b - (a + len(example.tokens_a)) < 512 and run_of[a] == run_of[b + len(example.tokens_b) - 1]]
        assert follows, ("no A followed by B inside one run", list(occurrences(example.tokens_a))[:5],
                         list(occurrences(example.tokens_b))[:5])

def test_hub_bookcorpus_reads_as_runs_of_sentences_by_default():
    assert str(record_layout(parse_sources(["hf:bookcorpus/bookcorpus"])[0])) == "sentences:256"
    assert str(record_layout(parse_sources(["hf:rojagtap/bookcorpus@800"])[0])) == "sentences:256"
    assert str(record_layout(parse_sources(["hf:wikimedia/wikipedia:20231101.en"])[0])) == "article"
    assert str(record_layout(parse_sources(["hf:bookcorpus/bookcorpus#sentences:64"])[0])) == "sentences:64"
    source = parse_sources([f"books={FIXTURES}/google_pretraining_input.txt@800#lines"])[0]
    assert (source.name, source.weight, str(record_layout(source))) == ("books", 800.0, "lines")


def test_wikipedia_hub_records_headings_are_sentences_of_their_own(sample_tokenizer):
    documents = _documents(f"wiki={FIXTURES}/wikipedia_hub.jsonl", sample_tokenizer)
    assert len(documents) == 3  # one per article; id, url and title are not text
    first = [sample_tokenizer.decode(sentence) for sentence in documents[0]]
    assert first[:4] == ["A lighthouse is a tower that emits light to guide ships.",
                         "It marks dangerous coastlines and safe entries to harbours.", "History",
                         "Ancient lighthouses burned wood or coal on an open fire."]
    # A single line break ends a paragraph too (it is no hard wrap in Wikipedia's text).
    assert "Later towers used oil lamps with polished reflectors." in first
    assert "Modern lighthouses" in first
    last = [sample_tokenizer.decode(sentence) for sentence in documents[2]]
    assert last[-3:] == ["See also", "Port", "Marina"]
    # The book layout (single line breaks are hard wraps) would join the list into one "sentence".
    as_book = _documents(f"wiki={FIXTURES}/wikipedia_hub.jsonl#book", sample_tokenizer)
    assert sample_tokenizer.decode(as_book[2][-1]) == "Port Marina"


def test_google_pretraining_input_one_sentence_per_line(sample_tokenizer):
    documents = _documents(f"{FIXTURES}/google_pretraining_input.txt#lines", sample_tokenizer)
    assert [len(document) for document in documents] == [3, 2, 4]
    # Lines are taken as the sentences they are: "Mr. Hale" and "e.g. near" stay whole.
    assert sample_tokenizer.decode(documents[0][1]) == "Mr. Hale gave the first tour."
    assert sample_tokenizer.decode(documents[1][1]) == "The river rose by two metres, e.g. near the mill."


def test_plain_text_files_are_one_document_each(tmp_path, sample_tokenizer):
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text(f"Story {name} begins here.\nIt is wrapped\nat short lines.\n\nA second paragraph.\n")
    documents = _documents(f"{tmp_path}/*.txt", sample_tokenizer)
    assert len(documents) == 2 and [len(d) for d in documents] == [3, 3]  # hard-wrapped lines joined


@pytest.mark.parametrize("spec, message", [
    ("books=x.jsonl#nope", "unknown layout 'nope'; choose one of book, article, sentences[:N], lines"),
    ("books=x.jsonl#sentences:0", "the record count must be at least 1"),
    ("books=x.jsonl#sentences:ten", "the record count 'ten' is not a whole number"),
    ("books=x.jsonl@2#book:3", "layout 'book' takes no record count"),
])
def test_bad_layout_is_named(spec, message):
    with pytest.raises(DataError, match="Data source") as error:
        parse_sources([spec])
    assert message in str(error.value) and spec in str(error.value)


def test_start_up_check_warns_about_one_sentence_documents(bookcorpus_records, sample_tokenizer):
    from bert_ds.data.tokenizer.vocab_check import sample_source

    path, _ = bookcorpus_records
    wrong = sample_source(parse_sources([f"books={path}#article"])[0], sample_tokenizer, seed=1234)
    assert wrong.documents == 64 and wrong.sentences < 2 * 64 and "#sentences:256" in wrong.warning()
    right = sample_source(parse_sources([f"books={path}#sentences:256"])[0], sample_tokenizer, seed=1234)
    assert right.documents == 12 and right.warning() == ""  # 3,000 records in runs of 256
    assert right.cut_documents == 12 and right.sentences < 3000  # each read to SAMPLE_CHARACTERS only
    assert right.describe().startswith("books (layout sentences:256): 12 documents, ")
    assert "12 read to 10,000 characters only" in right.describe()


def test_grouped_source_resumes_exactly_and_shards_by_run(bookcorpus_records, sample_tokenizer):
    from bert_ds.data.loader import PretrainingLoader

    path, _ = bookcorpus_records
    sources = parse_sources([f"books={path}#sentences:100"])
    config = DataConfig(seq_length=64, micro_batch_size=4, block_documents=4)
    loader = PretrainingLoader(sources, sample_tokenizer, config)
    batches = iter(loader)
    for _ in range(7):
        next(batches)
    state = loader.state_dict()
    expected = [next(batches)["example_uid"].tolist() for _ in range(5)]
    resumed = PretrainingLoader(sources, sample_tokenizer, config)
    resumed.load_state_dict(state)
    assert [batch["example_uid"].tolist() for batch, _ in zip(resumed, range(5))] == expected

    shards = [SourceReader(sources[0], sample_tokenizer, config, rank, 2, TextStats()) for rank in range(2)]
    first = [shard.next_document()[0] for shard in shards]  # rank 0 starts with run 0, rank 1 with run 1
    whole = SourceReader(sources[0], sample_tokenizer, config, 0, 1, TextStats())
    runs = [whole.next_document()[0] for _ in range(2)]
    assert first == runs
