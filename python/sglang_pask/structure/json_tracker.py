"""Output tracker for JSON: Qwen3 ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
blocks inside free text (``tool_calls=True``), or one bare JSON value (``response_format``).

An incremental byte-level pushdown automaton; one state tuple per token makes rollback exact.
Byte classes (a token takes the highest-precedence class of its bytes):

* string *contents* carry the class (``OUT_FUNC_NAME`` for the envelope's ``"name"`` value,
  ``OUT_ARG_KEY`` for keys under ``"arguments"`` / of bare JSON, ``OUT_VALUE_STR`` for values);
  quotes, punctuation and whitespace between JSON lexemes are ``OUT_DELIM``;
* numbers / true / false / null are ``OUT_VALUE_NUM`` / ``OUT_VALUE_BOOL`` / ``OUT_VALUE_NULL``;
* the envelope keys (``"name"``, ``"arguments"``) are ``OUT_DELIM``; ``<tool_call>`` and
  ``</tool_call>`` are ``OUT_TOOL_TAG``; everything else (and invalid JSON) is ``OUT_TEXT``.

When classes are final: every JSON class is known at the byte that starts its lexeme (a key's
role from the container it is in, a value's from the key before it), so JSON tokens are final
as soon as they are fed. The only relabelling is a marker split over several tokens: tokens
holding a marker prefix are provisionally ``OUT_TEXT`` and become ``OUT_TOOL_TAG`` when the
marker completes; ``stable`` stops at the first such pending token.
"""

from __future__ import annotations

import re

from .base import OutputTracker
from .classes import RANK
from .classes import StructClass as C

# modes
TEXT, POST, BROKEN, VALUE, OBJ_KEY, KEY, COLON, STR, NUM, LIT, AFTER, DONE = range(12)
# containers on the stack, and what the next value is (vctx)
F_ENV, F_OBJ, F_ARR = 0, 1, 2
V_ENV, V_NAME, V_PLAIN = 0, 1, 2

R_TEXT, R_DELIM, R_TAG = RANK[C.OUT_TEXT], RANK[C.OUT_DELIM], RANK[C.OUT_TOOL_TAG]
R_FUNC, R_KEY, R_STR = RANK[C.OUT_FUNC_NAME], RANK[C.OUT_ARG_KEY], RANK[C.OUT_VALUE_STR]
R_NUM, R_BOOL, R_NULL = RANK[C.OUT_VALUE_NUM], RANK[C.OUT_VALUE_BOOL], RANK[C.OUT_VALUE_NULL]
_CLS_OF_RANK = {RANK[c]: int(c) for c in C}

BEGIN, END = b"<tool_call>", b"</tool_call>"
_WS = frozenset(b" \t\n\r")
_NUMCH = frozenset(b"0123456789+-.eE")
_RUN = re.compile(rb'[^"\\]+')  # a run of plain string bytes
_ENV_VALUE = {b"name": V_NAME}


class JsonTracker(OutputTracker):
    name = "json"

    def __init__(self, tool_calls: bool = True):
        self.tool_calls = tool_calls
        self.reset()

    # state = (mode, stack, vctx, esc, key, cur, mpos, mtok)
    #   stack: tuple of F_*; vctx: role of the next value; esc: in a string after '\';
    #   key: bytes of the current envelope key; cur: rank of the current scalar's bytes;
    #   mpos: bytes of a marker matched so far; mtok: index of the token where that match began.
    def _initial(self):
        if self.tool_calls:
            return (TEXT, (), V_ENV, False, b"", R_TEXT, 0, 0)
        return (VALUE, (), V_PLAIN, False, b"", R_DELIM, 0, 0)

    def reset(self) -> None:
        self._cls = bytearray()
        self._snaps: list[tuple] = []  # _snaps[t]: state before token t
        self._undo: dict[int, list[tuple[int, int]]] = {}  # token t -> [(index, old class)]
        self._state = self._initial()

    @property
    def classes(self):
        return self._cls

    @property
    def stable(self) -> int:
        st = self._state
        return st[7] if st[6] else len(self._cls)

    def state_key(self):
        return (bytes(self._cls), self._state)

    def rollback(self, k: int) -> None:
        if not self._rollback_needed(k):
            return
        n = len(self._cls)
        for t in range(n - 1, n - k - 1, -1):
            for idx, old in reversed(self._undo.pop(t, ())):
                self._cls[idx] = old
        self._state = self._snaps[n - k]
        del self._snaps[n - k:]
        del self._cls[n - k:]

    def _relabel(self, t: int, start: int) -> None:
        """Marker completed in token t: tokens start..t-1 hold its prefix -> OUT_TOOL_TAG."""
        log = self._undo.setdefault(t, [])
        for idx in range(start, t):
            if self._cls[idx] != C.OUT_TOOL_TAG:
                log.append((idx, self._cls[idx]))
                self._cls[idx] = C.OUT_TOOL_TAG

    def feed(self, data: bytes) -> C:
        state = self._state
        self._snaps.append(state)
        mode, stack, vctx, esc, key, cur, mpos, mtok = state
        t = len(self._cls)
        best = 0
        i, n = 0, len(data)
        while i < n:
            if mode == STR or mode == KEY:
                if esc:
                    esc = False
                    if mode == KEY and stack[-1] == F_ENV:
                        key += data[i:i + 1]
                    if cur > best:
                        best = cur
                    i += 1
                    continue
                m = _RUN.match(data, i)
                if m is not None:
                    if mode == KEY and stack[-1] == F_ENV:
                        key += m.group()
                    if cur > best:
                        best = cur
                    i = m.end()
                    continue
                b = data[i]
                i += 1
                if b == 0x5C:  # backslash
                    esc = True
                    if cur > best:
                        best = cur
                    continue
                # closing quote
                if R_DELIM > best:
                    best = R_DELIM
                if mode == KEY:
                    mode = COLON
                    vctx = _ENV_VALUE.get(key, V_PLAIN) if stack[-1] == F_ENV else V_PLAIN
                    continue
                mode = AFTER
                if not stack:
                    mode = POST if self.tool_calls else DONE
                continue
            b = data[i]
            if mode == TEXT or mode == POST or mode == BROKEN:
                marker = BEGIN if mode == TEXT else END
                if b == marker[mpos]:
                    if mpos == 0:
                        mtok = t
                    mpos += 1
                    if mpos == len(marker):
                        if mtok < t:
                            self._relabel(t, mtok)
                        best = R_TAG
                        mpos = 0
                        if mode == TEXT:
                            mode, stack, vctx = VALUE, (), V_ENV
                        else:
                            mode = TEXT
                    elif R_TEXT > best:
                        best = R_TEXT
                elif mode == POST and mpos == 0 and b in _WS:
                    if R_DELIM > best:
                        best = R_DELIM
                else:
                    if mode == POST:
                        mode = BROKEN
                    mpos = 1 if b == 0x3C else 0  # both markers start with '<', once
                    if mpos:
                        mtok = t
                    if R_TEXT > best:
                        best = R_TEXT
                i += 1
                continue
            if mode == NUM or mode == LIT:
                if (b in _NUMCH) if mode == NUM else (0x61 <= b <= 0x7A):
                    if cur > best:
                        best = cur
                    i += 1
                    continue
                mode = AFTER if stack else (POST if self.tool_calls else DONE)
                continue  # re-read b in the new mode
            i += 1
            if b in _WS:
                if R_DELIM > best:
                    best = R_DELIM
                continue
            if mode == VALUE:
                if b == 0x22:
                    mode, cur = STR, (R_FUNC if vctx == V_NAME else R_STR)
                    r = R_DELIM
                elif b == 0x7B:  # {
                    stack = stack + ((F_ENV if vctx == V_ENV else F_OBJ),)
                    mode, r = OBJ_KEY, R_DELIM
                elif vctx == V_ENV:  # a tool call must hold an object
                    mode, r = BROKEN, R_TEXT
                elif b == 0x5B:  # [
                    stack = stack + (F_ARR,)
                    mode, vctx, r = VALUE, V_PLAIN, R_DELIM
                elif b == 0x5D and stack and stack[-1] == F_ARR:  # ] of an empty array
                    stack = stack[:-1]
                    mode = AFTER if stack else (POST if self.tool_calls else DONE)
                    r = R_DELIM
                elif b == 0x2D or 0x30 <= b <= 0x39:
                    mode = NUM
                    cur = r = R_NUM
                elif b == 0x74 or b == 0x66:  # t f
                    mode = LIT
                    cur = r = R_BOOL
                elif b == 0x6E:  # n
                    mode = LIT
                    cur = r = R_NULL
                else:
                    mode, r = (BROKEN if self.tool_calls else DONE), R_TEXT
            elif mode == OBJ_KEY:
                if b == 0x22:
                    mode, key, r = KEY, b"", R_DELIM
                    cur = R_DELIM if stack[-1] == F_ENV else R_KEY
                elif b == 0x7D:  # } of an empty object
                    stack = stack[:-1]
                    mode = AFTER if stack else (POST if self.tool_calls else DONE)
                    r = R_DELIM
                else:
                    mode, r = (BROKEN if self.tool_calls else DONE), R_TEXT
            elif mode == COLON:
                if b == 0x3A:
                    mode, r = VALUE, R_DELIM
                else:
                    mode, r = (BROKEN if self.tool_calls else DONE), R_TEXT
            elif mode == AFTER:
                top = stack[-1]
                if b == 0x2C:  # ,
                    if top == F_ARR:
                        mode, vctx = VALUE, V_PLAIN
                    else:
                        mode = OBJ_KEY
                    r = R_DELIM
                elif (b == 0x7D and top != F_ARR) or (b == 0x5D and top == F_ARR):
                    stack = stack[:-1]
                    if not stack:
                        mode = POST if self.tool_calls else DONE
                    r = R_DELIM
                else:
                    mode, r = (BROKEN if self.tool_calls else DONE), R_TEXT
            else:  # DONE (bare JSON): anything after the value is text
                r = R_TEXT
            if r > best:
                best = r
        if best == 0:  # an empty token: the class of the context it sits in
            best = R_TEXT if mode in (TEXT, BROKEN) else (
                cur if mode in (STR, KEY, NUM, LIT) else R_DELIM)
        self._state = (mode, stack, vctx, esc, key, cur, mpos, mtok)
        c = _CLS_OF_RANK[best]
        self._cls.append(c)
        return C(c)
