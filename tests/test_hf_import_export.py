"""Hugging Face folders <-> portable bert_ds checkpoints: import_hf, export_hf and their CLI.

Every HF model here is randomly initialised from a small BertConfig (no download).
"""

import json
import shutil
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertModel,
    BertTokenizer,
)

from bert_ds.checkpoint.__main__ import main
from bert_ds.checkpoint.hf_export import export_hf
from bert_ds.checkpoint.hf_import import import_hf
from bert_ds.checkpoint.hf_weights import HEADS, TIED, hf_to_bert_ds, model_config_from_hf
from bert_ds.checkpoint.portable import open_portable, write_portable
from bert_ds.checkpoint.portable_load import load_portable_weights
from bert_ds.checkpoint.zero import CheckpointError
from bert_ds.data.tokenizer.load import SPECIAL_TOKENS, WordPieceTokenizer
from bert_ds.model import build_model
from bert_ds.model.init import initial_full_tensor
from tests.support.helpers import REPO, run_on_ranks, synthetic_batch

TOKENS = list(SPECIAL_TOKENS) + [f"tok{i}" for i in range(91)]  # 96 lines: the HF vocab_size
VOCAB = len(TOKENS)
PADDED_VOCAB = 128  # what a run padding the vocabulary for TP holds
NO_DROPOUT = dict(hidden_dropout=0.0, attention_dropout=0.0)


def _hf_config(**changes) -> BertConfig:
    settings = dict(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
        hidden_act="gelu", attn_implementation="eager",
    )
    return BertConfig(**{**settings, **changes})


def _save_hf(model, folder, weights="safetensors"):
    """An HF folder as save_pretrained writes it (or with a pytorch_model.bin), plus vocab.txt."""
    model.save_pretrained(folder)
    if weights == "bin":  # an older HF layout: pickle, tied decoder included, position_ids buffer saved
        (folder / "model.safetensors").unlink()
        state = dict(model.state_dict(), **{"bert.embeddings.position_ids": torch.arange(512)[None]})
        torch.save(state, folder / "pytorch_model.bin")
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in TOKENS))
    return folder


def _tokenizer(checkpoint):
    return WordPieceTokenizer(checkpoint.tokenizer_dir / "vocab.txt")


def _seeded(cls, config, seed=0):
    torch.manual_seed(seed)
    return cls(config).eval()


@pytest.fixture(scope="module")
def hf_model():
    return _seeded(BertForPreTraining, _hf_config())


@pytest.fixture(scope="module")
def hf_folder(hf_model, tmp_path_factory):
    return _save_hf(hf_model, tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def imported(hf_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("imported")
    report = import_hf(hf_folder, out)
    return report, open_portable(out)


def _forward(model, batch):
    return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["attention_mask"].bool())


def _hf_forward(model, batch):
    with torch.no_grad():
        return model(
            input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"]
        )


def _assert_loads_cleanly(cls, folder):
    model, info = cls.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


# ---------------------------------------------------------------- import


@pytest.mark.parametrize("variant", ["safetensors", "bin", "fp16"])
def test_hf_to_bert_ds_to_hf_round_trip_is_exact(hf_model, variant, tmp_path):
    source = hf_model if variant != "fp16" else _seeded(BertForPreTraining, _hf_config()).half()
    folder = _save_hf(source, tmp_path / "hf", weights="bin" if variant == "bin" else "safetensors")
    report = import_hf(folder, tmp_path / "portable")
    assert report.initialised == [] and report.architecture == "BertForPreTraining"
    dtypes = ["float16" if variant == "fp16" else "float32"] + (["int64"] if variant == "bin" else [])  # + buffer
    assert report.source_dtypes == dtypes
    assert report.ignored_buffers == (["bert.embeddings.position_ids"] if variant == "bin" else [])
    assert all(t.dtype == torch.float32 for t in open_portable(tmp_path / "portable").read_weights().values())

    out = export_hf(open_portable(tmp_path / "portable"), tmp_path / "back")
    exported = load_file(out / "model.safetensors")
    original = {n: t for n, t in source.state_dict().items() if n not in TIED}
    assert set(exported) == set(original)
    for name, tensor in original.items():
        assert torch.equal(exported[name], tensor.float()), name
    assert model_config_from_hf(BertConfig.from_pretrained(out)) == report.model_config


def test_logits_match_after_import_at_tp1(layout, hf_model, imported):
    _, checkpoint = imported
    model = build_model(checkpoint.model_config.replace(**NO_DROPOUT), layout).eval()
    load_portable_weights(model, checkpoint, tp_rank=0, tp_size=1)
    batch = synthetic_batch(VOCAB, batch=4, seq=24, seed=7)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = _forward(model, batch)
    theirs = _hf_forward(hf_model, batch)
    torch.testing.assert_close(ours.mlm_logits, theirs.prediction_logits[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.nsp_logits, theirs.seq_relationship_logits, atol=1e-4, rtol=1e-4)


def _tp2_worker(rank, portable, out_dir):
    from bert_ds.runtime.distributed import init_parallel

    checkpoint = open_portable(portable)
    config = checkpoint.model_config.replace(vocab_size=PADDED_VOCAB, **NO_DROPOUT)
    layout = init_parallel(config, tensor_parallel=2, seed=5)
    model = build_model(config, layout).eval()
    report = load_portable_weights(model, checkpoint, layout.tp_rank, 2)
    with torch.no_grad():
        out = _forward(model, synthetic_batch(VOCAB, batch=4, seq=24, seed=7))
    pieces = [torch.empty_like(out.mlm_logits) for _ in range(2)]
    dist.all_gather(pieces, out.mlm_logits, group=layout.tp_group)
    if rank == 0:
        result = dict(mlm=torch.cat(pieces, dim=-1), nsp=out.nsp_logits, padded=report.padded_vocab)
        torch.save(result, f"{out_dir}/tp2.pt")


def test_logits_match_after_import_at_tp2_with_padded_vocab(hf_model, imported, tmp_path):
    _, checkpoint = imported
    run_on_ranks(_tp2_worker, 2, str(checkpoint.path), str(tmp_path))
    ours = torch.load(tmp_path / "tp2.pt")
    assert ours["padded"] == (VOCAB, PADDED_VOCAB)
    batch = synthetic_batch(VOCAB, batch=4, seq=24, seed=7)
    theirs = _hf_forward(hf_model, batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours["mlm"][:, :VOCAB], theirs.prediction_logits[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours["nsp"], theirs.seq_relationship_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "cls, architecture, absent",
    [(BertModel, "BertModel", ("mlm", "nsp")), (BertForMaskedLM, "BertForMaskedLM", ("pooler", "nsp"))],
)
def test_missing_heads_are_initialised_and_reported(layout, cls, architecture, absent, tmp_path):
    source = _seeded(cls, _hf_config())
    folder = _save_hf(source, tmp_path / "hf")
    if cls is BertModel:  # a bare BertModel saves its names without the "bert." prefix
        assert "embeddings.word_embeddings.weight" in load_file(folder / "model.safetensors")
    report = import_hf(folder, tmp_path / "a", seed=3)
    expected = sorted(name for head in absent for name in HEADS[head].values())
    assert report.architecture == architecture and sorted(report.initialised) == expected

    checkpoint = open_portable(tmp_path / "a")
    weights = checkpoint.read_weights()
    std = report.model_config.init_method_std
    for name in expected:
        assert torch.equal(weights[name], initial_full_tensor(name, weights[name].shape, std, seed=3)), name
    assert weights["nsp_head.weight"].std().item() == pytest.approx(std, rel=0.3)
    assert not weights["nsp_head.bias"].any()
    # What the source has is taken as it is: the encoder (and the MLM head of BertForMaskedLM).
    hf = {name if name.startswith(("bert.", "cls.")) else f"bert.{name}": t for name, t in source.state_dict().items()}
    present = tuple(h for h in ("pooler", "mlm", "nsp") if h not in absent)
    for name, tensor in hf_to_bert_ds(hf, report.model_config, heads=present).items():
        assert torch.equal(weights[name], tensor), name
    # Another seed draws other heads; the model loads with nothing missing.
    import_hf(folder, tmp_path / "b", seed=4)
    assert not torch.equal(open_portable(tmp_path / "b").read_weights()["nsp_head.weight"], weights["nsp_head.weight"])
    model = build_model(report.model_config, layout)
    assert load_portable_weights(model, checkpoint, 0, 1).missing == []


# ---------------------------------------------------------------- export


def test_export_strips_vocab_padding_and_loads_in_transformers(layout, hf_model, imported, tmp_path):
    _, checkpoint = imported
    weights = checkpoint.read_weights()
    gen = torch.Generator().manual_seed(1)
    for name in ("bert.embeddings.word_embeddings.weight", "lm_head.decoder.bias"):  # padding rows, not zero here
        extra = torch.randn(PADDED_VOCAB - VOCAB, *weights[name].shape[1:], generator=gen)
        weights[name] = torch.cat([weights[name], extra])
    config = checkpoint.model_config.replace(vocab_size=PADDED_VOCAB)
    tokenizer = _tokenizer(checkpoint)
    padded = open_portable(write_portable(tmp_path / "padded", config, weights, tokenizer=tokenizer))

    notes = []
    out = export_hf(padded, tmp_path / "hf", notes)
    assert any("32 vocabulary padding rows" in note for note in notes)
    exported = _assert_loads_cleanly(BertForPreTraining, out)
    assert exported.config.vocab_size == VOCAB and exported.config.architectures == ["BertForPreTraining"]
    model = build_model(config.replace(**NO_DROPOUT), layout).eval()
    load_portable_weights(model, padded, 0, 1)
    batch = synthetic_batch(VOCAB, batch=4, seq=24, seed=8)
    with torch.no_grad():
        ours = _forward(model, batch)
    theirs = _hf_forward(exported, batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours.mlm_logits[:, :VOCAB], theirs.prediction_logits[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.nsp_logits, theirs.seq_relationship_logits, atol=1e-4, rtol=1e-4)
    hf_tokenizer = BertTokenizer.from_pretrained(out)
    text = "tok1 TOK22 tok3tok4 tok90"
    assert hf_tokenizer(text, add_special_tokens=False)["input_ids"] == tokenizer.encode_batch([text])[0]
    assert hf_tokenizer.pad_token_id == exported.config.pad_token_id == tokenizer.pad_id


def test_mlm_only_checkpoint_exports_to_masked_lm(hf_model, imported, tmp_path):
    _, checkpoint = imported
    weights = {n: t for n, t in checkpoint.read_weights().items() if not n.startswith(("nsp_head.", "bert.pooler."))}
    folder = write_portable(tmp_path / "p", checkpoint.model_config, weights, tokenizer=_tokenizer(checkpoint))
    exported = _assert_loads_cleanly(BertForMaskedLM, export_hf(open_portable(folder), tmp_path / "hf"))
    batch = synthetic_batch(VOCAB, batch=2, seq=16, seed=4)
    theirs = _hf_forward(exported, batch).logits
    torch.testing.assert_close(theirs, _hf_forward(hf_model, batch).prediction_logits, atol=1e-4, rtol=1e-4)


def _task_portable(imported, tmp_path, kind, task, head, rows):
    """A portable folder as fine-tuning will write it: the encoder, a task head, a "task" manifest entry."""
    _, checkpoint = imported
    weights = checkpoint.read_weights()
    gen = torch.Generator().manual_seed(2)
    weights[f"{head}.weight"] = 0.2 * torch.randn(rows, 64, generator=gen)
    weights[f"{head}.bias"] = 0.2 * torch.randn(rows, generator=gen)
    folder = tmp_path / kind
    write_portable(folder, checkpoint.model_config, weights, tokenizer=_tokenizer(checkpoint))
    manifest = json.loads((folder / "portable.json").read_text())
    manifest["task"] = dict(kind=kind, **task)
    (folder / "portable.json").write_text(json.dumps(manifest))
    return open_portable(folder), weights


TASK_CASES = {
    "sequence_classification": (
        BertForSequenceClassification, "classifier", 3,
        dict(num_labels=3, problem_type="single_label_classification", id2label={"0": "neg", "1": "neu", "2": "pos"}),
    ),
    "multiple_choice": (BertForMultipleChoice, "classifier", 1, dict(num_labels=1)),
    "question_answering": (BertForQuestionAnswering, "qa_outputs", 2, dict(num_labels=2)),
}


@pytest.mark.parametrize("kind", list(TASK_CASES))
def test_task_model_exports_to_its_hf_class(layout, imported, kind, tmp_path):
    cls, head, rows, task = TASK_CASES[kind]
    checkpoint, weights = _task_portable(imported, tmp_path, kind, task, head, rows)
    notes = []
    exported = _assert_loads_cleanly(cls, export_hf(checkpoint, tmp_path / "hf", notes))
    dropped = "mlm, nsp, pooler" if kind == "question_answering" else "mlm, nsp"
    assert any(f"left out the {dropped} head(s)" in note for note in notes), notes

    model = build_model(checkpoint.model_config.replace(**NO_DROPOUT), layout).eval()
    load_portable_weights(model, checkpoint, 0, 1)
    linear = torch.nn.Linear(64, rows)
    linear.load_state_dict({"weight": weights[f"{head}.weight"], "bias": weights[f"{head}.bias"]})
    batch = synthetic_batch(VOCAB, batch=4, seq=24, seed=9)
    with torch.no_grad():
        sequence, pooled = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        if kind == "question_answering":
            start, end = linear(sequence.transpose(0, 1)).unbind(-1)  # [b, s] each
            theirs = _hf_forward(exported, batch)
            torch.testing.assert_close(start, theirs.start_logits, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(end, theirs.end_logits, atol=1e-4, rtol=1e-4)
        elif kind == "multiple_choice":  # the 4 sequences are 2 questions x 2 choices
            choices = {k: v.view(2, 2, -1) for k, v in batch.items() if k != "next_sentence_label"}
            theirs = _hf_forward(exported, choices)
            torch.testing.assert_close(linear(pooled).view(2, 2), theirs.logits, atol=1e-4, rtol=1e-4)
        else:
            torch.testing.assert_close(linear(pooled), _hf_forward(exported, batch).logits, atol=1e-4, rtol=1e-4)
            assert exported.config.id2label == {0: "neg", 1: "neu", 2: "pos"}
            assert exported.config.problem_type == "single_label_classification"
    assert linear.weight.abs().max() > 0.1  # the head is not trivially zero


def test_sentencepiece_export_writes_a_fast_tokenizer(layout, tmp_path):
    from bert_ds.data.tokenizer.load import train_sentencepiece

    animals, adjectives = ("cat", "dog", "owl"), ("red", "big", "old")
    lines = [f"the {w} sat on the {v} mat, said Mr. {w.title()}." for w in animals for v in adjectives]
    sp = train_sentencepiece(lines * 20, tmp_path / "sp", vocab_size=60)
    config = model_config_from_hf(_hf_config(vocab_size=sp.vocab_size))
    weights = dict(build_model(config, layout).named_parameters())
    out = export_hf(open_portable(write_portable(tmp_path / "p", config, weights, tokenizer=sp)), tmp_path / "hf")
    assert (out / "tokenizer.model").is_file() and (out / "tokenizer.json").is_file()
    _assert_loads_cleanly(BertForPreTraining, out)
    fast = AutoTokenizer.from_pretrained(out)
    texts = ["the owl sat on the red mat", "Mr. Dog said:  the  big cat."]
    assert [fast(t, add_special_tokens=False)["input_ids"] for t in texts] == sp.encode_batch(texts)
    pair = fast("the cat", "the dog")
    assert pair["input_ids"][0] == sp.cls_id and pair["input_ids"].count(sp.sep_id) == 2
    assert pair["token_type_ids"][-1] == 1


# ---------------------------------------------------------------- errors


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def _edit_weights(folder, drop=(), add=None):
    weights = {n: t for n, t in load_file(folder / "model.safetensors").items() if n not in drop}
    save_file({**weights, **(add or {})}, folder / "model.safetensors", metadata={"format": "pt"})


LAYER_1 = "bert.encoder.layer.1"
IMPORT_ERRORS = {  # case -> (edit of a good HF folder, what the message must name)
    "architecture": (lambda f: _edit_config(f, architectures=["BertForTokenClassification"]), "BertForTokenClass"),
    "model_type": (lambda f: _edit_config(f, model_type="roberta"), "'roberta'"),
    "activation": (lambda f: _edit_config(f, hidden_act="gelu_new"), "'gelu_new'"),
    "positions": (lambda f: _edit_config(f, position_embedding_type="relative_key"), "'relative_key'"),
    "vocab_size": (lambda f: (f / "vocab.txt").write_text("".join(t + "\n" for t in TOKENS[:-1])), "95 tokens"),
    "missing": (lambda f: _edit_weights(f, drop=[f"{LAYER_1}.output.dense.weight"]), f"{LAYER_1}.output.dense.weight"),
    "unexpected": (lambda f: _edit_weights(f, add={f"{LAYER_1}.adapter.weight": torch.zeros(2)}), f"{LAYER_1}.adapter"),
    "partial_head": (lambda f: _edit_weights(f, drop=["cls.seq_relationship.bias"]), "cls.seq_relationship.bias"),
    "declared_head": (lambda f: _edit_weights(f, drop=list(HEADS["nsp"])), "lacks the nsp head(s) a BertForPreTraining"),
    "shape": (lambda f: _edit_weights(f, add={"cls.predictions.bias": torch.zeros(5)}), "cls.predictions.bias has"),
}


@pytest.mark.parametrize("case", list(IMPORT_ERRORS))
def test_import_mismatch_is_an_error_naming_file_and_field(hf_folder, case, tmp_path, capsys):
    edit, expected = IMPORT_ERRORS[case]
    folder = shutil.copytree(hf_folder, tmp_path / "hf")
    edit(folder)
    with pytest.raises(CheckpointError, match="config.json|vocab.txt|model.safetensors") as error:
        import_hf(folder, tmp_path / "out")
    assert expected in str(error.value)
    assert main(["import-hf", str(folder), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and "Traceback" not in err


EXPORT_ERRORS = {
    "pre_ln": (dict(layer_norm_position="pre"), None, "pre-LN"),
    "causal": (dict(causal=True), None, "causal"),
    "bilstm": ({}, dict(kind="sequence_classification", num_labels=3, bilstm=True), "BiLSTM between the encoder and its head"),
    "task_kind": ({}, dict(kind="next_sentence_prediction"), "'next_sentence_prediction'"),
    "head_shape": ({}, dict(kind="multiple_choice"), "classifier.weight has shape (3, 64)"),
}


@pytest.mark.parametrize("case", list(EXPORT_ERRORS))
def test_export_without_hf_counterpart_is_an_error(imported, case, tmp_path):
    config_changes, task, expected = EXPORT_ERRORS[case]
    _, checkpoint = imported
    weights = checkpoint.read_weights()
    weights.update({"classifier.weight": torch.zeros(3, 64), "classifier.bias": torch.zeros(3)})
    folder = write_portable(tmp_path / "p", checkpoint.model_config.replace(**config_changes), weights)
    if task:
        manifest = json.loads((folder / "portable.json").read_text())
        (folder / "portable.json").write_text(json.dumps(dict(manifest, task=task)))
    with pytest.raises(CheckpointError, match="portable.json") as error:
        export_hf(open_portable(folder), tmp_path / "hf")
    assert expected in str(error.value)


def test_cli_imports_and_exports(hf_folder, tmp_path, capsys):
    assert main(["import-hf", str(hf_folder), str(tmp_path / "p"), "--seed", "7"]) == 0
    assert f"wrote {tmp_path / 'p'}" in capsys.readouterr().out
    assert main(["export-hf", str(tmp_path / "p"), str(tmp_path / "hf")]) == 0
    assert "exported BertForPreTraining (vocab 96)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    assert "import-hf" in help_text and "export-hf" in help_text


def test_cli_error_exits_2_without_traceback(imported, tmp_path):
    _, checkpoint = imported
    pre_ln = checkpoint.model_config.replace(layer_norm_position="pre")
    folder = write_portable(tmp_path / "p", pre_ln, checkpoint.read_weights())
    command = [sys.executable, "-m", "bert_ds.checkpoint", "export-hf", str(folder), str(tmp_path / "hf")]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "pre-LN" in done.stderr and "Traceback" not in done.stderr
