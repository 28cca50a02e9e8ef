"""``CREATE TABLE`` DDL in prompt messages -> table, column, type, constraint, keyword classes,
and the :class:`SqlCatalog` the SQL output tracker resolves identifiers against.

Grammar handled (loosely, never raising): ``CREATE [TEMP[ORARY]] TABLE [IF NOT EXISTS]
[schema.]name ( item, ... )`` where an item is a table constraint (starts with PRIMARY, FOREIGN,
UNIQUE, CHECK, CONSTRAINT, KEY, INDEX) or ``column type[(args)] [constraint words ...]``.
"""

from __future__ import annotations

import re
from typing import Iterator

from .base import PromptContext, RegionTagger
from .classes import StructClass as C
from .spans import RankMap
from .sql_lexer import CONSTRAINT_WORDS, LEX_STR, TABLE_CONSTRAINT_START, SqlCatalog, norm_ident

_CREATE = re.compile(r"\bCREATE\b", re.I)
_LIT = {"string", "number"}


def _lexemes(text: str, pos: int, end: int) -> Iterator[tuple[str, str, int, int]]:
    """(kind, text, start, end) of non-whitespace, non-comment lexemes in text[pos:end]."""
    for m in LEX_STR.finditer(text, pos, end):
        kind = m.lastgroup
        if kind not in ("ws", "comment"):
            yield kind, m.group(), m.start(), m.end()


def _statements(text: str, start: int, end: int) -> Iterator[list[tuple[str, str, int, int]]]:
    """Lexemes of each CREATE TABLE statement in text[start:end] (up to its closing paren)."""
    pos = start
    while True:
        m = _CREATE.search(text, pos, end)
        if m is None:
            return
        pos = m.end()
        lx: list = []
        depth, table_at = 0, 1
        for lex in _lexemes(text, m.start(), end):
            lx.append(lex)
            t, n = lex[1], len(lx)
            if n == 2 and t.upper() in ("TEMP", "TEMPORARY"):
                table_at = 2
            if n == table_at + 1 and t.upper() != "TABLE":
                break  # CREATE INDEX / VIEW / ...: not a table
            if t == "(":
                depth += 1
            elif t == ")":
                depth -= 1
                if depth == 0:
                    break
            elif t == ";" and depth == 0:
                break
        if len(lx) > table_at and lx[table_at][1].upper() == "TABLE":
            yield lx
            pos = lx[-1][3]


def _split_items(lx, i):
    """Split lexemes after the opening paren at index i into top-level comma-separated items."""
    items, cur, depth = [], [], 0
    for lex in lx[i + 1:]:
        t = lex[1]
        if t == "(":
            depth += 1
        elif t == ")":
            if depth == 0:
                break
            depth -= 1
        elif t == "," and depth == 0:
            items.append(cur)
            cur = []
            continue
        cur.append(lex)
    items.append(cur)
    return [it for it in items if it]


def parse_statement(lx, catalog: SqlCatalog, out: list | None = None) -> None:
    """Add the statement's table and columns to ``catalog``; if ``out`` is a list, append
    ``(start, end, class)`` char spans for its lexemes."""
    emit = out.append if out is not None else (lambda _x: None)
    i = 0
    while i < len(lx) and lx[i][0] == "word" and lx[i][1].upper() in (
            "CREATE", "TEMP", "TEMPORARY", "TABLE", "IF", "NOT", "EXISTS"):
        emit((lx[i][2], lx[i][3], C.SQL_KEYWORD))
        i += 1
    # [schema.]name
    table = None
    while i < len(lx) and lx[i][0] in ("word", "quoted", "punct") and lx[i][1] != "(":
        if lx[i][0] == "punct":
            emit((lx[i][2], lx[i][3], C.SCHEMA_PUNCT))
        else:
            table = norm_ident(lx[i][1])
            emit((lx[i][2], lx[i][3], C.SQL_TABLE))
        i += 1
    if table is None or i >= len(lx):
        return
    catalog.tables.add(table)
    cols = catalog.table_columns.setdefault(table, [])
    for item in _split_items(lx, i):
        first = item[0][1].upper()
        if item[0][0] == "word" and first in TABLE_CONSTRAINT_START:
            _constraint_words(item, catalog, emit)
            continue
        col = norm_ident(item[0][1])
        cols.append(col)
        catalog.columns.add(col)
        emit((item[0][2], item[0][3], C.SQL_COLUMN))
        in_type = True
        for kind, t, s, e in item[1:]:
            up = t.upper()
            if kind == "word" and up in CONSTRAINT_WORDS:
                in_type = False
            if in_type:
                emit((s, e, C.SCHEMA_PUNCT if kind == "punct" else C.SQL_TYPE))
            else:
                _constraint_lexeme(kind, t, s, e, catalog, emit)


def _constraint_words(item, catalog, emit):
    for kind, t, s, e in item:
        _constraint_lexeme(kind, t, s, e, catalog, emit)


def _constraint_lexeme(kind, t, s, e, catalog, emit):
    if kind == "punct":
        emit((s, e, C.SCHEMA_PUNCT))
    elif kind in _LIT:
        emit((s, e, C.SQL_LITERAL))
    elif kind == "word" and t.upper() in CONSTRAINT_WORDS:
        emit((s, e, C.SQL_CONSTRAINT))
    else:
        name = norm_ident(t)
        if name in catalog.columns:
            emit((s, e, C.SQL_COLUMN))
        elif name in catalog.tables:
            emit((s, e, C.SQL_TABLE))
        else:  # a referenced table declared later, or an expression word
            emit((s, e, C.SQL_IDENT))


def catalog_from_texts(texts) -> SqlCatalog:
    """The catalog declared by CREATE TABLE statements anywhere in ``texts``."""
    cat = SqlCatalog()
    for text in texts:
        if text:
            for lx in _statements(text, 0, len(text)):
                parse_statement(lx, cat)
    return cat


class SqlDdlTagger(RegionTagger):
    name = "sql"

    def paint(self, ctx: PromptContext, rmap: RankMap) -> None:
        cat = SqlCatalog()
        found: list[tuple[int, int, list]] = []
        for span in ctx.content_spans:
            if span is None:
                continue
            for lx in _statements(ctx.text, span[0], span[1]):
                spans: list = []
                parse_statement(lx, cat, spans)
                found.append((lx[0][2], lx[-1][3], spans))
        for start, end, spans in found:
            rmap.paint(start, end, C.SCHEMA_PUNCT)  # whitespace between lexemes
            for s, e, cls in spans:
                if cls == C.SQL_IDENT and norm_ident(ctx.text[s:e]) in cat.tables:
                    cls = C.SQL_TABLE  # forward reference to a table declared later
                rmap.paint(s, e, cls)
