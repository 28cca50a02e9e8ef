"""Model output -> BFCL's decoded format ``[{bfcl_name: {arg: value}}]``.

Two sources, one result type:
  * Qwen3 text: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, possibly several
    blocks. Whitespace around the JSON is free (BFCL's own Qwen decoder demands exactly one
    newline each side); text outside the blocks and ``<think>...</think>`` are ignored.
  * OpenAI ``tool_calls`` from a server response (``[{"function": {"name", "arguments": str}}]``).
    A response without ``tool_calls`` falls back to decoding its text content, so a call the
    server's parser could not extract still gets its precise error type.

Names are mapped back with the entry's name map (bfcl_tools). Malformed output never raises; it
gives :class:`Decoded` with ``calls=None`` and one of the error types below. Any malformed block
invalidates the whole output (stricter than BFCL, which silently drops bad JSON blocks).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sglang_pask.eval.bfcl_tools import restore_call

__all__ = ["Decoded", "decode_text", "decode_tool_calls", "decode_response", "render_tool_calls", "ERROR_TYPES"]

NO_CALL = "decode:no_tool_call"  # no <tool_call> block / no tool_calls (plain text, wrong wrapper)
TRUNCATED = "decode:truncated"  # a <tool_call> opened but never closed
BAD_JSON = "decode:invalid_json"  # block content (or OpenAI arguments) is not JSON
BAD_SHAPE = "decode:wrong_format"  # JSON but not {"name": str, "arguments": object}
ERROR_TYPES = (NO_CALL, TRUNCATED, BAD_JSON, BAD_SHAPE)

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


@dataclass(frozen=True)
class Decoded:
    calls: list | None  # [{bfcl_name: {arg: value}}] or None when malformed
    error_type: str = ""
    error: str = ""


def _bad(kind: str, detail: str) -> Decoded:
    return Decoded(None, kind, detail[:300])


def _one_call(name: object, args: object, name_map: dict[str, str]) -> dict | Decoded:
    if not isinstance(name, str) or not name:
        return _bad(BAD_SHAPE, f"function name is not a non-empty string: {name!r}")
    if isinstance(args, str):  # some servers/models put the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return _bad(BAD_JSON, f"arguments of {name!r}: {e}")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return _bad(BAD_SHAPE, f"arguments of {name!r} is {type(args).__name__}, not an object")
    return {restore_call(name, name_map): args}


def decode_text(text: str | None, name_map: dict[str, str] | None = None) -> Decoded:
    """Decode Qwen3 ``<tool_call>`` blocks from generated text."""
    name_map = name_map or {}
    s = _THINK.sub("", text or "")
    calls: list[dict] = []
    pos = 0
    while True:
        i = s.find(_OPEN, pos)
        if i < 0:
            break
        j = s.find(_CLOSE, i + len(_OPEN))
        nxt = s.find(_OPEN, i + len(_OPEN))
        if j < 0 or (0 <= nxt < j):
            return _bad(TRUNCATED, f"<tool_call> at char {i} is not closed")
        body = s[i + len(_OPEN) : j].strip()
        pos = j + len(_CLOSE)
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            return _bad(BAD_JSON, f"block at char {i}: {e}")
        if not isinstance(obj, dict) or "name" not in obj:
            return _bad(BAD_SHAPE, f"block at char {i} is not {{'name', 'arguments'}}")
        one = _one_call(obj.get("name"), obj.get("arguments", obj.get("parameters", {})), name_map)
        if isinstance(one, Decoded):
            return one
        calls.append(one)
    if not calls:
        return _bad(NO_CALL, "no <tool_call> block in output")
    return Decoded(calls)


def decode_tool_calls(tool_calls: list, name_map: dict[str, str] | None = None) -> Decoded:
    """Decode OpenAI ``tool_calls`` (dicts as in the JSON response, or SDK objects)."""
    name_map = name_map or {}
    calls: list[dict] = []
    for k, tc in enumerate(tool_calls or []):
        if hasattr(tc, "model_dump"):
            tc = tc.model_dump()
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict):
            return _bad(BAD_SHAPE, f"tool_calls[{k}] has no function object")
        one = _one_call(fn.get("name"), fn.get("arguments"), name_map)
        if isinstance(one, Decoded):
            return one
        calls.append(one)
    if not calls:
        return _bad(NO_CALL, "no tool_calls in response")
    return Decoded(calls)


def decode_response(text: str | None, tool_calls: list | None, name_map: dict[str, str] | None = None) -> Decoded:
    """Server tool_calls when present, else the text content's ``<tool_call>`` blocks."""
    if tool_calls:
        return decode_tool_calls(tool_calls, name_map)
    return decode_text(text, name_map)


def render_tool_calls(calls: list[dict]) -> str:
    """Qwen3 text for ``[{name: args}]`` calls (names as given): the inverse of decode_text."""
    blocks = []
    for c in calls:
        ((name, args),) = c.items()
        blocks.append(f"{_OPEN}\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n{_CLOSE}")
    return "\n".join(blocks)
