"""A small SQL lexer shared by the DDL tagger and the SQL output tracker (not a parser).

Lexemes: whitespace, comments, string literals, numbers, quoted identifiers, words, punctuation.
Works on ``str`` or ``bytes`` (two compiled patterns, same groups).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PATTERN = (
    r"(?P<ws>\s+)"
    r"|(?P<comment>--[^\n]*|/\*(?:[^*]|\*(?!/))*(?:\*/)?)"
    r"|(?P<string>'(?:[^']|'')*'?)"
    r"|(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)"
    r'|(?P<quoted>"(?:[^"]|"")*"?|`[^`]*`?|\[[^\]\s]*\]?)'
    r"|(?P<word>[A-Za-z_\x80-\uffff][A-Za-z0-9_$\x80-\uffff]*)"
    r"|(?P<punct>.)"
)
LEX_STR = re.compile(_PATTERN, re.S)
LEX_BYTES = re.compile(
    _PATTERN.replace(r"\x80-\uffff", r"\x80-\xff").encode(), re.S
)

#: words that start / are a column or table constraint
CONSTRAINT_WORDS = frozenset(
    "PRIMARY KEY FOREIGN REFERENCES UNIQUE CHECK CONSTRAINT NOT NULL DEFAULT AUTOINCREMENT "
    "AUTO_INCREMENT COLLATE ON DELETE UPDATE CASCADE RESTRICT SET ACTION NO INDEX GENERATED "
    "ALWAYS AS IDENTITY STORED VIRTUAL ASC DESC CONFLICT REPLACE ABORT FAIL IGNORE ROLLBACK "
    "DEFERRABLE INITIALLY DEFERRED IMMEDIATE MATCH FULL PARTIAL SIMPLE UNSIGNED".split()
)
#: words that start a table-level constraint inside CREATE TABLE ( ... )
TABLE_CONSTRAINT_START = frozenset("PRIMARY FOREIGN UNIQUE CHECK CONSTRAINT KEY INDEX".split())

KEYWORDS = frozenset(
    "SELECT FROM WHERE AND OR NOT IN IS NULL LIKE ILIKE BETWEEN EXISTS AS ON JOIN INNER LEFT "
    "RIGHT FULL OUTER CROSS NATURAL USING GROUP BY ORDER HAVING LIMIT OFFSET DISTINCT ALL UNION "
    "INTERSECT EXCEPT CASE WHEN THEN ELSE END ASC DESC INSERT INTO VALUES UPDATE SET DELETE "
    "CREATE TABLE VIEW INDEX DROP ALTER ADD COLUMN IF WITH RECURSIVE TRUE FALSE COUNT SUM AVG "
    "MIN MAX CAST COALESCE NULLIF ROUND LENGTH LOWER UPPER SUBSTR SUBSTRING ABS DATE TIME "
    "TIMESTAMP INTERVAL EXTRACT OVER PARTITION ROW_NUMBER RANK FETCH FIRST NEXT ROWS ONLY TEMP "
    "TEMPORARY REPLACE RETURNING PRIMARY KEY FOREIGN REFERENCES UNIQUE CHECK CONSTRAINT DEFAULT"
    .split()
)


def norm_ident(raw: str) -> str:
    """Identifier text without quotes, lower-cased (SQL identifiers compare case-insensitively)."""
    if raw[:1] in ('"', "`", "["):
        raw = raw[1:-1] if len(raw) > 1 and raw[-1] in ('"', "`", "]") else raw[1:]
    return raw.lower()


@dataclass
class SqlCatalog:
    """Tables and columns declared by CREATE TABLE statements (normalised names)."""

    tables: set[str] = field(default_factory=set)
    columns: set[str] = field(default_factory=set)
    table_columns: dict[str, list[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.tables)
