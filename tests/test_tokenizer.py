"""Tokenizers: special ids where the data pipeline expects them, BERT normalisation that matches
Hugging Face's reference implementations, clear errors for bad inputs, and the CLI."""

import pickle
import random

import numpy as np
import pytest
import sentencepiece as spm

from bert_ds.data.tokenizer.load import (
    SPECIAL_TOKENS,
    SentencePieceTokenizer,
    TokenizerError,
    WordPieceTokenizer,
    load_tokenizer,
    main,
    train_sentencepiece,
)

WORDS = (
    "the of and to in is was for on that with as by at from his her their it an are were be this which "
    "or has had not but have they one all new first two after also who its more time year when there "
    "other people would into during only city world made over under between state house school early "
    "river music family history public water system north south church music small large great life "
    "several government national country team game season film book series village station company "
    "known called following became including although population number however played around later "
    "university member building written released published located developed produced returned "
    "children mountain island language history village century according example important different"
).split()


def make_corpus(n_bytes: int, seed: int = 0) -> str:
    """English-like paragraphs, one per line, from a fixed word list (deterministic)."""
    rng = random.Random(seed)
    paragraphs, size = [], 0
    while size < n_bytes:
        sentences = []
        for _ in range(rng.randint(2, 5)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(5, 16))]
            sentences.append(" ".join(words).capitalize() + rng.choice(".,;!?")[0])
        paragraphs.append(" ".join(sentences))
        size += len(paragraphs[-1]) + 1
    return "\n".join(paragraphs)


SENTENCE = "The river was called after the village, and several people returned."


@pytest.fixture(scope="module")
def spiece(tmp_path_factory) -> SentencePieceTokenizer:
    corpus = make_corpus(80_000)
    # Documents of a few paragraphs each, with blank lines that must be skipped.
    lines = corpus.split("\n")
    documents = ["\n\n".join(lines[i : i + 7]) + "\n   \n" for i in range(0, len(lines), 7)]
    return train_sentencepiece(documents, tmp_path_factory.mktemp("spm"), vocab_size=600)


def test_trained_sentencepiece_has_special_tokens_at_0_to_4(spiece):
    assert spiece.ids_to_tokens(range(5)) == list(SPECIAL_TOKENS)
    assert (spiece.pad_id, spiece.unk_id, spiece.cls_id, spiece.sep_id, spiece.mask_id) == (0, 1, 2, 3, 4)
    assert 200 < spiece.vocab_size <= 600
    assert spiece.special_ids.dtype == np.int64 and spiece.replacement_ids.dtype == np.int64
    np.testing.assert_array_equal(spiece.special_ids, np.arange(5))
    _check_id_sets(spiece)


def _check_id_sets(tokenizer):
    special, replacement = tokenizer.special_ids, tokenizer.replacement_ids
    assert np.all(np.diff(special) > 0) and np.all(np.diff(replacement) > 0)
    assert np.intersect1d(special, replacement).size == 0
    np.testing.assert_array_equal(np.union1d(special, replacement), np.arange(tokenizer.vocab_size))
    assert tokenizer.is_special.dtype == bool and tokenizer.is_special.shape == (tokenizer.vocab_size,)
    np.testing.assert_array_equal(np.flatnonzero(tokenizer.is_special), special)


def test_sentencepiece_round_trip_without_special_ids(spiece):
    # One line each: sentencepiece (like BERT) treats a newline as a space.
    texts = [SENTENCE, "", make_corpus(300, seed=7).replace("\n", " ")]
    batch = spiece.encode_batch(texts)
    assert len(batch) == 3 and batch[1] == []
    for text, ids in zip(texts, batch):
        assert all(isinstance(i, int) for i in ids)
        assert not spiece.is_special[ids].any(), spiece.ids_to_tokens(ids)
        assert spiece.decode(ids) == text
    assert spiece.encode_batch([]) == []


def test_literal_special_strings_in_text_are_not_special_ids(spiece):
    (ids,) = spiece.encode_batch(["the [MASK] of [CLS] and [SEP] [PAD]"])
    assert not {spiece.pad_id, spiece.cls_id, spiece.sep_id, spiece.mask_id} & set(ids)


def test_sentencepiece_decode_shows_special_tokens(spiece):
    (ids,) = spiece.encode_batch(["the river"])
    decoded = spiece.decode(np.array([spiece.cls_id, *ids, spiece.mask_id, spiece.sep_id]))
    assert decoded == "[CLS] the river [MASK] [SEP]"


def test_sentencepiece_save_load_and_pickle(spiece, tmp_path):
    spiece.save(tmp_path / "saved")
    for again in (load_tokenizer(tmp_path / "saved"), pickle.loads(pickle.dumps(spiece))):
        assert again.encode_batch([SENTENCE]) == spiece.encode_batch([SENTENCE])
        np.testing.assert_array_equal(again.special_ids, spiece.special_ids)


def test_sentencepiece_without_our_special_tokens_is_refused(tmp_path):
    corpus = make_corpus(20_000).split("\n")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_prefix=str(tmp_path / "plain"), vocab_size=200, minloglevel=2
    )
    with pytest.raises(TokenizerError, match=r"plain\.model.*found \['<unk>', '<s>', '</s>'"):
        SentencePieceTokenizer(tmp_path / "plain.model")
    with pytest.raises(TokenizerError, match="plain.model"):
        load_tokenizer(tmp_path)


def test_training_refuses_bad_inputs_and_propagates_source_errors(tmp_path):
    with pytest.raises(TokenizerError, match="Vocab size must exceed the 5 special tokens, got 5"):
        train_sentencepiece(["some text"], tmp_path, vocab_size=5)
    with pytest.raises(TokenizerError, match="No non-empty lines"):
        train_sentencepiece(["", "  \n\n "], tmp_path, vocab_size=100)

    def failing_source():
        yield make_corpus(5_000)
        raise FileNotFoundError("no such shard: x.jsonl")

    with pytest.raises(FileNotFoundError, match="no such shard"):
        train_sentencepiece(failing_source(), tmp_path, vocab_size=100)


def test_max_sentences_stops_reading_documents(tmp_path, capsys):
    def documents():
        yield from make_corpus(20_000).split("\n")
        raise AssertionError("read past the cap")

    tokenizer = train_sentencepiece(documents(), tmp_path, vocab_size=100, max_sentences=30)
    assert tokenizer.ids_to_tokens(range(5)) == list(SPECIAL_TOKENS)
    assert (tmp_path / "tokenizer.model").is_file() and (tmp_path / "tokenizer.vocab").is_file()
    assert "on 30 lines" in capsys.readouterr().err


# Google's layout: [PAD], reserved [unusedN], then [UNK] [CLS] [SEP] [MASK], then text tokens.
SPECIALS_GOOGLE = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused2]", "[EOS]"]
TEXT_TOKENS = (
    list("!\"(),-.:;?[]'") + list("0123456789abcdefghijklmnopqrstuvwxyz") + list("中文字")
    + ["the", "hello", "world", "cafe", "river", "village", "called", "naive", "un", "##believ", "##able",
       "##s", "##ed", "##ing", "play", "walk", "mask", "cls", "sep", "pad", "über", "resume"]
    + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
)
CASED_EXTRA = ["Hello", "World", "The", "Café", "River", "résumé", "H", "W", "C", "T", "R", "##é", "é", "É"]
PARITY_SENTENCES = [
    "Hello WORLD",
    "Café naïve résumé, ÜBER über!",
    "The river was called after the village; unbelievable walking plays.",
    "中文字 mixed with text 中文, and 123 numbers.",
    "tabs\tand\u00a0odd   spaces\x00with control\u200b chars",
    "supercalifragilisticexpialidocious " + "x" * 120,
    "Hello (world) \"quoted\" [bracketed] mask: cls-sep.",
]


def write_vocab(path, tokens):
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


@pytest.fixture
def uncased_vocab(tmp_path):
    return write_vocab(tmp_path / "vocab.txt", SPECIALS_GOOGLE + TEXT_TOKENS)


@pytest.fixture
def cased_vocab(tmp_path):
    (tmp_path / "cased").mkdir()
    return write_vocab(tmp_path / "cased" / "vocab.txt", SPECIALS_GOOGLE + TEXT_TOKENS + CASED_EXTRA)


def test_wordpiece_uncased_is_inferred_and_normalises(uncased_vocab):
    tok = WordPieceTokenizer(uncased_vocab)
    assert tok.lowercase is True and tok.vocab_size == len(SPECIALS_GOOGLE) + len(TEXT_TOKENS)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 3, 4, 5, 6)
    np.testing.assert_array_equal(tok.special_ids, np.arange(9))  # [unused0..2] and [EOS] included
    _check_id_sets(tok)
    assert not tok.is_special[[len(SPECIALS_GOOGLE) + TEXT_TOKENS.index(b) for b in "[]"]].any()
    ids = tok.encode_batch(["Hello WORLD", "Café", "unbelievable"])
    assert [tok.ids_to_tokens(i) for i in ids] == [["hello", "world"], ["cafe"], ["un", "##believ", "##able"]]
    assert tok.decode(ids[2]) == "unbelievable"
    assert tok.decode([tok.cls_id, *ids[0], tok.mask_id]) == "[CLS] hello world [MASK]"
    (literal,) = tok.encode_batch(["a [MASK] b [SEP]"])
    assert tok.mask_id not in literal and tok.sep_id not in literal


def test_wordpiece_cased_is_inferred_and_keeps_case(cased_vocab):
    tok = load_tokenizer(cased_vocab)
    assert isinstance(tok, WordPieceTokenizer) and tok.lowercase is False
    ids = tok.encode_batch(["Hello WORLD", "Café résumé"])
    assert tok.ids_to_tokens(ids[0])[0] == "Hello" and tok.unk_id not in ids[0][:1]
    assert tok.ids_to_tokens(ids[1]) == ["Café", "résumé"]


@pytest.mark.parametrize("cased", [False, True])
def test_wordpiece_matches_hugging_face(cased, uncased_vocab, cased_vocab):
    from transformers.models.bert.tokenization_bert import BertTokenizer, load_vocab
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    vocab_file = cased_vocab if cased else uncased_vocab
    ours = WordPieceTokenizer(vocab_file).encode_batch(PARITY_SENTENCES)
    # transformers 5 ignores `vocab_file=` on the fast class (it would silently use a 5-token vocab),
    # so the vocab goes in as a dict; the legacy class is Google's pure-Python algorithm.
    references = [
        BertTokenizer(vocab=load_vocab(str(vocab_file)), do_lower_case=not cased),
        BertTokenizerLegacy(vocab_file=str(vocab_file), do_lower_case=not cased),
    ]
    for reference in references:
        expected = [reference(s, add_special_tokens=False)["input_ids"] for s in PARITY_SENTENCES]
        assert ours == expected, type(reference).__name__
    assert sum(len(ids) for ids in ours) > 40


def test_wordpiece_missing_special_token_names_file(tmp_path):
    bad = write_vocab(tmp_path / "vocab.txt", [t for t in SPECIALS_GOOGLE if t != "[MASK]"] + TEXT_TOKENS)
    with pytest.raises(TokenizerError, match=r"vocab\.txt lacks the special tokens \['\[MASK\]'\]"):
        WordPieceTokenizer(bad)


def test_wordpiece_save_keeps_explicit_lowercase_and_pickles(uncased_vocab, tmp_path):
    tok = WordPieceTokenizer(uncased_vocab, lowercase=False)
    tok.save(tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved")
    assert again.lowercase is False and again.vocab_size == tok.vocab_size
    hello = len(SPECIALS_GOOGLE) + TEXT_TOKENS.index("hello")
    assert again.encode_batch(["Hello hello"]) == tok.encode_batch(["Hello hello"]) == [[tok.unk_id, hello]]
    assert pickle.loads(pickle.dumps(tok)).encode_batch(["hello"]) == tok.encode_batch(["hello"])


def test_load_tokenizer_paths(spiece, uncased_vocab, tmp_path):
    model = spiece.name.split(":", 1)[1]
    single = tmp_path / "single"
    single.mkdir()
    (single / "my.model").write_bytes(open(model, "rb").read())
    for path in (model, single, single / "my.model", model.rsplit("/", 1)[0]):
        assert isinstance(load_tokenizer(path), SentencePieceTokenizer), path
    for path in (uncased_vocab, uncased_vocab.parent):
        assert isinstance(load_tokenizer(path), WordPieceTokenizer), path

    missing = tmp_path / "nowhere" / "tok.model"
    with pytest.raises(TokenizerError, match=f"{missing} does not exist; expected a sentencepiece .model"):
        load_tokenizer(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerError, match="empty holds no tokenizer"):
        load_tokenizer(tmp_path / "empty")
    (tmp_path / "weird.json").write_text("{}")
    with pytest.raises(TokenizerError, match="weird.json is not recognised"):
        load_tokenizer(tmp_path / "weird.json")
    (tmp_path / "junk.model").write_text("not a model")
    with pytest.raises(TokenizerError, match="Cannot load sentencepiece model .*junk.model"):
        load_tokenizer(tmp_path / "junk.model")


def test_cli_train_then_encode(tmp_path, capsys):
    data = tmp_path / "corpus.txt"
    data.write_text(make_corpus(40_000, seed=3), encoding="utf-8")
    assert main(["train", "--data", str(data), "--vocab-size", "300", "--output", str(tmp_path / "tok")]) == 0
    tokenizer = load_tokenizer(tmp_path / "tok" / "tokenizer.model")
    assert tokenizer.ids_to_tokens(range(5)) == list(SPECIAL_TOKENS)
    capsys.readouterr()
    assert main(["encode", "--tokenizer", str(tmp_path / "tok"), SENTENCE]) == 0
    out = capsys.readouterr().out
    assert f"ids:     {tokenizer.encode_batch([SENTENCE])[0]}" in out and f"decoded: {SENTENCE}" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--data", "{tmp}/missing.txt", "--vocab-size", "300", "--output", "{tmp}/o"], "missing.txt"),
        (["train", "--data", "{tmp}/c.txt", "--vocab-size", "5", "--output", "{tmp}/o"], "Vocab size must exceed"),
        (["encode", "--tokenizer", "{tmp}/nothing", "hello"], "nothing does not exist"),
    ],
)
def test_cli_user_errors_are_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "c.txt").write_text("some text\n")
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err
