"""Test-only helpers: the tiny tokenizer, an independent reference tagging of finished JSON
output (from the span-recording parser, not the incremental tracker), and hypothesis strategies."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from .classes import BY_RANK, RANK
from .classes import StructClass as C
from .json_spans import JNode, parse_at

TINY_MODEL = Path(__file__).resolve().parents[3] / "models" / "tiny-random-qwen3"


@lru_cache(maxsize=1)
def tiny_tokenizer():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.environ.get("PASK_TINY_MODEL", str(TINY_MODEL)))
    tok.model_max_length = 1 << 30  # tagging only; long BFCL prompts are never fed to a model
    return tok


def _paint_out(node: JNode, ranks: list, cls_of_str: C, env: bool) -> None:
    if node.kind == "object":
        for key, ks, ke, child in node.items:
            if env:
                sub = C.OUT_FUNC_NAME if key == "name" else C.OUT_VALUE_STR
                _paint_out(child, ranks, sub, False)
            else:
                for k in range(ks + 1, ke - 1):
                    ranks[k] = RANK[C.OUT_ARG_KEY]
                _paint_out(child, ranks, C.OUT_VALUE_STR, False)
    elif node.kind == "array":
        for child in node.items:
            _paint_out(child, ranks, C.OUT_VALUE_STR, False)
    elif node.kind == "string":
        for k in range(node.start + 1, node.end - 1):
            ranks[k] = RANK[cls_of_str]
    else:
        cls = C.OUT_VALUE_NUM if node.kind == "number" else (
            C.OUT_VALUE_NULL if node.value is None else C.OUT_VALUE_BOOL)
        for k in range(node.start, node.end):
            ranks[k] = RANK[cls]


def reference_char_classes(text: str, tool_calls: bool) -> list[C]:
    """Per-char classes of a *finished*, valid output, by parsing it whole."""
    ranks = [RANK[C.OUT_TEXT]] * len(text)
    if not tool_calls:
        node = parse_at(text, 0)
        for k in range(0, len(text)):
            ranks[k] = RANK[C.OUT_DELIM] if k < node.end or text[k].isspace() else RANK[C.OUT_TEXT]
        _paint_out(node, ranks, C.OUT_VALUE_STR, False)
        return [BY_RANK[r] for r in ranks]
    pos = 0
    while True:
        at = text.find("<tool_call>", pos)
        if at < 0:
            break
        body = at + len("<tool_call>")
        node = parse_at(text, body)
        close = text.index("</tool_call>", node.end)
        for k in range(at, body):
            ranks[k] = RANK[C.OUT_TOOL_TAG]
        for k in range(body, close):
            ranks[k] = RANK[C.OUT_DELIM]
        for k in range(close, close + len("</tool_call>")):
            ranks[k] = RANK[C.OUT_TOOL_TAG]
        _paint_out(node, ranks, C.OUT_VALUE_STR, True)
        pos = close + len("</tool_call>")
    return [BY_RANK[r] for r in ranks]


def expected_token_classes(text: str, pieces: list[bytes], tool_calls: bool) -> list[C]:
    """Reference class of each token (``pieces`` are the token bytes, concatenating to text)."""
    chars = reference_char_classes(text, tool_calls)
    byte_ranks: list[int] = []
    for ch, cls in zip(text, chars):
        byte_ranks.extend([RANK[cls]] * len(ch.encode()))
    out, pos = [], 0
    for p in pieces:
        seg = byte_ranks[pos:pos + len(p)]
        out.append(BY_RANK[max(seg)] if seg else None)
        pos += len(p)
    return out


def split_bytes(data: bytes, cuts: list[int]) -> list[bytes]:
    """Split ``data`` at the given offsets (any order, duplicates give empty tokens)."""
    pts = sorted(min(max(c, 0), len(data)) for c in cuts)
    out, prev = [], 0
    for p in pts + [len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


def qwen3_output(calls: list[tuple[str, dict]], prefix: str = "", dumps_kw: dict | None = None) -> str:
    kw = dumps_kw or {}
    blocks = [
        "<tool_call>\n" + json.dumps({"name": n, "arguments": a}, **kw) + "\n</tool_call>"
        for n, a in calls
    ]
    return prefix + "\n".join(blocks)
