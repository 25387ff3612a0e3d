"""Fine-tuning data: GLUE TSVs, SQuAD JSON and SWAG CSV in their original formats (written here as
tiny fixtures), the hub-schema mappings, SQuAD's sliding windows and the logits -> answer step."""

import contextlib
import json

import numpy as np
import pytest
from datasets import Dataset

from bert_ds.data.tokenizer.load import SPECIAL_TOKENS, WordPieceTokenizer
from bert_ds.finetune.data.glue import glue_examples_from_hub, load_glue, read_glue_file
from bert_ds.finetune.data.squad import SquadExample, gold_answers, load_squad, squad_examples_from_hub
from bert_ds.finetune.data.squad_features import (
    build_squad_features,
    context_tokens,
    piece_spans,
    postprocess,
    window_starts,
)
from bert_ds.finetune.data.swag import load_swag, swag_examples_from_hub
from bert_ds.finetune.data.tasks import GLUE_TASKS, FinetuneDataError, get_task


def write(path, text: str, encoding: str = "utf-8"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


@contextlib.contextmanager
def raises_naming(*parts):
    """pytest.raises(FinetuneDataError) whose message must hold every one of `parts`."""
    with pytest.raises(FinetuneDataError) as info:
        yield info
    for part in parts:
        assert str(part) in str(info.value), (part, str(info.value))


# --- GLUE -------------------------------------------------------------------------------------


def test_task_table_covers_glue_with_its_submission_files_and_hub_configs():
    assert list(GLUE_TASKS) == ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]
    files = [name for task in GLUE_TASKS.values() for name in task.submission_files.values()]
    assert files == ["CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv", "MNLI-mm.tsv",
                     "QNLI.tsv", "RTE.tsv", "WNLI.tsv"]
    mnli = get_task("MNLI")
    assert mnli.dev_splits == ("dev_matched", "dev_mismatched")
    assert mnli.test_splits == ("test_matched", "test_mismatched")
    assert get_task("SST-2") is GLUE_TASKS["sst2"] and get_task("sts-b").is_regression
    with pytest.raises(FinetuneDataError, match="Unknown GLUE task 'squad'"):
        get_task("squad")


def test_cola_train_has_no_header_and_test_has_one(tmp_path):
    glue = tmp_path / "glue_data"
    write(glue / "CoLA" / "train.tsv", 'gj04\t1\t\tThe dog barked "loudly.\nr-67\t0\t*\tDog the barked.\n')
    write(glue / "CoLA" / "test.tsv", "index\tsentence\n0\tA cat sat.\n1\tSat cat a.\n")
    examples, report = load_glue("cola", "train", str(glue))
    # The unbalanced quote stays in the text and does not swallow the next row.
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [('The dog barked "loudly.', None, 1),
                                                                 ("Dog the barked.", None, 0)]
    assert report.rows == 2 and not report.skipped
    test, _ = load_glue("cola", "test", str(glue / "CoLA"))  # the task folder itself works too
    assert [(e.guid, e.text_a, e.label) for e in test] == [("0", "A cat sat.", None), ("1", "Sat cat a.", None)]


def test_mrpc_header_with_byte_order_mark_is_read_by_column_name(tmp_path):
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    path = write(tmp_path / "MRPC" / "dev.tsv", header + "1\t11\t12\tHe left early.\tHe went early.\n"
                 "0\t13\t14\tIt rained.\tThe sun shone.\r\n")
    examples, _ = read_glue_file("mrpc", path, "dev")
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [("He left early.", "He went early.", 1),
                                                                 ("It rained.", "The sun shone.", 0)]
    test = write(tmp_path / "MRPC" / "test.tsv", "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\tA b.\tC d.\n")
    assert read_glue_file("mrpc", test, "test")[0][0].label is None


def test_qqp_malformed_rows_are_skipped_counted_and_reported(tmp_path):
    rows = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
            "0\t1\t2\tHow do I cook rice?\tHow is rice cooked?\t1",
            "1\t3\t4\tWhy is the sky blue?",  # a question broken by a stray newline: two bad lines
            "What colour is the sea?\t0",
            "2\t5\t6\tWhat is 2+2?\tWhat is four?\t0"]
    path = write(tmp_path / "QQP" / "train.tsv", "\n".join(rows) + "\n")
    examples, report = read_glue_file("qqp", path, "train")
    assert [e.guid for e in examples] == ["0", "2"] and [e.label for e in examples] == [1, 0]
    assert report.rows == 2 and [line for line, _ in report.skipped] == [3, 4]
    assert "2 rows skipped" in report.summary() and "lines 3, 4" in report.summary()
    # In a test file every row needs a prediction, so the same damage is an error.
    test = write(tmp_path / "QQP" / "test.tsv", "id\tquestion1\tquestion2\n0\tA?\tB?\n1\tC?\n")
    with raises_naming(test, "line 3"):
        read_glue_file("qqp", test, "test")
    # A file that is mostly malformed is the wrong file, not a damaged one.
    mostly_bad = write(tmp_path / "bad" / "train.tsv", "\n".join(rows[:2] + ["x\ty"] * 8) + "\n")
    with raises_naming(mostly_bad, "too many malformed rows"):
        read_glue_file("qqp", mostly_bad, "train")


def test_mnli_matched_and_mismatched_dev_files(tmp_path):
    header = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
              "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n")
    parses = "( a )\t( b )\t(ROOT a)\t(ROOT b)"
    glue = tmp_path / "glue_data"
    write(glue / "MNLI" / "dev_matched.tsv",
          header + f"0\t1\t1e\tfiction\t{parses}\tA man sleeps.\tA person rests.\tentailment\te\te\te\te\tentailment\n")
    write(glue / "MNLI" / "dev_mismatched.tsv",
          header + f"7\t2\t2n\tletters\t{parses}\tShe wrote.\tShe wrote twice.\tneutral\tn\tn\tn\tn\tneutral\n"
          f"8\t3\t3c\tletters\t{parses}\tIt is day.\tIt is night.\tcontradiction\tc\tc\tc\tc\tcontradiction\n")
    matched, _ = load_glue("mnli", "dev_matched", str(glue))
    mismatched, _ = load_glue("mnli", "dev_mismatched", str(glue))
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in matched] == [("0", "A man sleeps.", "A person rests.", 0)]
    assert [e.label for e in mismatched] == [1, 2]  # the hub's order: entailment, neutral, contradiction
    with pytest.raises(FinetuneDataError, match="no split 'dev'"):
        load_glue("mnli", "dev", str(glue))


def test_stsb_scores_are_floats_and_a_non_numeric_score_names_the_line(tmp_path):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    meta = "main-captions\tMSRvid\t2012test\t0001\tnone\tnone"
    path = write(tmp_path / "STS-B" / "dev.tsv", header + f"0\t{meta}\tA plane lands.\tA jet lands.\t4.750\n"
                 f"1\t{meta}\tA man sings.\tA dog runs.\t0.000\n")
    examples, _ = read_glue_file("stsb", path, "dev")
    assert [e.label for e in examples] == [4.75, 0.0] and isinstance(examples[0].label, float)
    bad = write(tmp_path / "bad" / "dev.tsv", header + f"0\t{meta}\tA.\tB.\t1.0\n1\t{meta}\tC.\tD.\tfour\n")
    with raises_naming(bad, "line 3", "'four'"):
        read_glue_file("stsb", bad, "dev")


def test_bad_glue_data_names_file_and_line(tmp_path):
    sst = write(tmp_path / "SST-2" / "train.tsv", "sentence\tlabel\ngood film \t1\nbad film \t2\n")
    with raises_naming(sst, "line 3", "'2'", "['0', '1']"):
        read_glue_file("sst2", sst, "train")
    rte = write(tmp_path / "RTE" / "dev.tsv", "index\tsentence1\tsentence2\n0\tA.\tB.\n")
    with raises_naming(rte, "'label'", "header"):
        read_glue_file("rte", rte, "dev")
    qnli = write(tmp_path / "QNLI" / "dev.tsv", "index\tquestion\tsentence\tlabel\n0\tQ?\tS.\tmaybe\n")
    with raises_naming(qnli, "line 2", "'maybe'"):
        read_glue_file("qnli", qnli, "dev")
    latin1 = write(tmp_path / "WNLI" / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tcaf\xe9.\tB.\t1\n", "latin-1")
    with raises_naming(latin1, "line 2", "UTF-8"):
        read_glue_file("wnli", latin1, "dev")
    with raises_naming("No rte train file", "train.tsv"):
        load_glue("rte", "train", str(tmp_path))


def test_glue_hub_schema_mapping():
    mnli = Dataset.from_dict({"premise": ["P1", "P2"], "hypothesis": ["H1", "H2"], "label": [2, 0], "idx": [0, 1]})
    examples, report = glue_examples_from_hub("mnli", mnli, "dev_mismatched")
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in examples] == [("0", "P1", "H1", 2), ("1", "P2", "H2", 0)]
    assert report.source == "nyu-mll/glue:mnli validation_mismatched"
    stsb = Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"], "label": [3.2], "idx": [5]})
    assert glue_examples_from_hub("stsb", stsb, "train")[0][0].label == pytest.approx(3.2)
    test = Dataset.from_dict({"sentence": ["x"], "label": [-1], "idx": [0]})
    assert glue_examples_from_hub("sst2", test, "test")[0][0].label is None
    with raises_naming("nyu-mll/glue:sst2 validation", "record 0", "label -1"):
        glue_examples_from_hub("sst2", test, "dev")
    with raises_naming("missing column", "question"):
        glue_examples_from_hub("qnli", mnli, "train")


# --- SQuAD ------------------------------------------------------------------------------------

CONTEXT = "The far side of the Moon was first photographed in 1959 by Luna 3, a Soviet probe."


def squad_json(qas, version="1.1"):
    paragraph = {"context": CONTEXT, "qas": qas}
    return json.dumps({"version": version, "data": [{"title": "Moon", "paragraphs": [paragraph]}]})


def answer(text, shift=0):
    return {"text": text, "answer_start": CONTEXT.index(text) + shift}


def test_squad_v1_and_v2_files(tmp_path):
    v1 = [{"id": "q1", "question": "When?", "answers": [answer("1959"), answer("in 1959")]}]
    write(tmp_path / "dev-v1.1.json", squad_json(v1))
    examples, report = load_squad("dev", str(tmp_path), version="1.1")
    assert report.rows == 1 and examples[0].answer_texts == ("1959", "in 1959") and not examples[0].is_impossible
    assert examples[0].answer_starts == (CONTEXT.index("1959"), CONTEXT.index("in 1959"))
    v2 = v1 + [{"id": "q2", "question": "Who landed?", "answers": [], "is_impossible": True,
                "plausible_answers": [answer("Luna 3")]}]
    write(tmp_path / "train-v2.0.json", squad_json(v2, "v2.0"))
    examples, _ = load_squad("train", str(tmp_path), version="2.0")
    assert [(e.qid, e.is_impossible, e.answer_texts) for e in examples] == [("q1", False, ("1959", "in 1959")),
                                                                           ("q2", True, ())]
    assert gold_answers(examples) == {"q1": ["1959", "in 1959"], "q2": []}


def test_squad_answer_not_at_its_offset_names_file_question_and_offset(tmp_path):
    path = write(tmp_path / "train.json", squad_json([{"id": "q7", "question": "?", "answers": [answer("Luna 3", 1)]}]))
    with raises_naming(path, "question q7", "'Luna 3'", f"answer_start {CONTEXT.index('Luna 3') + 1}"):
        load_squad("train", str(path))
    path = write(tmp_path / "nokey.json", squad_json([{"id": "q8", "answers": []}]))
    with raises_naming(path, "question q8", "'question'"):
        load_squad("train", str(path))
    twice = [{"id": "q9", "question": "?", "answers": [answer("1959")]}] * 2
    path = write(tmp_path / "twice.json", squad_json(twice))
    with raises_naming(path, "question id q9 appears more than once"):
        load_squad("train", str(path))


def test_squad_hub_schema_mapping():
    rows = Dataset.from_dict({
        "id": ["a", "b"], "title": ["Moon", "Moon"], "context": [CONTEXT, CONTEXT], "question": ["When?", "Who?"],
        "answers": [{"text": ["1959"], "answer_start": [CONTEXT.index("1959")]}, {"text": [], "answer_start": []}],
    })
    examples, _ = squad_examples_from_hub(rows, "rajpurkar/squad_v2 validation")
    assert [(e.qid, e.answer_texts, e.is_impossible) for e in examples] == [("a", ("1959",), False), ("b", (), True)]
    shifted = [{"text": a["text"], "answer_start": [s + 2 for s in a["answer_start"]]} for a in rows["answers"]]
    bad = rows.remove_columns("answers").add_column("answers", shifted)
    with raises_naming("rajpurkar/squad validation", "question a"):
        squad_examples_from_hub(bad, "rajpurkar/squad validation")


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    words = ("the far side of moon was first photographed in 19 ##59 by luna 3 , a soviet probe . when who "
             "denver ' s won game ? broncos beat")
    path = tmp_path_factory.mktemp("wp") / "vocab.txt"
    path.write_text("\n".join(list(SPECIAL_TOKENS) + words.split()) + "\n", encoding="utf-8")
    return WordPieceTokenizer(path, lowercase=True)


def test_token_spans_map_pieces_back_to_original_characters(wordpiece):
    assert piece_spans("Denver's", ["denver", "'", "s"]) == [(0, 6), (6, 7), (7, 8)]
    assert piece_spans("1959", ["▁19", "5", "9"]) == [(0, 2), (2, 3), (3, 4)]
    assert piece_spans("café", ["▁ca", "[UNK]"]) == [(0, 2), (2, 4)]
    assert piece_spans("Zürich", ["zx"]) is None
    text = "Denver's  Broncos, 1959 Moonx"
    ids, spans = context_tokens(wordpiece, text)
    assert wordpiece.ids_to_tokens(ids) == ["denver", "'", "s", "broncos", ",", "19", "##59", "[UNK]"]
    assert [text[a:b] for a, b in spans] == ["Denver", "'", "s", "Broncos", ",", "19", "59", "Moonx"]


def test_long_context_windows_hold_the_answer_at_the_right_tokens(sample_tokenizer):
    filler = " ".join(f"Sentence number {i} talks about the river and the old village." for i in range(12))
    context = f"{filler} The bridge was opened in 1889 by the mayor. {filler}"
    example = SquadExample("q", "When was the bridge opened?", context, "", ("1889 by the mayor",),
                           (context.index("1889 by the mayor"),))
    features = build_squad_features([example], sample_tokenizer, max_seq_length=64, doc_stride=24, max_query_length=8)
    assert len(features) >= 5
    # Window starts are doc_stride tokens apart (BERT's stride is a step, not an overlap).
    assert window_starts(10, 4, 3) == [(0, 4), (3, 4), (6, 4)] and window_starts(0, 4, 3) == [(0, 0)]
    holding = [f for f in features if f.start_position > 0]
    assert holding, "some window must hold the answer"
    for f in features:
        assert len(f.input_ids) <= 64
        assert f.input_ids[0] == sample_tokenizer.cls_id and f.input_ids[-1] == sample_tokenizer.sep_id
        prefix = f.token_type_ids.index(1)
        assert f.input_ids[prefix - 1] == sample_tokenizer.sep_id and len(f.token_type_ids) == len(f.input_ids)
        assert all(span is None for span in f.token_spans[:prefix]) and f.token_spans[-1] is None
        if f.start_position:
            s, e = f.token_spans[f.start_position], f.token_spans[f.end_position]
            assert context[s[0]:e[1]] == "1889 by the mayor"
        else:
            assert f.end_position == 0  # a window without the whole answer points at [CLS]
    # Each context token is the max-context token of exactly one window, in order, and all are covered.
    doc_ids, doc_spans = context_tokens(sample_tokenizer, context)
    owned = [s for f in features for s, is_max in zip(f.token_spans, f.token_is_max_context) if is_max]
    assert owned == doc_spans and len(doc_ids) > 64


def one_window(wordpiece, question="When was it photographed?", impossible=False):
    text = () if impossible else ("1959",)
    starts = () if impossible else (CONTEXT.index("1959"),)
    example = SquadExample("q", question, CONTEXT, "Moon", text, starts, impossible)
    [feature] = build_squad_features([example], wordpiece, max_seq_length=64)
    return example, feature


def test_postprocess_picks_the_best_valid_span_and_maps_it_to_text(wordpiece):
    example, feature = one_window(wordpiece)
    begin, end = feature.token_spans[feature.start_position][0], feature.token_spans[feature.end_position][1]
    assert CONTEXT[begin:end] == "1959"
    tokens = wordpiece.ids_to_tokens(feature.input_ids)
    start, end = np.full(len(tokens) + 3, -10.0), np.full(len(tokens) + 3, -10.0)  # logits run into padding
    first19, luna = tokens.index("19"), tokens.index("luna")
    start[first19], end[first19 + 1] = 5.0, 4.0  # "19 ##59" -> "1959": 9.0
    start[luna], end[luna + 1] = 3.0, 3.5  # "19 ... 3" scores 8.5, "Luna 3" 6.5
    end[tokens.index("photographed")] = 8.0  # an end before the best start: never paired with it
    start[1] = end[1] = 20.0  # a query token: not context, never an answer
    start[len(tokens)] = end[len(tokens)] = 50.0  # padding beyond the input: ignored
    result = postprocess([example], [feature], [start], [end], n_best_size=5)
    assert result.answers == {"q": "1959"}
    texts = [c["text"] for c in result.nbest["q"]]
    assert texts == ["1959", "1959 by Luna 3", "Luna 3"]  # other starts are not among the 5 best
    assert [c["start_logit"] + c["end_logit"] for c in result.nbest["q"][:3]] == [9.0, 8.5, 6.5]
    assert sum(c["probability"] for c in result.nbest["q"]) == pytest.approx(1.0)
    short = postprocess([example], [feature], [start], [end], max_answer_length=1)
    assert short.answers["q"] == "19"  # "19 ##59" is two tokens: too long now


def test_postprocess_v2_null_answer_with_threshold(wordpiece):
    example, feature = one_window(wordpiece, impossible=True)
    tokens = wordpiece.ids_to_tokens(feature.input_ids)
    start, end = np.zeros(len(tokens)), np.zeros(len(tokens))
    luna = tokens.index("luna")
    start[0], end[0] = 3.0, 3.0  # null score 6
    start[luna], end[luna + 1] = 2.5, 2.0  # best span 4.5: null - span = 1.5
    result = postprocess([example], [feature], [start], [end], version_2=True, null_threshold=0.0)
    assert result.answers == {"q": ""} and result.null_odds["q"] == pytest.approx(1.5)
    assert result.nbest["q"][0]["text"] == ""
    lenient = postprocess([example], [feature], [start], [end], version_2=True, null_threshold=2.0)
    assert lenient.answers == {"q": "Luna 3"}
    v1 = postprocess([example], [feature], [start], [end])
    assert v1.answers == {"q": "Luna 3"} and all(c["text"] for c in v1.nbest["q"])


# --- SWAG -------------------------------------------------------------------------------------

SWAG_HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"


def test_swag_csv_and_hub(tmp_path):
    rows = ('0,anetv_1,5,"She opens the door, then","She opens the door, then",she,gen,'
            '"walks in.","flies\naway.",sits.,sings.,0\n'
            "1,lsmdc_2,9,He runs. He,He runs.,He,gold,stops.,eats.,falls.,jumps.,3\n")
    write(tmp_path / "val.csv", SWAG_HEADER + rows)
    examples, report = load_swag("dev", str(tmp_path))
    assert report.rows == 2
    first, second = examples
    assert (first.context, first.start, first.label) == ("She opens the door, then", "she", 0)
    assert first.endings == ("walks in.", "flies\naway.", "sits.", "sings.")
    assert second.label == 3 and second.guid == "val-4"  # the quoted newline makes record 2 start on line 4
    test_header = SWAG_HEADER.replace(",label\n", "\n")
    write(tmp_path / "test.csv", test_header + "0,v,1,s,A.,B,gen,a,b,c,d\n")
    assert load_swag("test", str(tmp_path))[0][0].label is None
    values = ["v", "1", "p", "S1.", "S2", "gen", "a", "b", "c", "d", 2]
    hub = Dataset.from_dict({name: [value] for name, value in zip(SWAG_HEADER.strip().split(",")[1:], values)})
    [example], _ = swag_examples_from_hub(hub, "train")
    assert (example.context, example.start, example.endings, example.label) == ("S1.", "S2", ("a", "b", "c", "d"), 2)


def test_bad_swag_data_names_file_and_line(tmp_path):
    path = write(tmp_path / "train.csv", SWAG_HEADER + "0,v,1,s,A.,B,gen,a,b,c,d,1\n1,v,2,s,A.,B,gen,a,b,c,d,4\n")
    with raises_naming(path, "line 3", "'4'"):
        load_swag("train", str(tmp_path))
    path = write(tmp_path / "val.csv", SWAG_HEADER.replace("ending3,", "") + "0,v,1,s,A.,B,gen,a,b,c,1\n")
    with raises_naming(path, "ending3"):
        load_swag("val", str(path))
    path = write(tmp_path / "x" / "train.csv", SWAG_HEADER + "0,v,1,s,A.,B,gen,a,b,c,1\n")
    with raises_naming(path, "line 2", "11 fields"):
        load_swag("train", str(path))
