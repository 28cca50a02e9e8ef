"""One rendering path: an OpenAI chat request -> the prompt token ids and classes SGLang runs.

:func:`render_chat` is the only place that decides how a chat request becomes a prompt. The
server hook, the reference runner (``pask generate``), ``pask tag``, the hf eval backend and the
trainer all call it, so one request has one set of token positions everywhere.

What SGLang 0.5.23 does (``OpenAIServingChat._process_messages`` / ``_apply_jinja_template``, the
Jinja-template path) and this module mirrors, using SGLang's own request model and helpers:

* the body is parsed into SGLang's ``ChatCompletionRequest`` (pydantic errors name the field);
* messages are ``model_dump()``-ed, assistant tool-call arguments parsed from JSON strings
  (``normalize_assistant_tool_call_arguments``), a ``None`` content becomes ``""``, content parts
  are processed for the template's content format (``process_content_for_template_format``:
  ``"string"`` templates get the text parts joined by a space; ``None`` fields are dropped) and
  tool-message parts flattened (``normalize_tool_content``);
* tools are ``model_dump()``-ed (so unset fields appear: ``"strict": false``,
  ``"defer_loading": null``); only the named tool for a named ``tool_choice``; none for
  ``tool_choice="none"``;
* the template gets ``chat_template_kwargs`` (after ``reasoning_effort``, if set) as keyword
  arguments of ``apply_chat_template``, with ``add_generation_prompt=True``;
* the rendered text is tokenized without added special tokens.

The prompt tagger (:mod:`sglang_pask.structure`) then classes every token of exactly that view.
Not mirrored (no model here uses them): ``continue_final_message`` / assistant prefill,
SGLang's named conversation templates, custom encoders (DeepSeek-V3.2, Kimi), and the tool-result
reordering of templates that render tool results by position. A server-side mismatch is caught:
the hook compares the ids with the ones SGLang runs and notes a difference in the tag log.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from sglang_pask.structure import OutputTracker, PromptTagger, PromptTags, make_prompt_tagger, tracker_for_request
from sglang_pask.structure.validate import (
    validate_messages,
    validate_response_format,
    validate_text,
    validate_tools,
)

__all__ = ["RenderedPrompt", "render_chat", "special_tokens", "system_segment_end", "validate_request_text"]


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered chat request: ``view`` is what the chat template saw (``messages``, ``tools``,
    ``response_format``, ``chat_template_kwargs``), ``tags`` the tokens and their classes."""

    view: dict[str, Any]
    tags: PromptTags

    @property
    def token_ids(self) -> list[int]:
        return self.tags.token_ids

    @property
    def classes(self) -> list[int]:
        return [int(c) for c in self.tags.classes]

    @property
    def text(self) -> str:
        return self.tags.text

    @property
    def offsets(self) -> list[tuple[int, int]]:
        return self.tags.offsets

    @property
    def notes(self) -> list[str]:
        return self.tags.notes

    @property
    def segment_end(self) -> int:
        """Tokens of the shared segment: the system message (where chat templates put the tools
        block) including its end marker and the newline after it, when the prompt opens with one
        in ChatML form (``<|im_start|>system`` ... ``<|im_end|>``); else 0. Requests with the same
        system message and tools have the same ids up to here (the end marker is a special token,
        so no merge crosses it): the span a radix cache shares (:mod:`sglang_pask.methods.segment`)."""
        return system_segment_end(self.text, self.offsets)

    def tracker(self, name: str | None = None) -> OutputTracker:
        """A fresh output tracker for this request's generated tokens, chosen from the view (so
        ``tool_choice="none"`` -- no tools in the view -- picks the tracker the prompt implies)."""
        return tracker_for_request(self.view, name)


SYSTEM_OPEN = "<|im_start|>system"
MESSAGE_END = "<|im_end|>"


def system_segment_end(text: str, offsets) -> int:
    """Tokens covering ``text`` up to the end of its first ChatML system message (marker and
    the newline after it); 0 when ``text`` does not open with one or it does not end on a token
    boundary. ``offsets[i]``: ``(start, end)`` characters of token ``i``."""
    if not text.startswith(SYSTEM_OPEN):
        return 0
    at = text.find(MESSAGE_END)
    if at < 0:
        return 0
    end = at + len(MESSAGE_END)
    if text.startswith("\n", end):
        end += 1
    n = 0
    for _a, b in offsets:
        if b > end:
            break
        n += 1
    if n == 0 or n >= len(offsets) or offsets[n - 1][1] != end:
        return 0  # not on a token boundary, or nothing after it: no segment
    return n


def render_chat(tokenizer, request, *, tagger: PromptTagger | None = None) -> RenderedPrompt:
    """Render ``request`` (an OpenAI chat request body, or SGLang's ``ChatCompletionRequest``)
    exactly as the SGLang server does, and class every prompt token.

    ``tagger``: a prompt tagger for ``tokenizer`` to reuse (default: a new one, all taggers).
    Raises ``ValueError`` for an invalid request: :class:`~sglang_pask.structure.ToolSchemaError`
    naming the body's path (checked on the body as given, before SGLang's parse), or pydantic's
    ``ValidationError`` naming the field. Refused as ``ToolSchemaError`` too: a lone surrogate in
    any string, and a special token of ``tokenizer`` (:func:`special_tokens`) in any string of the
    messages or tools -- the tokenizer would read it as that token, so a tool named ``<|im_end|>``
    would end the system message inside the tools JSON (SGLang itself runs such a request)."""
    if isinstance(request, dict):
        # The body as given, so errors name its own paths (SGLang's view re-orders and fills).
        validate_messages(request.get("messages"))
        validate_tools(request.get("tools"))
        validate_response_format(request.get("response_format"))
    validate_request_text(tokenizer, request)
    view = sglang_view(request, _content_format(tokenizer))
    tagger = tagger if tagger is not None else make_prompt_tagger(tokenizer)
    return RenderedPrompt(view, tagger.tag(view))


def validate_request_text(tokenizer, request) -> None:
    """Raise :class:`~sglang_pask.structure.ToolSchemaError` (one line naming the field) for a lone
    surrogate in any string of ``request`` (a body, or SGLang's ``ChatCompletionRequest``, whose
    JSON parser already refuses them) or a special token of ``tokenizer`` in its messages or tools
    (:func:`~sglang_pask.structure.validate.validate_text`). :func:`render_chat` calls it; a server
    hook on SGLang's request validation can call it to answer 400 before SGLang renders."""
    if not isinstance(request, dict):
        request = {"messages": [m.model_dump() for m in request.messages],
                   "tools": [t.model_dump() for t in request.tools or ()]}
    validate_text(request, special_tokens(tokenizer))


def special_tokens(tokenizer) -> tuple[str, ...]:
    """The texts ``tokenizer`` reads as special tokens wherever they occur (``all_special_tokens``
    and the added tokens marked special, e.g. Qwen's ``<|im_start|>``, which is not in the former).
    Added tokens that are not special (``<tool_call>``, ``<think>``) are ordinary text here: chat
    templates and models write them in message contents."""
    # asked per request on the server: computed once per tokenizer (keyed by its size, which grows
    # when tokens are added)
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    cached = getattr(tokenizer, "_pask_special_tokens", None)
    if cached is not None and cached[0] == size:
        return cached[1]
    found = set(getattr(tokenizer, "all_special_tokens", None) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    found.update(t.content for t in added.values() if getattr(t, "special", False))
    out = tuple(sorted(t for t in found if t))
    try:
        tokenizer._pask_special_tokens = (size, out)
    except AttributeError:  # a tokenizer that takes no attributes: computed each call
        pass
    return out


def _content_format(tokenizer) -> str:
    """``"string"`` or ``"openai"``: how the template wants message contents (SGLang's detection)."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return "string"
    cached = getattr(tokenizer, "_pask_content_format", None)
    if cached is not None and cached[0] == template:
        return cached[1]
    from sglang.srt.parser.jinja_template_utils import detect_jinja_template_content_format

    fmt = detect_jinja_template_content_format(template)
    try:
        tokenizer._pask_content_format = (template, fmt)
    except AttributeError:
        pass
    return fmt


def sglang_view(request, content_format: str = "string") -> dict[str, Any]:
    """``{"messages", "tools", "response_format", "chat_template_kwargs"}`` as SGLang's template
    sees them (see the module docstring). Use :func:`render_chat`; this is its first half."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.entrypoints.openai.serving_chat import (
        normalize_assistant_tool_call_arguments,
        normalize_tool_content,
    )
    from sglang.srt.parser.jinja_template_utils import process_content_for_template_format

    if isinstance(request, dict):
        request = ChatCompletionRequest.model_validate({"model": "default", **request})
    dumped = [m.model_dump() for m in request.messages]
    for m in dumped:
        normalize_assistant_tool_call_arguments(m, strict=True)
    messages = []
    for m in copy.deepcopy(dumped):
        if m.get("content") is None:
            m["content"] = ""
        m = process_content_for_template_format(m, content_format, [], [], [], [])
        m["content"] = normalize_tool_content(m["role"], m.get("content"))
        messages.append(m)
    tools = None
    if request.tools and request.tool_choice != "none":
        choice = request.tool_choice
        if isinstance(choice, str):
            tools = [t.model_dump() for t in request.tools]
        else:
            tools = [t.model_dump() for t in request.tools if t.function.name == choice.function.name] or None
    kwargs: dict[str, Any] = {}
    if request.reasoning_effort is not None:
        kwargs["reasoning_effort"] = request.reasoning_effort
    kwargs.update(request.chat_template_kwargs or {})
    rf = request.response_format.model_dump(by_alias=True) if request.response_format else None
    return {"messages": messages, "tools": tools, "response_format": rf, "chat_template_kwargs": kwargs}
