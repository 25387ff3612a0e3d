"""Fuzz: random pre-training corpora and fine-tuning files through the readers (tests/support/fuzzing.py)."""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from bert_ds.config import ConfigError, DataConfig
from bert_ds.data.sources import DataError, parse_sources
from bert_ds.finetune.data.tasks import GLUE_TASKS, FinetuneDataError
from tests.support.fuzzing import _ARG_TEXT, _JSON, fuzz, mostly, outcome, quiet_argparse, time_limit  # noqa: F401


# --- pre-training corpora -------------------------------------------------------------------

_WORDS = ["the", "cat", "sat", "on", "a", "mat", "Paris", "river", "42", "quickly", "ünïcödé", "東京"]
_SENTENCE = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=12).map(lambda w: " ".join(w).capitalize() + ".")
_PIECE = st.one_of(
    _SENTENCE, _SENTENCE, st.text(max_size=30),
    st.sampled_from(["", " ", "\n", "\n\n", "\r\n", "\r", "\t", "\ufeff", "\x00", "\ufffd", "?!", '"', "\u2028"]),
    st.integers(2_500, 6_000).map(lambda n: "x" * n),  # a huge line without spaces
    st.integers(500, 1_500).map(lambda n: "word " * n),  # a huge line without punctuation
)
_DOCUMENT = st.lists(_PIECE, max_size=12).map("".join)
_TXT = st.one_of(
    _DOCUMENT.map(lambda t: t.encode()),
    _DOCUMENT.map(lambda t: ("\ufeff" + t).encode()),
    _DOCUMENT.map(lambda t: t.replace("\n", "\r\n").encode()),
    st.tuples(_DOCUMENT, st.binary(max_size=30), _DOCUMENT).map(lambda p: p[0].encode() + p[1] + p[2].encode()),
    st.binary(max_size=200),
    st.sampled_from([b"", b"   \n\t\r\n  ", b"\n" * 50, b"\xef\xbb\xbf", b"\x00" * 10, b"\xff\xfe\xfd"]),
)
_RECORD = st.fixed_dictionaries(
    {}, optional={"text": st.one_of(_DOCUMENT, _DOCUMENT, _JSON), "id": _JSON, "meta": _JSON}
)
_GOOD_RECORD = st.fixed_dictionaries({"text": _DOCUMENT}, optional={"id": st.integers(0, 9)})
_JSONL_LINE = mostly(
    st.one_of(_GOOD_RECORD.map(json.dumps), _GOOD_RECORD.map(lambda r: json.dumps(r, ensure_ascii=False))),
    st.one_of(
        _RECORD.map(json.dumps),
        _JSON.map(json.dumps),
        st.text(max_size=20),  # mostly invalid JSON
        st.sampled_from(
            ["", "{}", '{"text": "\\ud800 lone surrogate. Yes."}', '{"text": null}', "{bad", "[1, 2]", "null"]
        ),
    ),
    times=8,
)
_JSONL = mostly(
    st.tuples(st.lists(_JSONL_LINE, min_size=1, max_size=6), st.sampled_from(["\n", "\r\n"]))
    .map(lambda lines_end: (lines_end[1].join(lines_end[0]) + lines_end[1]).encode()),
    st.one_of(
        st.lists(_JSONL_LINE, max_size=6).map(lambda lines: "\n".join(lines).encode()),
        st.binary(max_size=100),
        st.lists(_RECORD, max_size=3).map(lambda records: json.dumps(records).encode()),  # one JSON array
    ),
)
_BATCH_KEYS = {"input_ids", "token_type_ids", "attention_mask", "loss_mask", "labels", "example_uid"}


def _read_batches(files: dict[str, bytes], tokenizer, config: DataConfig) -> None:
    """Write `files` into a fresh folder and take a few batches from it (or a DataError, or a
    ConfigError for a bad seed)."""
    from bert_ds.data.loader import PretrainingLoader

    with tempfile.TemporaryDirectory() as folder:
        for name, content in files.items():
            (Path(folder) / name).write_bytes(content)
        location = folder if len(files) > 1 else str(Path(folder) / next(iter(files)))
        with time_limit(30, f"reading {sorted(files)}"):
            try:
                loader = PretrainingLoader(parse_sources([f"corpus={location}"]), tokenizer, config)
                batches = list(itertools.islice(iter(loader), 3))
            except (DataError, ConfigError) as error:
                event(type(error).__name__)
                return
    event("batches")
    assert len(batches) == 3
    for batch in batches:
        assert _BATCH_KEYS <= set(batch)
        assert tuple(batch["input_ids"].shape) == (config.micro_batch_size, config.seq_length)


_SMALL = DataConfig(seq_length=64, micro_batch_size=2, block_documents=4)
_DATA_CONFIG = st.builds(
    DataConfig, seq_length=st.just(64), micro_batch_size=st.just(2), block_documents=st.just(4),
    objective=st.sampled_from(["mlm_nsp", "mlm", "mlm_full_sentences", "ltr"]), txt_documents=st.sampled_from(["file", "blank_line"]),
    seed=mostly(st.integers(0, 3), st.sampled_from([-1, 2**63, 2**64])),
)


@fuzz(60)
@given(contents=st.lists(_TXT, min_size=1, max_size=3), config=_DATA_CONFIG)
@example(contents=[b"One. Two."], config=dataclasses.replace(_SMALL, seed=-1))  # was a ValueError from numpy
def test_txt_corpus(sample_tokenizer, contents, config):
    _read_batches({f"part{i}.txt": content for i, content in enumerate(contents)}, sample_tokenizer, config)


@fuzz(60)
@given(contents=st.lists(_JSONL, min_size=1, max_size=2), config=_DATA_CONFIG)
@example(contents=[b"null"], config=_SMALL)  # pyarrow segfault (the whole process died)
@example(contents=[b'{"text": "A b."}\n', b"  \r\nnull\n"], config=_SMALL)
@example(contents=[b'[null, {"text": "A b."}]'], config=_SMALL)  # the same through datasets' JSON-array path
@example(contents=[b""], config=_SMALL)  # RuntimeError: generator raised StopIteration
@example(contents=[b'{"text": "A b. C d."}\n', b"\n"], config=_SMALL)  # a cast error at some epochs only
@example(contents=[b'\n{"text": ""}\n{"text": []}'], config=_SMALL)  # ValueError from the reader's open
def test_jsonl_corpus(sample_tokenizer, contents, config):
    _read_batches({f"part{i}.jsonl": content for i, content in enumerate(contents)}, sample_tokenizer, config)


@pytest.mark.parametrize("content", [b"", b" \n\t\r\n \n", b"\xef\xbb\xbf\n\n", b"\xff\xfe"], ids=repr)
def test_empty_corpus_is_a_data_error_not_a_hang(sample_tokenizer, tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    from bert_ds.data.loader import PretrainingLoader

    loader = PretrainingLoader(parse_sources([f"corpus={path}"]), sample_tokenizer, _SMALL)
    with time_limit(30, "an empty corpus"), pytest.raises(DataError, match="no usable document"):
        next(iter(loader))


_SPECS = st.sampled_from(["sample", "a=x@nan", "a=x@inf", "x@-1", "=@", "hf:a:b", "a=b=c@1e400"])


@fuzz(150)
@given(specs=st.lists(st.one_of(_ARG_TEXT, _SPECS), max_size=3))
@example(specs=["a=x@nan"])  # was accepted: nan token shares
def test_data_source_specs(specs):
    sources = outcome(lambda: parse_sources(specs), DataError)
    if sources is not None:
        assert all(math.isfinite(s.weight) and s.weight > 0 and s.location for s in sources)


# --- fine-tuning files ----------------------------------------------------------------------

_CELL = st.one_of(
    st.sampled_from(_WORDS).map(str),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n"), max_size=15),
    st.sampled_from(["", '"', "'", "\r", "0", "1", "-1", "2", "nan", "inf", "5.0", "1e400", "entailment", "\x00"]),
)


def examples_or_error(load) -> list:
    """The examples `load()` returns (its report must count them), or none after a FinetuneDataError."""
    loaded = outcome(load, FinetuneDataError)
    event(f"examples read: {loaded is not None and bool(loaded[0])}")
    if loaded is None:
        return []
    examples, report = loaded
    assert report.rows == len(examples)
    return examples


def _glue_lines(task, split: str):
    is_test = split in task.test_splits
    if task.headerless_columns and not is_test:
        columns = list(task.headerless_columns)
        header = st.just([])
    else:
        columns = ["index"] + list(task.text_columns) + ([] if is_test else [task.label_column])
        header = mostly(st.permutations(columns), st.lists(st.sampled_from(columns + ["extra"]), max_size=5))
        header = header.map(lambda names: ["\t".join(names)])
    label = mostly(st.sampled_from(list(task.labels or ("0.5", "3", "-1.25", " 2 "))), _CELL, times=20)
    row = st.lists(st.one_of(_CELL, label), min_size=len(columns) - 1, max_size=len(columns) + 1).map("\t".join)
    good_row = st.tuples(*[label if name == task.label_column else _CELL for name in columns]).map("\t".join)
    rows = st.lists(mostly(good_row, row, times=10), min_size=1, max_size=8)
    return st.tuples(header, rows).map(lambda hr: hr[0] + hr[1])


@st.composite
def glue_files(draw):
    task = GLUE_TASKS[draw(st.sampled_from(["cola", "sst2", "mrpc", "stsb", "mnli"]))]
    split = draw(st.sampled_from(task.splits))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join(draw(_glue_lines(task, split))) + draw(st.sampled_from(["", newline]))
    content = draw(
        mostly(
            st.one_of(st.just(text.encode()), st.just(("\ufeff" + text).encode())),
            st.one_of(st.binary(max_size=60), st.tuples(st.just(text.encode()), st.binary(max_size=8)).map(b"".join)),
        )
    )
    return task, split, content


@fuzz(250)
@given(case=glue_files())
def test_glue_file(tmp_path, case):
    from bert_ds.finetune.data.glue import load_glue

    task, split, content = case
    path = tmp_path / task.folder / f"{split}.tsv"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    for example in examples_or_error(lambda: load_glue(task, split, str(tmp_path))):
        assert isinstance(example.guid, str) and isinstance(example.text_a, str)
        if split in task.test_splits:
            assert example.label is None
        elif task.is_regression:
            assert math.isfinite(example.label)
        else:
            assert 0 <= example.label < len(task.labels)


_MISSING = object()


def _maybe(draw, value, wrong=_JSON):
    """`value`, or (rarely) a wrong-typed value or nothing (the key is dropped)."""
    return draw(mostly(st.just(value), st.one_of(wrong, st.just(_MISSING)), times=30))


def _obj(**fields):
    return {k: v for k, v in fields.items() if v is not _MISSING}


@st.composite
def squad_documents(draw):
    articles = []
    for a in range(draw(mostly(st.integers(1, 2), st.just(0)))):
        paragraphs = []
        for p in range(draw(mostly(st.integers(1, 2), st.just(0)))):
            context = draw(st.one_of(_DOCUMENT.filter(bool), st.text(max_size=30)))
            qas = []
            for q in range(draw(mostly(st.integers(1, 3), st.just(0)))):
                answers = []
                for _ in range(draw(st.integers(0, 2))):
                    start = draw(st.integers(0, max(len(context) - 1, 0)))
                    end = draw(st.integers(start, len(context)))
                    wrong = st.one_of(st.integers(-3, len(context) + 3), st.just(True), st.just(2**70), st.just(1.0))
                    offset = draw(mostly(st.just(start), wrong, times=20))
                    answers.append(_obj(text=_maybe(draw, context[start:end]), answer_start=_maybe(draw, offset)))
                consistent = st.just(True) if not answers else st.sampled_from([_MISSING, False])
                wrong = st.sampled_from([_MISSING, False, True, "false", 0, None])
                impossible = draw(mostly(consistent, wrong, times=20))
                qid = draw(mostly(st.just(f"q{a}-{p}-{q}"), st.one_of(st.just("dup"), _JSON), times=20))
                qas.append(_obj(id=_maybe(draw, qid), question=_maybe(draw, "Who?"), answers=_maybe(draw, answers),
                                is_impossible=impossible))
            paragraphs.append(_obj(context=_maybe(draw, context), qas=_maybe(draw, qas)))
        articles.append(_obj(title=_maybe(draw, f"T{a}"), paragraphs=_maybe(draw, paragraphs)))
    document = _obj(version="1.1", data=_maybe(draw, articles))
    return draw(
        mostly(
            st.one_of(
                st.just(json.dumps(document).encode()),
                st.just(json.dumps(document, ensure_ascii=False).encode("utf-8-sig")),
            ),
            st.one_of(
                st.binary(max_size=60), _JSON.map(lambda v: json.dumps(v).encode()),
                st.sampled_from(
                    [b"", b"[" * 100_000, b'{"data": NaN}', b"\xff{}", b'{"data": [{"paragraphs": "x"}]}']
                ),
            ),
        )
    )


_SQUAD_TRUE_OFFSET = {"data": [{"title": "T", "paragraphs": [{"context": "abc", "qas": [
    {"id": "q", "question": "Q?", "answers": [{"text": "b", "answer_start": True}]}]}]}]}


@fuzz(250)
@given(content=squad_documents(), version=st.sampled_from(["1.1", "2.0"]))
@example(content=b"[" * 100_000, version="1.1")  # was a RecursionError
@example(content=json.dumps(_SQUAD_TRUE_OFFSET).encode(), version="1.1")  # was accepted with offset True
def test_squad_file(tmp_path, content, version):
    from bert_ds.finetune.data.squad import load_squad

    (tmp_path / f"train-v{version}.json").write_bytes(content)
    examples = examples_or_error(lambda: load_squad("train", str(tmp_path), version))
    assert len({e.qid for e in examples}) == len(examples)
    for example in examples:
        assert all(isinstance(v, str) for v in (example.qid, example.question, example.context, example.title))
        assert bool(example.answer_texts) != example.is_impossible
        for text, start in zip(example.answer_texts, example.answer_starts, strict=True):
            assert isinstance(text, str) and type(start) is int
            assert example.context[start : start + len(text)] == text


_SWAG_HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
                "ending0", "ending1", "ending2", "ending3", "label"]


@st.composite
def swag_files(draw):
    split = draw(st.sampled_from(["train", "val", "dev", "test"]))
    header = draw(mostly(
        st.one_of(st.just(_SWAG_HEADER), st.permutations(_SWAG_HEADER)),
        st.one_of(st.just(_SWAG_HEADER[:-1]), st.lists(st.sampled_from(_SWAG_HEADER), max_size=6)),
    ))
    label = mostly(st.sampled_from(["0", "1", "2", "3"] + ([""] if split == "test" else [])),
                   st.one_of(st.sampled_from(["", "-1", "4", " 2 ", "x", "1.0"]), _CELL), times=20)
    good_row = st.tuples(*[label if name == "label" else _CELL for name in header]).map(list)
    row = st.lists(_CELL, min_size=max(len(header) - 1, 0), max_size=len(header) + 1)
    rows = draw(st.lists(mostly(good_row, row, times=20), min_size=1, max_size=6))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=draw(st.sampled_from(["\n", "\r\n"])))
    writer.writerow(header)
    writer.writerows(rows)
    text = out.getvalue()
    content = draw(
        mostly(
            st.one_of(st.just(text.encode()), st.just(text.encode("utf-8-sig"))),
            st.one_of(
                st.binary(max_size=60), st.tuples(st.just(text.encode()), st.binary(max_size=8)).map(b"".join),
                st.just(text.encode() + b'0,"unterminated'),
                st.just(text.encode() + b'0,"' + b"y" * 140_000 + b'"\n'),  # beyond csv's field size limit
            ),
        )
    )
    return split, content


@fuzz(250)
@given(case=swag_files())
@example(case=("train", b"\x80"))  # was a UnicodeDecodeError
@example(case=("train", b'a,"' + b"y" * 140_000 + b'"\n'))  # was csv.Error (field larger than field limit)
def test_swag_file(tmp_path, case):
    from bert_ds.finetune.data.swag import SWAG_FILES, load_swag

    split, content = case
    (tmp_path / SWAG_FILES[split]).write_bytes(content)
    for example in examples_or_error(lambda: load_swag(split, str(tmp_path))):
        assert all(isinstance(text, str) for text in (example.context, example.start, *example.endings))
        assert len(example.endings) == 4
        assert example.label in ((None, 0, 1, 2, 3) if split == "test" else (0, 1, 2, 3))


_PATHS = st.one_of(
    _ARG_TEXT, st.sampled_from(["", ".", "/", "a" * 300, "/" + "b" * 255 + "/x", "hf:", "glue_data\x00"]),
)


@fuzz(120)
@given(data=_PATHS, reader=st.sampled_from(["glue", "squad", "swag"]))
@example(data="a" * 300, reader="glue")  # was an OSError (file name too long), as for squad and swag
def test_finetune_data_locations(data, reader):
    """--data-dir / data paths that name nothing readable (too long, NUL bytes, ...) end as a
    FinetuneDataError naming the path; hub specs are not fetched here."""
    from bert_ds.finetune.data.glue import load_glue
    from bert_ds.finetune.data.squad import load_squad
    from bert_ds.finetune.data.swag import load_swag

    if data.startswith("hf:"):
        return
    load = {"glue": lambda: load_glue("sst2", "train", data), "squad": lambda: load_squad("train", data),
            "swag": lambda: load_swag("train", data)}[reader]
    outcome(load, FinetuneDataError)
