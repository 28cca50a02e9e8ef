"""Tool calls of earlier assistant turns, as rendered in the prompt -> output classes.

For an assistant message with ``tool_calls``, each call's ``{"name": ..., "arguments": {...}}``
object is located by parsing (as for tools) between that message's neighbours, and painted as
the output tracker would tag it: ``OUT_FUNC_NAME``, ``OUT_ARG_KEY``, ``OUT_VALUE_*``, with
envelope keys and punctuation ``OUT_DELIM``. So a request's earlier calls and its new ones
share classes. Calls not found (another template layout) are noted, not guessed.
"""

from __future__ import annotations

import json

from .base import PromptContext, RegionTagger
from .classes import StructClass as C
from .json_spans import JNode, find_objects
from .spans import RankMap


def _value(node: JNode, rmap: RankMap) -> None:
    if node.kind == "object":
        for _k, ks, ke, child in node.items:
            rmap.paint(ks + 1, ke - 1, C.OUT_ARG_KEY)
            _value(child, rmap)
    elif node.kind == "array":
        for child in node.items:
            _value(child, rmap)
    elif node.kind == "string":
        rmap.paint(node.start + 1, node.end - 1, C.OUT_VALUE_STR)
    elif node.kind == "number":
        rmap.paint(node.start, node.end, C.OUT_VALUE_NUM)
    else:
        rmap.paint(node.start, node.end, C.OUT_VALUE_NULL if node.value is None else C.OUT_VALUE_BOOL)


def paint_call(node: JNode, rmap: RankMap) -> None:
    """Paint one ``{"name": ..., "arguments": ...}`` object with output classes."""
    rmap.paint(node.start, node.end, C.OUT_DELIM)
    for key, _ks, _ke, child in node.items:
        if key == "name" and child.kind == "string":
            rmap.paint(child.start + 1, child.end - 1, C.OUT_FUNC_NAME)
        else:
            _value(child, rmap)


def _wanted(call) -> dict | None:
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        return None
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return {"name": fn["name"], "arguments": args}


class HistoryCallsTagger(RegionTagger):
    name = "history"

    def paint(self, ctx: PromptContext, rmap: RankMap) -> None:
        spans = ctx.content_spans
        for i, m in enumerate(ctx.messages):
            calls = m.get("tool_calls") if m.get("role") == "assistant" else None
            if not calls:
                continue
            wanted = [w for w in map(_wanted, calls) if w is not None]
            prev = [s[1] for s in spans[: i + 1] if s is not None]
            nxt = [s[0] for s in spans[i + 1:] if s is not None]
            start, end = (prev[-1] if prev else 0), (nxt[0] if nxt else len(ctx.text))
            found = 0
            for _j, node in find_objects(ctx.text, wanted, start, end):
                paint_call(node, rmap)
                found += 1
            if found < len(wanted) or len(wanted) < len(calls):
                ctx.notes.append(f"messages[{i}].tool_calls: not all calls found in the rendered prompt")
