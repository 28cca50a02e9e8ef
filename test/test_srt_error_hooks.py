"""srt/error_hooks.short_schema_error on the message SGLang builds (``str(SchemaError)``)."""

import pytest
from sglang_pask.srt.error_hooks import short_schema_error

jsonschema = pytest.importorskip("jsonschema")


def _sglang_message(schema) -> str:
    """What serving_chat._validate_request returns: its alias rewrite, then check_schema."""
    from sglang.srt.entrypoints.openai.serving_chat import normalize_json_schema_types

    normalize_json_schema_types(schema)
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        return f"Tool 0 function has invalid 'parameters' schema: {str(e)}"
    raise AssertionError("schema is valid")


def test_keeps_first_line_and_location():
    msg = _sglang_message({"type": "object", "properties": {"x": {"type": "nope"}}})
    assert msg.count("\n") > 5  # SGLang's dump
    assert short_schema_error(msg) == ("Tool 0 function has invalid 'parameters' schema: 'nope' is not valid under "
                                       "any of the given schemas (at schema['properties']['x']['type'])")
    top = short_schema_error(_sglang_message({"type": "object", "required": "x"}))
    assert "\n" not in top and top.startswith("Tool 0 function has invalid 'parameters' schema: 'x' is not of type")


def test_other_messages_unchanged():
    for m in ("Tool names must be unique across request and message tools.", "line one\nline two", ""):
        assert short_schema_error(m) == m
