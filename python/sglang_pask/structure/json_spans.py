"""A span-recording JSON parser: parses JSON out of a larger text and keeps the character span
of every value and key, so tool / schema JSON can be located in a rendered prompt by *parsing*.

Works for any separators / indentation / ``ensure_ascii`` choice. ``JNode.start/end`` are char
offsets into the text passed to :func:`parse_at` (``end`` exclusive); a string node's span
includes its quotes. Characters inside a container's span not covered by a child or key are
punctuation or whitespace.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# One lexeme, after optional whitespace. Groups: 1 string body, 2 number, 3 literal, 4 punctuation.
_LEX = re.compile(
    r'[ \t\n\r]*(?:"((?:[^"\\\x00-\x1f]|\\.)*)"'
    r"|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    r"|(true|false|null)"
    r"|([{}\[\],:]))",
    re.S,
)
_LITERALS = {"true": True, "false": False, "null": None}


class JsonSpanError(ValueError):
    """The text at the given position is not one complete JSON value."""


@dataclass(slots=True)
class JNode:
    kind: str  # "object" | "array" | "string" | "number" | "literal"
    start: int
    end: int
    value: Any = None
    # object: [(key, key_start, key_end, child)] (key span includes quotes); array: [child]
    items: list = field(default_factory=list)


def _string(body: str, pos: int) -> str:
    if "\\" not in body:
        return body
    try:
        return json.loads('"' + body + '"')
    except ValueError as e:
        raise JsonSpanError(f"bad string escape at char {pos}: {e}") from None


class _Parser:
    __slots__ = ("text", "pos")

    def __init__(self, text: str, pos: int):
        self.text, self.pos = text, pos

    def lex(self):
        m = _LEX.match(self.text, self.pos)
        if m is None:
            raise JsonSpanError(f"unexpected character at char {self.pos}")
        self.pos = m.end()
        return m

    def value(self, m=None) -> JNode:
        if m is None:
            m = self.lex()
        g = m.lastindex
        start = m.start(g) - (1 if g == 1 else 0)
        if g == 1:
            return JNode("string", start, m.end(), _string(m.group(1), start))
        if g == 2:
            s = m.group(2)
            return JNode("number", start, m.end(), float(s) if any(c in s for c in ".eE") else int(s))
        if g == 3:
            return JNode("literal", start, m.end(), _LITERALS[m.group(3)])
        p = m.group(4)
        if p == "{":
            return self.obj(start)
        if p == "[":
            return self.arr(start)
        raise JsonSpanError(f"unexpected {p!r} at char {start}")

    def obj(self, start: int) -> JNode:
        node = JNode("object", start, start, {})
        m = self.lex()
        if m.lastindex == 4 and m.group(4) == "}":
            node.end = m.end()
            return node
        while True:
            if m.lastindex != 1:
                raise JsonSpanError(f"expected a key at char {m.start(m.lastindex)}")
            ks = m.start(1) - 1
            key = _string(m.group(1), ks)
            ke = m.end()
            colon = self.lex()
            if colon.lastindex != 4 or colon.group(4) != ":":
                raise JsonSpanError(f"expected ':' at char {colon.start(colon.lastindex)}")
            child = self.value()
            node.items.append((key, ks, ke, child))
            node.value[key] = child.value
            sep = self.lex()
            p = sep.group(4) if sep.lastindex == 4 else None
            if p == "}":
                node.end = sep.end()
                return node
            if p != ",":
                raise JsonSpanError(f"expected ',' or '}}' at char {sep.start(sep.lastindex)}")
            m = self.lex()

    def arr(self, start: int) -> JNode:
        node = JNode("array", start, start, [])
        m = self.lex()
        if m.lastindex == 4 and m.group(4) == "]":
            node.end = m.end()
            return node
        while True:
            child = self.value(m)
            node.items.append(child)
            node.value.append(child.value)
            sep = self.lex()
            p = sep.group(4) if sep.lastindex == 4 else None
            if p == "]":
                node.end = sep.end()
                return node
            if p != ",":
                raise JsonSpanError(f"expected ',' or ']' at char {sep.start(sep.lastindex)}")
            m = self.lex()


def parse_at(text: str, pos: int = 0) -> JNode:
    """Parse one JSON value starting at ``text[pos]`` (leading whitespace allowed); trailing text
    is left alone. Raises :class:`JsonSpanError` if no complete value starts there."""
    try:
        return _Parser(text, pos).value()
    except RecursionError:
        raise JsonSpanError(f"JSON nested too deeply at char {pos}") from None


def find_objects(text: str, wanted: list, start: int = 0, end: int | None = None):
    """Yield ``(i, node)`` for each ``wanted[i]`` (in order) found as a parsed JSON object in
    ``text[start:end]``; candidates are the ``{`` characters, and a candidate matches when its
    parsed value equals ``wanted[i]`` (or ``wanted[i]["function"]``, for templates that render
    only the function). Stops at the first wanted item that is not found."""
    end = len(text) if end is None else end
    pos = start
    i = 0
    while i < len(wanted):
        pos = text.find("{", pos, end)
        if pos < 0:
            return
        try:
            node = parse_at(text, pos)
        except JsonSpanError:
            pos += 1
            continue
        w = wanted[i]
        alt = w.get("function") if isinstance(w, dict) else None
        if node.value == w or (alt is not None and node.value == alt):
            yield i, node
            i += 1
            pos = node.end
        else:
            pos += 1
