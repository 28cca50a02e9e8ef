"""The closed enum of structural classes and the one precedence rule between them.

Every token of a request (prompt and output) gets exactly one :class:`StructClass`. Values are
small ints (< 64) so per-token tags fit a ``bytearray`` and span tags ``(start, end, class)``
stay compact. Adding a class is one line here plus one entry in :data:`PRECEDENCE` (a test
checks that every class appears there exactly once).

Straddling tokens: a token covering characters (or bytes) of several classes takes the one that
comes first in :data:`PRECEDENCE`. E.g. BPE ``'",'`` after a string value is that value's
class, not punctuation; ``'"get'`` opening a tool name is ``TOOL_NAME``.
"""

from __future__ import annotations

from enum import IntEnum


class StructClass(IntEnum):
    OTHER = 0  #: nothing more specific applies (should be rare; a test counts it)
    # --- prompt: chat template ---
    TEMPLATE_SPECIAL = 1  #: a special / added token of the tokenizer (<|im_start|>, <tool_call>, ...)
    TEMPLATE_TEXT = 2  #: text the chat template inserts (role names, tool-use instructions, newlines)
    SYSTEM_TEXT = 3  #: content of a system message
    QUERY_TEXT = 4  #: content of a user / tool / assistant-history message that is not a value
    QUERY_VALUE = 5  #: a literal in a message: number, quoted string, date, enum literal word
    # --- prompt: tool and schema JSON ---
    TOOL_NAME = 6  #: characters of a function's name (inside its quotes)
    DESCRIPTION = 7  #: a description / title string (function or parameter)
    PARAM_NAME = 8  #: a key under ``properties`` (any nesting), even if it reads "type"/"required"
    PARAM_TYPE = 9  #: a value of a schema ``type`` keyword ("string", ["integer", "null"], ...)
    ENUM_VALUE = 10  #: a member of an ``enum`` array, or a ``const`` value
    REQUIRED_LIST = 11  #: a member of a ``required`` array
    DEFAULT_VALUE = 12  #: the value of a ``default`` keyword (all of it, if nested)
    SCHEMA_KEY = 13  #: a known JSON-schema / tool keyword used as a key ("type", "properties", ...)
    SCHEMA_TEXT = 14  #: unknown keywords and their values, formats, patterns, other schema strings
    SCHEMA_PUNCT = 15  #: JSON punctuation, quotes and whitespace inside tool/schema JSON or DDL
    # --- output (generated tokens) ---
    OUT_FUNC_NAME = 16  #: characters of a called function's name
    OUT_ARG_KEY = 17  #: an argument key (any object key inside "arguments", or in bare JSON output)
    OUT_VALUE_STR = 18  #: an argument string value
    OUT_VALUE_NUM = 19  #: an argument number
    OUT_VALUE_BOOL = 20  #: ``true`` / ``false``
    OUT_VALUE_NULL = 21  #: ``null``
    OUT_DELIM = 22  #: JSON punctuation / whitespace, the envelope keys "name" / "arguments"
    OUT_TOOL_TAG = 23  #: ``<tool_call>`` / ``</tool_call>`` markers
    OUT_TEXT = 24  #: free text outside tool calls (and unparseable output)
    # --- SQL (DDL in the prompt, generated SQL) ---
    SQL_TABLE = 25  #: a table name declared by CREATE TABLE, or a reference to one
    SQL_COLUMN = 26  #: a column name declared in CREATE TABLE, or a reference to one
    SQL_TYPE = 27  #: a column type (INTEGER, VARCHAR(20), ...)
    SQL_CONSTRAINT = 28  #: constraint words (PRIMARY KEY, NOT NULL, UNIQUE, REFERENCES, DEFAULT, ...)
    SQL_KEYWORD = 29  #: other SQL keywords (CREATE, TABLE, SELECT, FROM, WHERE, ...)
    SQL_IDENT = 30  #: an identifier that is not a known table or column (alias, function name)
    SQL_LITERAL = 31  #: a number or string literal in SQL


#: Highest precedence first. A token overlapping several classes gets the earliest one. Reasoning:
#: special tokens are atomic; names and keys identify *which* call/argument; values and literal
#: lists carry content the call copies; types/constraints/descriptions explain; keywords and
#: prose are context; punctuation and whitespace come last.
PRECEDENCE: tuple[StructClass, ...] = (
    StructClass.TEMPLATE_SPECIAL,
    StructClass.OUT_TOOL_TAG,
    StructClass.TOOL_NAME,
    StructClass.OUT_FUNC_NAME,
    StructClass.PARAM_NAME,
    StructClass.OUT_ARG_KEY,
    StructClass.SQL_TABLE,
    StructClass.SQL_COLUMN,
    StructClass.ENUM_VALUE,
    StructClass.REQUIRED_LIST,
    StructClass.QUERY_VALUE,
    StructClass.OUT_VALUE_STR,
    StructClass.OUT_VALUE_NUM,
    StructClass.OUT_VALUE_BOOL,
    StructClass.OUT_VALUE_NULL,
    StructClass.SQL_LITERAL,
    StructClass.DEFAULT_VALUE,
    StructClass.PARAM_TYPE,
    StructClass.SQL_TYPE,
    StructClass.SQL_CONSTRAINT,
    StructClass.DESCRIPTION,
    StructClass.SCHEMA_KEY,
    StructClass.SQL_KEYWORD,
    StructClass.SQL_IDENT,
    StructClass.SCHEMA_TEXT,
    StructClass.SYSTEM_TEXT,
    StructClass.QUERY_TEXT,
    StructClass.OUT_TEXT,
    StructClass.TEMPLATE_TEXT,
    StructClass.SCHEMA_PUNCT,
    StructClass.OUT_DELIM,
    StructClass.OTHER,
)

#: RANK[c]: larger wins. Ranks let a straddling token be resolved with ``max`` over a bytearray.
RANK: tuple[int, ...] = tuple(
    len(PRECEDENCE) - PRECEDENCE.index(c) for c in sorted(StructClass, key=int)
)
#: BY_RANK[r] -> class (inverse of RANK); index 0 is unused.
BY_RANK: tuple[StructClass, ...] = (StructClass.OTHER,) + tuple(reversed(PRECEDENCE))


def resolve(classes) -> StructClass:
    """The one class a token overlapping ``classes`` (an iterable of classes) gets."""
    best = 0
    for c in classes:
        r = RANK[c]
        if r > best:
            best = r
    return BY_RANK[best]


#: Colours for the text / html views (one per class, loosely grouped by role).
COLOURS: dict[StructClass, str] = {
    StructClass.OTHER: "#9e9e9e",
    StructClass.TEMPLATE_SPECIAL: "#6a1b9a",
    StructClass.TEMPLATE_TEXT: "#b0bec5",
    StructClass.SYSTEM_TEXT: "#78909c",
    StructClass.QUERY_TEXT: "#90a4ae",
    StructClass.QUERY_VALUE: "#e65100",
    StructClass.TOOL_NAME: "#d50000",
    StructClass.DESCRIPTION: "#8d6e63",
    StructClass.PARAM_NAME: "#2962ff",
    StructClass.PARAM_TYPE: "#00838f",
    StructClass.ENUM_VALUE: "#ff6d00",
    StructClass.REQUIRED_LIST: "#c51162",
    StructClass.DEFAULT_VALUE: "#ffab00",
    StructClass.SCHEMA_KEY: "#558b2f",
    StructClass.SCHEMA_TEXT: "#9ccc65",
    StructClass.SCHEMA_PUNCT: "#cfd8dc",
    StructClass.OUT_FUNC_NAME: "#d50000",
    StructClass.OUT_ARG_KEY: "#2962ff",
    StructClass.OUT_VALUE_STR: "#ff6d00",
    StructClass.OUT_VALUE_NUM: "#ef6c00",
    StructClass.OUT_VALUE_BOOL: "#f57f17",
    StructClass.OUT_VALUE_NULL: "#bf360c",
    StructClass.OUT_DELIM: "#cfd8dc",
    StructClass.OUT_TOOL_TAG: "#6a1b9a",
    StructClass.OUT_TEXT: "#90a4ae",
    StructClass.SQL_TABLE: "#d50000",
    StructClass.SQL_COLUMN: "#2962ff",
    StructClass.SQL_TYPE: "#00838f",
    StructClass.SQL_CONSTRAINT: "#c51162",
    StructClass.SQL_KEYWORD: "#558b2f",
    StructClass.SQL_IDENT: "#8d6e63",
    StructClass.SQL_LITERAL: "#ff6d00",
}
