"""Output tracker for generated SQL: keywords, identifiers that name a known table or column
(from the prompt's CREATE TABLE statements), other identifiers, literals, delimiters.

Lexemes can span tokens (``SEL`` + ``ECT``), so a lexeme's class is final only once a byte
after it has been fed; until then the tokens overlapping it carry a provisional class computed
from the partial lexeme, and ``stable`` stops at the first of them. Per token we store the
max rank of the *final* lexemes it overlaps (``_fixed``); its class is that max'd with the open
lexeme's provisional rank. Relabelling is therefore confined to tokens overlapping the open
lexeme, which is what each per-token snapshot saves for rollback.
"""

from __future__ import annotations

from bisect import bisect_right

from .base import OutputTracker
from .classes import BY_RANK, RANK
from .classes import StructClass as C
from .sql_lexer import KEYWORDS, LEX_BYTES, SqlCatalog, norm_ident

_R = {k: RANK[c] for k, c in (
    ("ws", C.OUT_DELIM), ("punct", C.OUT_DELIM), ("comment", C.OUT_TEXT),
    ("string", C.SQL_LITERAL), ("number", C.SQL_LITERAL))}


class SqlTracker(OutputTracker):
    name = "sql"

    def __init__(self, catalog: SqlCatalog | None = None):
        self.catalog = catalog or SqlCatalog()
        self.reset()

    def reset(self) -> None:
        self._buf = bytearray()
        self._starts: list[int] = []  # byte offset where token t starts
        self._fixed = bytearray()  # rank of final lexemes overlapping token t
        self._cls = bytearray()
        self._open = 0  # byte offset of the first lexeme that is not final
        self._snaps: list[tuple] = []  # state before token t: (open, first, fixed[first:], cls[first:])

    @property
    def classes(self):
        return self._cls

    @property
    def stable(self) -> int:
        if self._open >= len(self._buf):
            return len(self._cls)
        return bisect_right(self._starts, self._open) - 1

    def state_key(self):
        return (bytes(self._cls), bytes(self._fixed), bytes(self._buf), self._open)

    def _rank(self, kind: str, text: bytes) -> int:
        if kind in ("word", "quoted"):
            s = text.decode("utf-8", "replace")
            name = norm_ident(s)
            if name in self.catalog.tables:
                return RANK[C.SQL_TABLE]
            if name in self.catalog.columns:
                return RANK[C.SQL_COLUMN]
            if kind == "word" and s.upper() in KEYWORDS:
                return RANK[C.SQL_KEYWORD]
            return RANK[C.SQL_IDENT]
        return _R[kind]

    def _tok(self, off: int) -> int:
        return bisect_right(self._starts, off) - 1

    def feed(self, data: bytes) -> C:
        t = len(self._cls)
        first = self._tok(self._open) if self._open < len(self._buf) else t
        self._snaps.append((self._open, first, bytes(self._fixed[first:]), bytes(self._cls[first:])))
        self._starts.append(len(self._buf))
        self._buf += data
        self._fixed.append(0)
        self._cls.append(0)
        buf, n = self._buf, len(self._buf)
        open_rank, open_start = 0, n
        for m in LEX_BYTES.finditer(buf, self._open):
            s, e = m.span()
            r = self._rank(m.lastgroup, m.group())
            if e < n:  # final: a later byte exists
                for k in range(self._tok(s), self._tok(e - 1) + 1):
                    if r > self._fixed[k]:
                        self._fixed[k] = r
                self._open = e
            else:
                open_rank, open_start = r, s
        o = self._tok(open_start) if open_start < n else t + 1
        for k in range(first, t + 1):
            r = self._fixed[k]
            if k >= o and open_rank > r:
                r = open_rank
            if r == 0:  # an empty token: class of the context
                r = open_rank or RANK[C.OUT_DELIM]
            self._cls[k] = int(BY_RANK[r])
        return C(self._cls[t])

    def rollback(self, k: int) -> None:
        if not self._rollback_needed(k):
            return
        n = len(self._cls)
        t = n - k
        self._open, first, fixed, cls = self._snaps[t]
        del self._buf[self._starts[t]:]
        del self._starts[t:], self._snaps[t:]
        self._fixed[first:] = fixed
        self._cls[first:] = cls
