"""SQuAD v1.1 / v2.0 examples from the official JSON files or the `rajpurkar/squad[_v2]` hub copies.

Examples keep the context exactly as given (never stripped: stripping is what shifted offsets
in an old hub copy), so every `answer_start` is a character offset into it; an answer not
found at its offset raises FinetuneDataError naming the file and the question id.
Windows, features and answer decoding live in squad_features.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, Union

from bert_ds.finetune.data.tasks import (
    FinetuneDataError,
    ReadReport,
    hub_split,
    load_hub_split,
    parse_hub_spec,
    require_hub_columns,
)



@dataclass(frozen=True)
class SquadExample:
    """One question about one context. v2.0: `is_impossible` questions have no answers."""

    qid: str
    question: str
    context: str
    title: str
    answer_texts: tuple[str, ...]
    """Gold answers (v1.1 dev has up to ~5; train has one); empty for impossible questions."""
    answer_starts: tuple[int, ...]
    """Character offset of each answer in `context`."""
    is_impossible: bool = False


def _field(record: Any, key: str, kind: type, where: str) -> Any:
    value = record.get(key) if isinstance(record, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):  # true is no offset
        raise FinetuneDataError(f"{where}: missing or invalid {key!r} (expected {kind.__name__}).")
    return value


def make_example(qid, question, context, title, texts, starts, is_impossible, where) -> SquadExample:
    """A checked SquadExample: each answer text must stand at its offset in the context, and a
    question has answers iff it is not impossible."""
    where = f"{where}: question {qid}"
    if len(texts) != len(starts):
        raise FinetuneDataError(f"{where}: {len(texts)} answer texts but {len(starts)} answer_start values.")
    for position, (text, start) in enumerate(zip(texts, starts)):
        found = context[start : start + len(text)] if isinstance(start, int) and start >= 0 else None
        if found != text:
            raise FinetuneDataError(
                f"{where}: answer {position} {text!r} is not at answer_start {start} "
                f"(the context there reads {found!r})."
            )
    if is_impossible and texts:
        raise FinetuneDataError(f"{where}: marked is_impossible but has {len(texts)} answers.")
    if not is_impossible and not texts:
        raise FinetuneDataError(f"{where}: has no answers and is not marked is_impossible.")
    return SquadExample(qid, question, context, title, tuple(texts), tuple(starts), is_impossible)


def read_squad_file(path: Union[str, Path]) -> tuple[list[SquadExample], ReadReport]:
    """Examples of an official SQuAD JSON file (data -> paragraphs -> qas). v2.0's
    `plausible_answers` of impossible questions are not used (nor checked)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise FinetuneDataError(f"{path}: cannot read SQuAD JSON: {error}") from None
    except RecursionError:
        raise FinetuneDataError(f"{path}: cannot read SQuAD JSON: nested too deeply.") from None
    examples: list[SquadExample] = []
    for a, article in enumerate(_field(data, "data", list, str(path))):
        title = article.get("title", "") if isinstance(article, dict) else ""
        if not isinstance(title, str):
            raise FinetuneDataError(f"{path}: data[{a}]: invalid 'title' (expected str).")
        for p, paragraph in enumerate(_field(article, "paragraphs", list, f"{path}: data[{a}]")):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, where)
            for q, qa in enumerate(_field(paragraph, "qas", list, where)):
                qid = _field(qa, "id", str, f"{where}.qas[{q}]")
                question = _field(qa, "question", str, f"{path}: question {qid}")
                answers = _field(qa, "answers", list, f"{path}: question {qid}")
                texts = [_field(answer, "text", str, f"{path}: question {qid}") for answer in answers]
                starts = [_field(answer, "answer_start", int, f"{path}: question {qid}") for answer in answers]
                impossible = qa.get("is_impossible", False)
                if not isinstance(impossible, bool):
                    raise FinetuneDataError(f"{path}: question {qid}: invalid 'is_impossible' (expected a boolean).")
                examples.append(make_example(qid, question, context, title, texts, starts, impossible, str(path)))
    return _checked_unique(examples, str(path))


def squad_examples_from_hub(rows: Any, source: str) -> tuple[list[SquadExample], ReadReport]:
    """Examples of a hub split with the `rajpurkar/squad[_v2]` schema: id, title, context,
    question, answers {text: [...], answer_start: [...]}; no answers means impossible (v2.0)."""
    require_hub_columns(rows, ["id", "title", "context", "question", "answers"], source)
    examples = []
    for row in rows:
        texts, starts = list(row["answers"]["text"]), list(row["answers"]["answer_start"])
        impossible = not texts
        examples.append(
            make_example(row["id"], row["question"], row["context"], row["title"], texts, starts, impossible, source)
        )
    return _checked_unique(examples, source)


def _checked_unique(examples: list[SquadExample], source: str) -> tuple[list[SquadExample], ReadReport]:
    """The examples and their report, after checking that no question id repeats (predictions
    and scores are keyed by it)."""
    seen: set[str] = set()
    for example in examples:
        if example.qid in seen:
            raise FinetuneDataError(f"{source}: question id {example.qid} appears more than once.")
        seen.add(example.qid)
    return examples, ReadReport(source, rows=len(examples))


def load_squad(
    split: str, data: str = "squad_data", version: str = "1.1"
) -> tuple[list[SquadExample], ReadReport]:
    """Examples of `split` ("train" or "dev") from `data`: a folder holding the official files
    (`train-v1.1.json`, `dev-v2.0.json`, ...), one JSON file, or a hub spec such as
    `hf:rajpurkar/squad_v2` (split "dev" is the hub's "validation")."""
    if version not in ("1.1", "2.0"):
        raise FinetuneDataError(f"SQuAD version must be '1.1' or '2.0', got {version!r}.")
    hub = parse_hub_spec(data)
    if hub is not None:
        rows = load_hub_split(hub, hub_split(split))
        return squad_examples_from_hub(rows, f"{hub.hub_id} {hub_split(split)}")
    path = Path(data)
    if os.path.isdir(path):  # os.path: a path too long or with a NUL byte is no folder, not an OSError
        path = path / f"{split}-v{version}.json"
    if not os.path.isfile(path):
        raise FinetuneDataError(f"No SQuAD {split} file: {path} does not exist.")
    return read_squad_file(path)


def gold_answers(examples: Sequence[SquadExample]) -> dict[str, list[str]]:
    """question id -> gold answer texts (empty for impossible questions), as metrics.py takes them."""
    return {example.qid: list(example.answer_texts) for example in examples}
