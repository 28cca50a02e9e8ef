"""Training examples for pask-tiny-fc: synthetic entries rendered exactly as the server sees them.

An example is ``(prompt_ids, answer_ids)``: the prompt is the request rendered by
:func:`sglang_pask.rendering.render_chat` (the server's own rendering, so training prompts equal
serving prompts token for token), the answer is the gold call(s) as Qwen3 ``<tool_call>`` blocks
followed by ``<|im_end|>``. Tool names use the OpenAI-safe names of
:func:`~sglang_pask.eval.bfcl_tools.bfcl_to_openai_tools`, as the model will see them.

Two spellings of a call are mixed (half the entries each, by a hash of the entry id), because
constrained decoding forces one of them: SGLang's qwen structural tag forces
``<tool_call>\n{"name":"NAME", "arguments":`` while xgrammar's built-in ``qwen_3`` tag (the
reference runner) and Qwen3 itself write ``{"name": "NAME", "arguments": ...}``.
"""

from __future__ import annotations

import hashlib
from typing import Iterator

from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools
from sglang_pask.eval.data import Entry
from sglang_pask.eval.decode import render_tool_calls
from sglang_pask.eval.gold import END_OF_TURN, forced_answer_text, gold_calls
from sglang_pask.eval.synthetic import generate

END = END_OF_TURN


def request_body(entry: Entry) -> tuple[dict, dict[str, str]]:
    """The OpenAI chat request an eval backend sends for ``entry`` (tools in OpenAI format)."""
    tools, name_map = bfcl_to_openai_tools(list(entry.functions))
    return {"messages": [dict(m) for m in entry.messages], "tools": tools}, name_map


def answer_text(entry: Entry, name_map: dict[str, str]) -> str:
    to_openai = {bfcl: oa for oa, bfcl in name_map.items()}
    calls = [{to_openai[name]: args} for c in gold_calls(list(entry.ground_truth), list(entry.functions))
             for name, args in c.items()]
    if hashlib.sha256(entry.id.encode()).digest()[0] % 2:
        return render_tool_calls(calls) + END
    # Exactly what follows SGLang's forced begin: no whitespace before the arguments value (the
    # grammar does not allow it there; a model trained with `"arguments": {` is pushed off course).
    return forced_answer_text(entry, END)


def render(tokenizer, entry: Entry) -> tuple[str, str]:
    """(prompt text, answer text) for one entry."""
    from sglang_pask.rendering import render_chat

    body, name_map = request_body(entry)
    return render_chat(tokenizer, body).text, answer_text(entry, name_map)


def encode(tokenizer, entry: Entry) -> tuple[list[int], list[int]]:
    from sglang_pask.rendering import render_chat

    body, name_map = request_body(entry)
    return (render_chat(tokenizer, body).token_ids,
            tokenizer(answer_text(entry, name_map), add_special_tokens=False)["input_ids"])


def stream(split: str, start: int, n: int, profile: str = "tiny", chunk: int = 512) -> Iterator[Entry]:
    """Entries ``start .. start+n-1`` of a split, generated lazily in chunks."""
    for s in range(start, start + n, chunk):
        yield from generate(split, min(chunk, start + n - s), profile=profile, start=s)
