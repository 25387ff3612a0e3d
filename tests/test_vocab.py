"""Google's own vocabularies, built in: names, the casing rule on both real files, the override,
and the [UNK] check that makes a wrong tokenizer impossible to miss."""

import hashlib
import re
import shutil
import subprocess
import sys

import pytest

from bert_ds.data.sources import parse_sources
from bert_ds.data.tokenizer.load import SentencePieceTokenizer, TokenizerError, WordPieceTokenizer, load_tokenizer
from bert_ds.data.tokenizer.vocab_check import UNK_WARNING_SHARE, sample_source
from bert_ds.data.tokenizer.wordpiece import BUILTIN_VOCABS, VOCAB_DIR, infer_lowercase
from tests.support.helpers import REPO


@pytest.fixture(params=sorted(BUILTIN_VOCABS))
def plain_vocab_file(request, tmp_path):
    """A bundled vocabulary as Google's release folders hold it: vocab.txt, no tokenizer_config.json."""
    target = tmp_path / request.param / "vocab.txt"
    target.parent.mkdir()
    shutil.copy(VOCAB_DIR / f"{request.param}.txt", target)
    return request.param, target


def test_bundled_files_are_googles_unchanged():
    license_note = (VOCAB_DIR / "LICENSE.md").read_text()
    assert "Apache License 2.0" in license_note
    for name in BUILTIN_VOCABS:
        digest = hashlib.md5((VOCAB_DIR / f"{name}.txt").read_bytes()).hexdigest()
        assert re.search(rf"`{name}\.txt` \| [\d,]+ \| {digest} \|", license_note), name


def test_casing_is_inferred_right_for_both_real_vocabularies(plain_vocab_file):
    name, path = plain_vocab_file
    tokenizer = WordPieceTokenizer(path)  # no tokenizer_config.json beside it: inferred
    assert tokenizer.lowercase is BUILTIN_VOCABS[name]
    assert "inferred" in tokenizer.casing()
    uncased, changed, looked_at = infer_lowercase(tokenizer.ids_to_tokens(range(tokenizer.vocab_size)))
    if name == "bert-base-uncased":
        # It holds "ℝ" and "##ℝ": uppercase letters without a lowercase form, which fooled the old rule.
        assert {"ℝ", "##ℝ"} <= set(tokenizer.ids_to_tokens(range(tokenizer.vocab_size)))
        assert changed == 0
    else:
        assert changed > 0.2 * looked_at


@pytest.mark.parametrize("name, ids", [("bert-base-uncased", [7592, 2088]), ("bert-base-cased", [8667, 1362])])
def test_builtin_names_give_berts_ids(name, ids):
    tokenizer = load_tokenizer(name)
    assert tokenizer.encode_batch(["Hello world"]) == [ids]
    assert tokenizer.casing().startswith("uncased" if BUILTIN_VOCABS[name] else "cased")
    result = subprocess.run([sys.executable, "-m", "bert_ds.data.tokenizer", "encode", "--tokenizer", name, "Hello world"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0 and f"ids:     {ids}" in result.stdout


@pytest.mark.parametrize("name", sorted(BUILTIN_VOCABS))
def test_builtin_vocabularies_tokenize_like_googles_algorithm(name):
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    text = "Héllo, Wörld! The naïve café's CEO met 北京 reps at 9:30 — straße, Ωmega."
    ours = load_tokenizer(name).encode_batch([text])[0]
    reference = BertTokenizerLegacy(vocab_file=str(VOCAB_DIR / f"{name}.txt"), do_lower_case=BUILTIN_VOCABS[name])
    assert ours == reference(text, add_special_tokens=False)["input_ids"]
    assert len(ours) > 20


def test_explicit_casing_overrides_and_is_kept_when_saved(tmp_path):
    cased_reading = load_tokenizer("bert-base-uncased", lowercase=False)
    assert cased_reading.encode_batch(["Hello world"]) == [[cased_reading.unk_id, 2088]]
    assert cased_reading.casing() == "cased (--no-lowercase)"
    cased_reading.save(tmp_path / "tok")
    assert load_tokenizer(tmp_path / "tok").lowercase is False  # tokenizer_config.json travels with it
    assert load_tokenizer("bert-base-uncased").casing() == "uncased (built-in bert-base-uncased)"


def test_lowercase_is_refused_for_sentencepiece(sample_tokenizer, tmp_path):
    sample_tokenizer.save(tmp_path)
    assert isinstance(load_tokenizer(tmp_path / "tokenizer.model"), SentencePieceTokenizer)
    with pytest.raises(TokenizerError, match="apply to WordPiece vocabularies"):
        load_tokenizer(tmp_path / "tokenizer.model", lowercase=True)


def test_unknown_name_lists_the_builtin_ones():
    with pytest.raises(TokenizerError, match="'bert-base-uncasd' is neither an existing path nor a built-in name.*bert-base-cased"):
        load_tokenizer("bert-base-uncasd")


def test_unk_check_flags_a_wrongly_cased_reading():
    """On the built-in English sample (books and Wikipedia), BERT's uncased vocabulary leaves
    almost nothing unknown; read as cased, every capitalised word is [UNK] and the check warns."""
    books, wiki = parse_sources(["sample"])
    right, wrong = load_tokenizer("bert-base-uncased"), load_tokenizer("bert-base-uncased", lowercase=False)
    for source in (books, wiki):
        fine = sample_source(source, right, seed=1234)
        assert fine.documents >= 5 and fine.tokens > 10_000
        assert fine.unk_share < 0.001 and fine.warning() == ""
        corrupted = sample_source(source, wrong, seed=1234)
        assert corrupted.unk_share > 10 * UNK_WARNING_SHARE
        assert f"source {source.name!r} are [UNK]" in corrupted.warning()


@pytest.mark.parametrize("name", sorted(BUILTIN_VOCABS))
def test_exported_tokenizer_keeps_the_casing_for_auto_tokenizer(name, tmp_path):
    """What export-hf writes for a built-in vocabulary: AutoTokenizer reads the same casing back
    (the old inference wrote do_lower_case false for Google's uncased file)."""
    from transformers import AutoTokenizer

    from bert_ds.checkpoint.hf_export import _write_tokenizer

    ours = load_tokenizer(name)
    _write_tokenizer(ours, tmp_path, max_length=512)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path))
    assert theirs("Hello world", add_special_tokens=False)["input_ids"] == ours.encode_batch(["Hello world"])[0]
