"""The reference runner with the server's grammar (grammar="sglang"): the constraint SGLang's own
pipeline builds for a request is what the runner enforces, and outputs obey it."""

from __future__ import annotations

import json

import jsonschema
import pytest
from conftest import TINY_RANDOM

TOOL = {"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Berlin", "Paris"]},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}}}
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
          "maximum": 9}}, "required": ["ok", "n"], "additionalProperties": False}


@pytest.fixture(scope="module")
def runner():
    from sglang_pask.hf import Runner

    return Runner(str(TINY_RANDOM), method="full", grammar="sglang")


def test_constraint_is_the_servers(runner):
    c = runner.constraints
    kind, key = c.sampling_constraint({"messages": [{"role": "user", "content": "x"}], "tools": [TOOL],
                                       "tool_choice": "required"})
    assert kind == "structural_tag" and '<tool_call>\\n{\\"name\\":\\"get_weather\\", \\"arguments\\":' in key
    assert c.sampling_constraint({"messages": [{"role": "user", "content": "x"}], "tools": [TOOL]}) is not None
    assert c.sampling_constraint({"messages": [{"role": "user", "content": "x"}]}) is None


def test_strict_tool_call_obeys_schema(runner):
    body = {"messages": [{"role": "user", "content": "Weather in Paris for 2 days?"}], "tools": [TOOL],
            "tool_choice": "required", "parallel_tool_calls": False}
    res = runner.generate(body, max_new_tokens=48)
    assert res.text.startswith('<tool_call>\n{"name":"get_weather", "arguments":')
    if res.tool_calls:  # random weights may stall in whitespace until max_new_tokens
        args = json.loads(res.tool_calls[0]["function"]["arguments"])
        jsonschema.validate(args, TOOL["function"]["parameters"])


def test_json_schema_without_free_whitespace(runner):
    body = {"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}}
    res = runner.generate(body, max_new_tokens=32)
    jsonschema.validate(json.loads(res.text), SCHEMA)
    # any_whitespace=False: the only whitespace is the single space of xgrammar's separators
    assert res.text == json.dumps(json.loads(res.text)), res.text
