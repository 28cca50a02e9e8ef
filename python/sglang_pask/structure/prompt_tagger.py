"""Chat request + HF tokenizer -> one class per prompt token (:class:`PromptTags`).

Steps (each painting a per-char rank map over the rendered prompt; later steps overwrite):

1. validate ``messages`` / ``tools`` / ``response_format`` (errors name the path);
2. render with the tokenizer's chat template (``chat_template_kwargs`` passed to it as keyword
   arguments, as SGLang does); message contents are located exactly by rendering
   a second time with each content replaced by a unique marker (falls back to in-order search
   when the template rewrites contents, with a note);
3. fill ``TEMPLATE_TEXT``; contents -> ``SYSTEM_TEXT`` (system) or ``QUERY_TEXT`` (others);
4. region taggers (tools JSON, response_format schema, SQL DDL) paint what they find;
5. literal values inside non-system contents -> ``QUERY_VALUE`` (only over ``QUERY_TEXT``);
6. tokenize with offsets; a token takes its chars' highest-precedence class; special and added
   tokens (ids in ``added_tokens_decoder``) are ``TEMPLATE_SPECIAL``.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from .base import PromptContext, PromptTags, RegionTagger
from .classes import RANK
from .classes import StructClass as C
from .query_values import enum_pattern, value_spans
from .schema_painter import collect_literals
from .spans import RankMap
from .validate import ToolSchemaError, validate_messages, validate_response_format, validate_tools

_MARK = re.compile("\ue000(\\d+)\ue001")


def flatten_content(content: Any) -> str | None:
    """OpenAI content parts -> one string (text parts joined); strings pass through."""
    if content is None or isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


class PromptTagger:
    """Tags the rendered prompt of chat requests for one tokenizer (reusable, stateless per call)."""

    def __init__(self, tokenizer, taggers: Sequence[RegionTagger]):
        self.tokenizer = tokenizer
        self.taggers = list(taggers)
        self.special_ids = frozenset(getattr(tokenizer, "added_tokens_decoder", {}) or ()) | frozenset(
            tokenizer.all_special_ids)

    def _render(self, messages: list[dict], tools: list[dict], template_kwargs: dict) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools or None, tokenize=False, add_generation_prompt=True,
                **template_kwargs)
        except Exception as e:  # template errors (raise_exception, missing template, ...)
            raise ToolSchemaError("messages", f"the chat template failed to render: {e}") from e

    def render(self, messages: list[dict], tools: list[dict], notes: list[str],
               template_kwargs: dict | None = None):
        """(text, content_spans): the rendered prompt and each message content's char range.
        ``template_kwargs``: extra template variables (a request's ``chat_template_kwargs``)."""
        template_kwargs = template_kwargs or {}
        text = self._render(messages, tools, template_kwargs)
        marked = [dict(m, content=f"\ue000{i}\ue001") if m.get("content") else m
                  for i, m in enumerate(messages)]
        skeleton = self._render(marked, tools, template_kwargs)
        spans: list[tuple[int, int] | None] = [None] * len(messages)
        parts, pos, out_len = [], 0, 0
        for m in _MARK.finditer(skeleton):
            i = int(m.group(1))
            lit = skeleton[pos:m.start()]
            parts.append(lit)
            out_len += len(lit)
            content = messages[i]["content"]
            spans[i] = (out_len, out_len + len(content))
            parts.append(content)
            out_len += len(content)
            pos = m.end()
        parts.append(skeleton[pos:])
        if "".join(parts) == text:
            return text, spans
        # The template rewrites contents (e.g. strips them): locate each one in order.
        notes.append("chat template alters message contents; contents located by in-order search")
        spans, pos = [None] * len(messages), 0
        for i, m in enumerate(messages):
            c = (m.get("content") or "").strip()
            if c:
                at = text.find(c, pos)
                if at >= 0:
                    spans[i] = (at, at + len(c))
                    pos = at + len(c)
        return text, spans

    def tag(self, request: dict) -> PromptTags:
        messages = [dict(m, content=flatten_content(m.get("content")))
                    for m in validate_messages(request.get("messages"))]
        tools = validate_tools(request.get("tools"))
        schema = validate_response_format(request.get("response_format"))
        template_kwargs = request.get("chat_template_kwargs") or {}
        if not isinstance(template_kwargs, dict):
            raise ToolSchemaError("chat_template_kwargs", "must be an object")
        notes: list[str] = []
        text, content_spans = self.render(messages, tools, notes, template_kwargs)
        ctx = PromptContext(text, messages, tools, schema, content_spans, notes)

        rmap = RankMap(len(text), C.TEMPLATE_TEXT)
        for m, span in zip(messages, content_spans):
            if span is not None:
                rmap.paint(*span, C.SYSTEM_TEXT if m["role"] in ("system", "developer") else C.QUERY_TEXT)
        for tagger in self.taggers:
            tagger.paint(ctx, rmap)

        literals: set[str] = set()
        for t in tools:
            collect_literals(t["function"].get("parameters"), literals)
        collect_literals(schema, literals)
        enums = enum_pattern(literals)
        ranks, q, v = rmap.ranks, RANK[C.QUERY_TEXT], RANK[C.QUERY_VALUE]
        for m, span in zip(messages, content_spans):
            if span is None or m["role"] in ("system", "developer"):
                continue
            for s, e in value_spans(text, span[0], span[1], enums):
                for k in range(s, e):
                    if ranks[k] == q:
                        ranks[k] = v

        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]
        classes = rmap.token_classes(offsets)
        special = self.special_ids
        for k, tid in enumerate(ids):
            if tid in special:
                classes[k] = C.TEMPLATE_SPECIAL
        return PromptTags(text, ids, offsets, classes, notes)
