"""Project Gutenberg's licence header and footer cut from a book's text, so that licence
boilerplate never becomes training text.

A Gutenberg file wraps the book in PG's own text: a header (title, release date, "This eBook is for
the use of anyone anywhere ...") that ends at a start marker, and a footer (the full licence,
often longer than a short story) that begins at an end marker. The markers have changed over the
decades; each spelling below was seen in real files:

    start  *** START OF THIS PROJECT GUTENBERG EBOOK TITLE ***     (2000s)
           ***START OF THE PROJECT GUTENBERG EBOOK TITLE***        (2010s and later)
           *** START OF THE PROJECT GUTENBERG EBOOK, TITLE ***
           *END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*      (1990s)
           ["Small Print" V.12.08.93]   (the World Library Shakespeare etexts' licence ends here)
    end    End of the Project Gutenberg EBook of TITLE / End of Project Gutenberg's TITLE
           End of The Project Gutenberg Etext of TITLE / End of this Etext of TITLE
           *** END OF THIS PROJECT GUTENBERG EBOOK TITLE *** (and the spellings of the start)

The text kept runs from after the last start marker before the first end marker (PG's own
licence sits between two start markers in the oldest files) to before that end marker. A file with neither is kept whole: nothing is cut on a guess. The World
Library notice that those Shakespeare etexts repeat between acts (`<<THIS ELECTRONIC VERSION OF
THE COMPLETE WORKS OF WILLIAM SHAKESPEARE ... >>`) is removed wherever it stands, and so are the paragraphs
of credits and PG notes that open the text ("Produced by ...", "Note: Project Gutenberg also has an
HTML version ...", "Project Gutenberg Etext of ...").
"""

from __future__ import annotations

import re

_START = re.compile(
    r"^[ \t]*(?:\*{3}[ \t]*START OF (?:THIS|THE) PROJECT GUTENBERG[^\n]*"
    r"|\*END\*THE SMALL PRINT![^\n]*"
    r'|\["Small Print" V\.[^\n]*)$',
    re.IGNORECASE | re.MULTILINE,
)
_END = re.compile(
    r"^[ \t]*(?:\*{3}[ \t]*END OF (?:THIS|THE) PROJECT GUTENBERG"
    r"|End of (?:the |this )?Project Gutenberg"
    r"|End of this Etext of )",
    re.IGNORECASE | re.MULTILINE,
)
_WORLD_LIBRARY = re.compile(r"<<THIS ELECTRONIC VERSION OF THE COMPLETE WORKS OF WILLIAM\s+SHAKESPEARE.*?>>", re.DOTALL)
_CREDIT = re.compile(r"\A\s*(?:Produced by|E-?text prepared by|This e-?text was (?:produced|prepared) by|"
                     r"Transcribed from|Note: Project Gutenberg|Project Gutenberg(?:'s)? Etext)[^\r\n]*(?:\r?\n[ \t]*\S[^\r\n]*){0,8}",
                     re.IGNORECASE)
CREDIT_CHARACTERS = 1_000
"""A credit paragraph longer than this is not one (a book without blank lines between its
paragraphs): it is left in place rather than cut with the text after it."""


def strip_gutenberg(text: str) -> tuple[str, bool]:
    """`text` without PG's header, footer and notices, and whether it had any. Line ends may be
    `\\n` or `\\r\\n` (prepare keeps a file's own)."""
    first_end = _END.search(text)
    markers = list(_START.finditer(text, 0, first_end.start() if first_end else len(text)))
    begin = markers[-1].end() if markers else 0
    starts = bool(markers)
    if markers and not markers[-1].group().rstrip().endswith("***"):  # a marker wrapped onto a second line
        wrapped = re.match(r"\r?\n[^\r\n]*\*{3}[ \t]*(?=\r?\n)", text[begin:begin + 300])
        begin += wrapped.end() if wrapped else 0
    end_match = _END.search(text, begin)
    end = end_match.start() if end_match else len(text)
    if not starts and not end_match and "<<THIS ELECTRONIC VERSION" not in text:
        return text, False
    body = _WORLD_LIBRARY.sub("", text[begin:end])
    for _ in range(3 if starts else 0):  # credits and PG's notes, a paragraph each
        credit = _CREDIT.match(body)
        if credit is None or credit.end() > CREDIT_CHARACTERS:
            break
        body = body[credit.end():]
    return body.strip("\r\n"), True
