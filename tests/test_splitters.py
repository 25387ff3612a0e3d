"""Sentence splitters (bert_ds/data/text/splitters.py): the default gets right what the regex gets
wrong, no splitter ever loses text, and a bad name is refused clearly."""

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bert_ds.config import ConfigError, DataConfig
from bert_ds.data.text.splitters import DEFAULT_SPLITTER, SPLITTERS, get_splitter
from bert_ds.data.text.cleaning import TextStats, split_sentences

# Paragraphs the punctuation regex splits wrongly (abbreviations, initials, a lower-case start),
# with the sentences they hold. benchmarks/sentence_splitters.py has the full hard-case list.
REGEX_FAILS = [
    ("Mr. Smith went to Washington. He arrived on Monday.",
     ["Mr. Smith went to Washington.", "He arrived on Monday."]),
    ("Dr. Jones examined the patient. The results were normal.",
     ["Dr. Jones examined the patient.", "The results were normal."]),
    ("Bring fruit, e.g. Apples and Pears. Leave the rest.",
     ["Bring fruit, e.g. Apples and Pears.", "Leave the rest."]),
    ("The U.S. Army was founded in 1775. It is older than the country.",
     ["The U.S. Army was founded in 1775.", "It is older than the country."]),
    ("J. R. R. Tolkien wrote The Hobbit. It was published in 1937.",
     ["J. R. R. Tolkien wrote The Hobbit.", "It was published in 1937."]),
    ("The letter was signed by John F. Kennedy. It is now in a museum.",
     ["The letter was signed by John F. Kennedy.", "It is now in a museum."]),
    ("Compare Fig. 3 with Table 2. The trend is clear.", ["Compare Fig. 3 with Table 2.", "The trend is clear."]),
    ("the meeting ended early. everyone went home.", ["the meeting ended early.", "everyone went home."]),
]

# Paragraphs every splitter must split like this (the regex included).
EASY = [
    ("The cat sat on the mat. The dog slept by the fire.", ["The cat sat on the mat.", "The dog slept by the fire."]),
    ("Pi is roughly 3.14 in most cases. Engineers use 3.1416.", ["Pi is roughly 3.14 in most cases.", "Engineers use 3.1416."]),
    ("Where are you going? To the market! Come along.", ["Where are you going?", "To the market!", "Come along."]),
    ("A heading without punctuation", ["A heading without punctuation"]),
]

AWKWARD = [
    "...", ". . . .", "?!?!", "Wait... What?!... Yes.", '"Stop." He left.', "\u201cNot now,\u201d she said. \u201cLater.\u201d",
    "Caf\u00e9 na\u00efve. \u00dcber das \u00d6l? Ja.", "Emoji \U0001f600. Next \U0001f680 one! Done.", "(a) One. (b) Two.",
    "1. First. 2. Second.", "End with abbreviation etc.", "x." * 300, "Version 2.0.1 is out. Get it at example.com/v2.0.1.",
    "A" * 5000 + ". B.", "\u2026 leading ellipsis. Then text.", "Mixed\u00a0no-break space. Next.",
]


def _no_text_lost(paragraph, sentences):
    assert all(s and s == s.strip() for s in sentences), sentences
    assert "".join("".join(sentences).split()) == "".join(paragraph.split()), (paragraph, sentences)


def test_the_default_is_a_real_splitter():
    assert DEFAULT_SPLITTER in SPLITTERS and DEFAULT_SPLITTER != "regex"
    assert DataConfig().sentence_splitter == DEFAULT_SPLITTER
    assert "regex" in SPLITTERS


@pytest.mark.parametrize("paragraph, expected", REGEX_FAILS)
def test_default_splits_right_where_the_regex_fails(paragraph, expected):
    assert get_splitter("regex")(paragraph) != expected  # the case is a hard one
    assert get_splitter(DEFAULT_SPLITTER)(paragraph) == expected


@pytest.mark.parametrize("name", SPLITTERS)
def test_every_splitter_works_and_loses_no_text(name):
    split = get_splitter(name)
    for paragraph, expected in EASY:
        assert split(paragraph) == expected
    for paragraph in AWKWARD + [p for p, _ in REGEX_FAILS]:
        _no_text_lost(paragraph, split(paragraph))


@pytest.mark.parametrize("name", SPLITTERS)
def test_split_sentences_with_each_splitter(name):
    text = "Mr. Smith came home.\nHe was tired.\n\n\n  Dr. Jones\tcalled. \r\nNobody answered."
    sentences = split_sentences(text, TextStats(), splitter=name)
    assert "".join("".join(sentences).split()) == "".join(text.split())
    assert sentences[-1] == "Nobody answered."


_PIECES = st.sampled_from(["Mr.", "Dr.", "e.g.", "U.S.", "J.", "3.14", "v2.0.1", "...", "\u2026", "?", "!", "?!", '"', "'",
                           "(", ")", "[", "]", "\u201c", "\u201d", ".", ",", "the", "The", "word", "Word", "1.", "a", "\u00e9t\u00e9",
                           "\U0001f600", "-", ":", ";"])


@settings(max_examples=150, deadline=None)
@given(st.lists(_PIECES, min_size=1, max_size=40), st.lists(st.booleans(), min_size=40, max_size=40))
def test_default_never_loses_text_on_random_punctuation(pieces, spaces):
    paragraph = "".join(piece + (" " if space else "") for piece, space in zip(pieces, spaces)).strip()
    if paragraph:
        _no_text_lost(paragraph, get_splitter(DEFAULT_SPLITTER)(paragraph))


def test_unknown_name_names_the_choices():
    with pytest.raises(ValueError) as caught:
        get_splitter("nope")
    message = str(caught.value)
    assert "'nope'" in message and all(name in message for name in SPLITTERS)


def test_config_refuses_an_unknown_splitter():
    with pytest.raises(ConfigError, match="--sentence-splitter 'nope' must be one of regex, punkt"):
        DataConfig(sentence_splitter="nope").validate()
    DataConfig(sentence_splitter="regex").validate()


def test_the_library_is_imported_only_when_chosen():
    code = (
        "import sys, bert_ds.config, bert_ds.data.text.splitters as s\n"
        "assert 'punkt' not in sys.modules\n"
        "s.get_splitter('regex'); assert 'punkt' not in sys.modules\n"
        "s.get_splitter('punkt'); assert 'punkt' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
