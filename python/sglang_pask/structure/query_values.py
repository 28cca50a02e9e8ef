"""Literal values in message text: numbers, quoted strings, dates / times, e-mails, URLs, and
words that are also enum literals of the request's tools or schema.

:func:`value_spans` returns char ranges relative to the given text; the prompt tagger paints
them ``QUERY_VALUE`` wherever the text is still ``QUERY_TEXT`` (it never overrides SQL or
schema classes painted inside a message).
"""

from __future__ import annotations

import re
from typing import Iterable

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
          r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_VALUES = re.compile(
    r'"[^"\n]{1,200}"|\u201c[^\u201d\n]{1,200}\u201d|(?<![\w\'])\'[^\'\n]{1,200}\'(?!\w)'
    r"|\b\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?"
    r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
    rf"|\b{_MONTH}\.? \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTH}(?:,? \d{{4}})?\b"
    r"|\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[aApP]\.?[mM]\.?)?"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|https?://[^\s\"'<>]+"
    r"|(?<![\w.])[-+]?\$?\d+(?:,\d{3})*(?:\.\d+)?%?",
)


def enum_pattern(literals: Iterable[str]) -> re.Pattern | None:
    """A case-insensitive whole-word pattern for the literals that contain a word character."""
    words = sorted({w for w in literals if w and len(w) <= 100 and re.search(r"\w", w)},
                   key=len, reverse=True)
    if not words:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, words)) + r")(?!\w)", re.I)


def value_spans(text: str, start: int = 0, end: int | None = None,
                enums: re.Pattern | None = None) -> list[tuple[int, int]]:
    """Char ranges of literal values in ``text[start:end]`` (absolute offsets, may overlap)."""
    end = len(text) if end is None else end
    out = [m.span() for m in _VALUES.finditer(text, start, end)]
    if enums is not None:
        out.extend(m.span() for m in enums.finditer(text, start, end))
    return out
