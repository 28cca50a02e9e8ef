"""What one reference-runner generation returns, and the Qwen3 tool-call parser for its text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> Optional[list[dict]]:
    """OpenAI-style ``[{"type": "function", "function": {"name", "arguments": str}}]`` from the
    ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks of ``text``; blocks
    that are not such JSON objects are skipped. None when there is no valid block."""
    calls = []
    for m in _CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append({"type": "function", "function": {
            "name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}})
    return calls or None


@dataclass
class Compression:
    """One compression point. ``seq_len``: logical tokens written so far (positions ``>=
    seq_len`` are queried only after it). ``allocation[l]``: slots the method assigned layer
    ``l``; ``kept[l]`` / ``dropped[l]``: int64 positions of layer ``l`` after / removed (per-head
    methods: ``kept[l]`` is the union of the heads' sets, ``head_mask[l]`` bool ``[kv_heads,
    len(kept[l])]`` which of them each KV head keeps; ``allocation`` counts per head)."""

    step: int  # generated tokens fed to the model so far (0: right after prefill)
    seq_len: int
    allocation: list[int]
    kept: list[np.ndarray]
    dropped: list[np.ndarray]
    head_mask: Optional[list[np.ndarray]] = None


@dataclass
class Result:
    """``text``: the generated text (stop token excluded, ``<tool_call>`` blocks included);
    ``tool_calls``: parsed from it (None if none); ``kept``: group -> positions its first layer
    holds at the end; ``tokens``: generated tokens (stop token included, as OpenAI counts)."""

    text: str
    tool_calls: Optional[list[dict]]
    kept: dict[str, list[int]]
    tokens: int
    token_ids: list[int]
    prompt_ids: list[int]
    classes: list[int]  # StructClass of every logical position (prompt + fed output tokens)
    finish_reason: str  # "stop" (stop token / grammar end) or "length"
    groups: list[list[int]]
    retained: list[np.ndarray]  # per layer, positions held at the end
    compressions: list[Compression] = field(default_factory=list)
    logits: Optional[list] = None  # per generated token: raw float32 [vocab] (before the grammar mask)
    kv_bytes: int = 0  # bytes of K/V held at the end
    timings: dict = field(default_factory=dict)
    cache: Optional[object] = None  # the final PrunableCache (generate(keep_cache=True))
    segment_end: int = 0  # S > 0: positions 0..S-1 were a shared segment, compressed alone
    segment: Optional[Compression] = None  # that compression (step 0, seq_len S), before the rest

    def to_json(self) -> dict:
        return {"text": self.text, "tool_calls": self.tool_calls, "kept": self.kept,
                "tokens": self.tokens}
