"""decode: Qwen3 <tool_call> text and OpenAI tool_calls -> BFCL calls; malformed -> error types."""

import pytest
from sglang_pask.eval.checker import check, is_call_list
from sglang_pask.eval.decode import (
    BAD_JSON,
    BAD_SHAPE,
    NO_CALL,
    TRUNCATED,
    decode_response,
    decode_text,
    decode_tool_calls,
    render_tool_calls,
)

NM = {"math_factorial": "math.factorial"}


def test_several_blocks_names_restored_think_ignored():
    text = (
        "<think>\nhmm\n</think>\n\nSure.\n"
        '<tool_call>\n{"name": "math_factorial", "arguments": {"number": 5}}\n</tool_call>\n'
        '<tool_call>{"name": "other", "arguments": {"x": [1, 2.5, true, null]}}</tool_call>'
    )
    d = decode_text(text, NM)
    assert d.error_type == "" and d.calls == [{"math.factorial": {"number": 5}}, {"other": {"x": [1, 2.5, True, None]}}]


def test_render_roundtrip():
    calls = [{"a": {"s": 'é "q"'}}, {"b": {}}]
    assert decode_text(render_tool_calls(calls)).calls == calls


@pytest.mark.parametrize(
    "text, kind",
    [
        ("I cannot help with that.", NO_CALL),
        ("", NO_CALL),
        (None, NO_CALL),
        ('{"name": "f", "arguments": {}}', NO_CALL),  # bare JSON, no wrapper
        ('<function_call>{"name": "f", "arguments": {}}</function_call>', NO_CALL),  # wrong wrapper
        ("[f(x=1)]", NO_CALL),
        ('<tool_call>\n{"name": "f", "arguments": {"x": 1', TRUNCATED),
        ('<tool_call>\n{"name": "f", "arguments": {}}\n<tool_call>\n{"name": "g"}\n</tool_call>', TRUNCATED),
        ("<tool_call>\nf(x=1)\n</tool_call>", BAD_JSON),
        ('<tool_call>\n{"name": "f", "arguments": {"x": 1}\n</tool_call>', BAD_JSON),
        ("<tool_call>\n[1, 2]\n</tool_call>", BAD_SHAPE),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', BAD_SHAPE),
        ('<tool_call>\n{"name": 3, "arguments": {}}\n</tool_call>', BAD_SHAPE),
        ('<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>', BAD_SHAPE),
        ('<tool_call>\n{"name": "f", "arguments": "{bad"}\n</tool_call>', BAD_JSON),
    ],
)
def test_malformed_text(text, kind):
    d = decode_text(text)
    assert d.calls is None and d.error_type == kind and d.error


def test_arguments_as_json_string_accepted():
    d = decode_text('<tool_call>\n{"name": "f", "arguments": "{\\"x\\": 1}"}\n</tool_call>')
    assert d.calls == [{"f": {"x": 1}}]


def test_openai_tool_calls():
    tcs = [
        {"id": "c0", "type": "function", "function": {"name": "math_factorial", "arguments": '{"number": 5}'}},
        {"id": "c1", "type": "function", "function": {"name": "g", "arguments": ""}},
    ]
    assert decode_tool_calls(tcs, NM).calls == [{"math.factorial": {"number": 5}}, {"g": {}}]
    assert decode_tool_calls([{"function": {"name": "g", "arguments": "{x"}}]).error_type == BAD_JSON
    assert decode_tool_calls([{"function": None}]).error_type == BAD_SHAPE
    assert decode_tool_calls([]).error_type == NO_CALL


def test_response_falls_back_to_text():
    assert decode_response('<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>', None).calls == [{"g": {}}]
    assert decode_response("plain", []).error_type == NO_CALL
    assert decode_response("ignored", [{"function": {"name": "g", "arguments": "{}"}}]).calls == [{"g": {}}]


FN = [
    {
        "name": "math.factorial",
        "description": "",
        "parameters": {"type": "dict", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
    }
]
GT = [{"math.factorial": {"number": [5]}}]


def test_checker_verdicts_and_no_exceptions():
    assert check(FN, [{"math.factorial": {"number": 5}}], GT, "simple_python").valid
    v = check(FN, [{"math.factorial": {"number": 6}}], GT, "simple_python")
    assert not v.valid and v.error_type == "value_error:others"
    assert check(FN, [{"math_factorial": {"number": 5}}], GT, "simple_python").error_type.endswith("wrong_func_name")
    assert check(FN, [], GT, "simple_python").error_type.endswith("wrong_count")
    assert check(FN, "junk", GT, "simple_python").error_type == "ast_decoder:decoder_wrong_output_format"
    # a ground truth naming a function missing from the docs makes BFCL's checker raise: a verdict, not a crash
    v = check(FN, [{"nope": {}}, {"nope": {}}], [{"nope": {"a": [1]}}, {"nope": {"a": [1]}}], "parallel")
    assert not v.valid and v.error_type


def test_is_call_list():
    assert is_call_list([]) and is_call_list([{"f": {}}])
    assert not is_call_list([{"f": 1}]) and not is_call_list([{"f": {}, "g": {}}]) and not is_call_list({"f": {}})


def test_checker_writes_nothing_into_site_packages():
    import os

    import bfcl_eval

    check(FN, [{"math.factorial": {"number": 5}}], GT, "simple_python")
    assert os.path.isdir(os.environ["BFCL_PROJECT_ROOT"])
    pkg = os.path.dirname(bfcl_eval.__file__)
    assert not any(os.path.exists(os.path.join(pkg, d)) for d in ("result", "score", ".file_locks"))
