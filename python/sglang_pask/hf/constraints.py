"""xgrammar constraints for one chat request: a JSON schema (``response_format``) or the Qwen3
tool-call structural tag (``tools``), matched on CPU with a token bitmask.

Grammar choice (:func:`grammar_spec`): ``response_format`` json_schema -> that schema, json_object
-> any JSON; ``tools`` with ``tool_choice`` auto / required / a named function -> xgrammar's
``qwen_3`` structural tag (``<tool_call>\\n{"name": "<fn>", "arguments": <args>}\\n</tool_call>``,
``<args>`` constrained by the tool's parameter schema); otherwise (or ``tool_choice: none``) no
constraint. Whitespace inside constrained JSON is limited (schema: compact ``", "``/``": "``
separators; tool arguments: at most :data:`MAX_WHITESPACE` chars per gap) so a random-weight model
cannot stall in whitespace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import xgrammar as xgr

MAX_WHITESPACE = 1


def grammar_spec(request: dict) -> Optional[tuple[str, object]]:
    """``(kind, payload)`` describing the request's grammar, or None for free text. Kinds:
    ``schema`` (a JSON schema dict), ``json`` (any JSON), ``tools`` ((tools, tool_choice))."""
    rf = request.get("response_format") or {}
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        js = rf.get("json_schema") or {}
        schema = js.get("schema", js.get("schema_"))
        return ("schema", schema if schema is not None else {})
    if isinstance(rf, dict) and rf.get("type") == "json_object":
        return ("json", None)
    tools = [t for t in (request.get("tools") or []) if t.get("type", "function") == "function"]
    choice = request.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):  # {"type": "function", "function": {"name": ...}}
        name = (choice.get("function") or {}).get("name")
        tools = [t for t in tools if t["function"]["name"] == name]
        if not tools:
            raise ValueError(f"tool_choice names an unknown function {name!r}")
        choice = "forced"
    if choice not in ("auto", "required", "forced"):
        raise ValueError(f"unsupported tool_choice {choice!r}")
    return ("tools", (tools, choice))


class Constraints:
    """Per tokenizer: the xgrammar vocabulary and a compiler (with its cache)."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: Sequence[int]):
        self.vocab_size = int(vocab_size)
        self.stop_token_ids = sorted(set(int(i) for i in stop_token_ids))
        self.info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=2)

    def compile(self, request: dict):
        spec = grammar_spec(request)
        if spec is None:
            return None
        kind, payload = spec
        if kind == "schema":
            return self.compiler.compile_json_schema(
                json.dumps(payload), any_whitespace=False, separators=(", ", ": "))
        if kind == "json":
            return self.compiler.compile_builtin_json_grammar()
        tools, choice = payload
        tag = xgr.get_model_structural_tag(
            "qwen_3", tools=tools, tool_choice=choice, reasoning="disabled",
            max_whitespace_cnt=MAX_WHITESPACE)
        return self.compiler.compile_structural_tag(tag)

    def matcher(self, request: dict) -> Optional["Matcher"]:
        """A fresh matcher for the request, or None when it is unconstrained."""
        compiled = self.compile(request)
        return None if compiled is None else Matcher(compiled, self.vocab_size)


@dataclass
class Matcher:
    """One request's grammar state. ``mask_(logits)`` sets disallowed logits to -inf in place."""

    compiled: object
    vocab_size: int

    def __post_init__(self):
        self.matcher = xgr.GrammarMatcher(self.compiled)
        self.bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)

    def mask_(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: float ``[vocab]`` on CPU, modified in place."""
        if self.matcher.fill_next_token_bitmask(self.bitmask):
            xgr.apply_token_bitmask_inplace(logits.view(1, -1), self.bitmask, vocab_size=self.vocab_size)
        return logits

    def accept(self, token: int) -> bool:
        return self.matcher.accept_token(int(token))

    @property
    def terminated(self) -> bool:
        return self.matcher.is_terminated()
