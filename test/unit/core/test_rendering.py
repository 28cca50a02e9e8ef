"""``rendering.render_chat`` without a server: SGLang's view of a request, chat_template_kwargs,
errors. (That it equals what a live server runs: ``test_rendering_agree.py``.)"""

from __future__ import annotations

import pytest
from sglang_pask.structure.testing import TINY_MODEL

pytest.importorskip("sglang.srt.entrypoints.openai.protocol")

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
OTHER = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
BODY = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [TOOL, OTHER]}


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TINY_MODEL))


def _render(tok, body):
    from sglang_pask.rendering import render_chat

    return render_chat(tok, body)


def test_view_is_sglangs_model_dump(tok):
    r = _render(tok, BODY)
    other = r.view["tools"][1]
    assert other["function"]["description"] is None and other["defer_loading"] is None  # unset fields
    assert '"description": null' in r.text and '"defer_loading": null' in r.text
    assert len(r.token_ids) == len(r.classes) == len(r.offsets)
    assert r.token_ids == tok(r.text, add_special_tokens=False)["input_ids"]


def test_tool_choice_selects_the_tools_rendered(tok):
    named = _render(tok, dict(BODY, tool_choice={"type": "function", "function": {"name": "get_time"}}))
    assert [t["function"]["name"] for t in named.view["tools"]] == ["get_time"]
    assert "get_weather" not in named.text
    none = _render(tok, dict(BODY, tool_choice="none"))
    assert none.view["tools"] is None and "get_time" not in none.text


def test_none_content_and_null_fields_as_sglang_passes_them(tok):
    body = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": None, "tool_calls": [{
                             "id": "c1", "type": "function",
                             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]}],
            "tools": [TOOL]}
    m = _render(tok, body).view["messages"]
    assert m[1]["content"] == "" and m[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert m[2]["content"] == "sunny" and all(v is not None for msg in m for v in msg.values())


def test_chat_template_kwargs_reach_the_template(tok):
    """SGLang passes chat_template_kwargs to apply_chat_template as keyword arguments."""
    import copy

    t = copy.copy(tok)
    t.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                       "{% endfor %}<|im_start|>assistant\n{% if enable_thinking is defined and "
                       "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}")
    plain = _render(t, {"messages": BODY["messages"]})
    off = _render(t, {"messages": BODY["messages"], "chat_template_kwargs": {"enable_thinking": False}})
    assert "<think>" not in plain.text and off.text.endswith("<think>\n\n</think>\n\n")
    assert off.view["chat_template_kwargs"] == {"enable_thinking": False}
    assert len(off.token_ids) > len(plain.token_ids)


def test_errors_name_the_body_path(tok):
    from sglang_pask.structure import ToolSchemaError

    bad = dict(BODY, tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "dict"}}}}}])
    with pytest.raises(ToolSchemaError, match=r"tools\[0\]\.function\.parameters\.properties\.x\.type"):
        _render(tok, bad)
    with pytest.raises(ValueError, match="tool_choice"):
        _render(tok, dict(BODY, tool_choice="sometimes"))
