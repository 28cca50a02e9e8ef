"""A chat request as SGLang renders it.

SGLang parses the body into its ``ChatCompletionRequest`` and renders the chat template with
``msg.model_dump()`` / ``tool.model_dump()`` (so unset fields appear, e.g. ``"strict": false``),
only the named tool for a named ``tool_choice``, and no tools for ``tool_choice="none"``. Prompt
tags must be computed on exactly that view, in the server and in ``pask tag`` alike.
"""

from __future__ import annotations

from typing import Any


def sglang_view(request) -> dict[str, Any]:
    """``{"messages", "tools", "response_format"}`` as SGLang's template sees them.

    ``request`` is a ``ChatCompletionRequest`` or an OpenAI request body (dict), which is parsed
    with SGLang's own model (pydantic errors name the offending field).
    """
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    if isinstance(request, dict):
        request = ChatCompletionRequest.model_validate({"model": "default", **request})
    tools = None
    if request.tools and request.tool_choice != "none":
        choice = request.tool_choice
        if isinstance(choice, str):
            tools = [t.model_dump() for t in request.tools]
        else:
            tools = [t.model_dump() for t in request.tools if t.function.name == choice.function.name] or None
    rf = request.response_format.model_dump(by_alias=True) if request.response_format else None
    return {"messages": [m.model_dump() for m in request.messages], "tools": tools, "response_format": rf}
