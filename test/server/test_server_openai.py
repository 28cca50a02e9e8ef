"""A real SGLang server (tiny random Qwen3 + the sglang_pask plugin with a policy) answers the
OpenAI client: plain chat, json_schema response_format, and a strict required tool call.

Random weights ramble, so schemas are bounded (enums, ranges, patterns) and decoding is greedy:
what is checked is that constrained decoding and the tool parser deliver schema-valid output.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

openai = pytest.importorskip("openai")

COLOR_SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
        "ok": {"type": "boolean"},
    },
    "required": ["color", "count", "ok"],
    "additionalProperties": False,
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Berlin", "Paris", "Tokyo"]},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit", "days"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def client(pask_server):
    return openai.OpenAI(base_url=pask_server.base_url, api_key="none", timeout=120)


def test_plain_chat(client):
    r = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=16, temperature=0,
    )
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("length", "stop")
    assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 16


def test_response_format_json_schema(client):
    for prompt in ("Pick a color.", "Describe the sky as JSON.", "Count to three."):
        r = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": prompt}],
            response_format={"type": "json_schema", "json_schema": {"name": "pick", "schema": COLOR_SCHEMA}},
            max_tokens=64, temperature=0,
        )
        content = r.choices[0].message.content
        jsonschema.validate(json.loads(content), COLOR_SCHEMA)


def test_strict_tool_required(client, no_whitespace_bias):
    params = WEATHER_TOOL["function"]["parameters"]
    for prompt in ("Weather in Paris for 3 days, in celsius?", "Is it cold in Tokyo?"):
        r = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": prompt}],
            tools=[WEATHER_TOOL], tool_choice="required", parallel_tool_calls=False,
            max_tokens=64, temperature=0, logit_bias=no_whitespace_bias,
        )
        calls = r.choices[0].message.tool_calls
        assert calls, f"no tool call: {r.choices[0].message}"
        for call in calls:
            assert call.function.name == "get_weather"
            jsonschema.validate(json.loads(call.function.arguments), params)


def test_server_still_serves_after_bad_request(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "nope"}}},
            max_tokens=8,
        )
    r = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "again"}], max_tokens=4, temperature=0
    )
    assert r.choices[0].message.content is not None


def test_bad_tool_schema_is_one_line(pask_server):
    """A tool whose parameters are not a JSON Schema: 400 with SGLang's first line and the location,
    not the metaschema dump (srt/entrypoints/error_hooks.py)."""
    import requests

    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "nope"}}}}}  # ("dict" SGLang rewrites to "object")
    r = requests.post(f"{pask_server.base_url}/chat/completions", timeout=60, json={
        "model": "default", "messages": [{"role": "user", "content": "x"}], "tools": [tool], "max_tokens": 4})
    assert r.status_code == 400
    msg = r.json()["message"]
    assert msg == ("Tool 0 function has invalid 'parameters' schema: 'nope' is not valid under any of the given "
                   "schemas (at schema['properties']['x']['type'])"), msg
