"""Prompt tagging with the tiny model's real tokenizer and Qwen3-style tools template."""

import json

import pytest
from sglang_pask.structure import StructClass as C
from sglang_pask.structure import ToolSchemaError, make_prompt_tagger
from sglang_pask.structure.testing import tiny_tokenizer


@pytest.fixture(scope="module")
def tagger():
    return make_prompt_tagger(tiny_tokenizer())


def fn(name, props=None, required=None, description="does things", **extra):
    params = {"type": "object", "properties": props or {}}
    if required is not None:
        params["required"] = required
    params.update(extra)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


def req(tools, query="hello", system=None, **kw):
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": query}]
    return dict(messages=msgs, tools=tools, **kw)


def classes_of(tags, needle, nth=0, start=0):
    """Classes of the tokens overlapping the nth occurrence of ``needle`` in the rendered text."""
    pos = start - 1
    for _ in range(nth + 1):
        pos = tags.text.index(needle, pos + 1)
    end = pos + len(needle)
    return {c for (s, e), c in zip(tags.offsets, tags.classes) if s < end and e > pos}


def tools_start(tags):
    return tags.text.index("<tools>")


def test_basic_shape_and_template(tagger):
    tags = tagger.tag(req([fn("get_weather", {"city": {"type": "string"}}, ["city"])],
                          query="Weather in Paris?", system="Be brief."))
    assert len(tags.classes) == len(tags.token_ids) == len(tags.offsets)
    assert C.OTHER not in tags.classes
    assert classes_of(tags, "<|im_start|>") == {C.TEMPLATE_SPECIAL}
    assert classes_of(tags, "Be brief") == {C.SYSTEM_TEXT}
    assert classes_of(tags, "get_weather") == {C.TOOL_NAME}
    assert classes_of(tags, "city", start=tools_start(tags)) == {C.PARAM_NAME}
    assert classes_of(tags, "city", nth=1, start=tools_start(tags)) == {C.REQUIRED_LIST}
    assert classes_of(tags, "Weather in") == {C.QUERY_TEXT}
    assert tags.notes == []


def test_nested_object_parameters(tagger):
    inner = {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "integer"}},
             "required": ["zip"]}
    tags = tagger.tag(req([fn("ship", {"address": inner, "qty": {"type": "number", "default": 1}})]))
    t0 = tools_start(tags)
    assert classes_of(tags, "street", start=t0) == {C.PARAM_NAME}
    assert classes_of(tags, "address", start=t0) == {C.PARAM_NAME}
    assert classes_of(tags, '"zip"]', start=t0) >= {C.REQUIRED_LIST}
    assert classes_of(tags, "integer", start=t0) == {C.PARAM_TYPE}
    assert classes_of(tags, '"default": 1', start=t0) >= {C.DEFAULT_VALUE, C.SCHEMA_KEY}


def test_arrays_of_enums(tagger):
    props = {"colors": {"type": "array", "items": {"type": "string", "enum": ["crimson", "teal"]}}}
    tags = tagger.tag(req([fn("paint", props)], query="Use teal please"))
    t0 = tools_start(tags)
    assert classes_of(tags, "crimson", start=t0) == {C.ENUM_VALUE}
    assert classes_of(tags, "array", start=t0) == {C.PARAM_TYPE}
    assert classes_of(tags, "items", start=t0) == {C.SCHEMA_KEY}
    # an enum literal in the query is a value
    assert classes_of(tags, "teal", start=tags.text.index("Use teal")) == {C.QUERY_VALUE}


def test_dotted_function_names(tagger):
    tags = tagger.tag(req([fn("math.factorial", {"n": {"type": "integer"}}), fn("a.b.c_d")]))
    assert classes_of(tags, "math.factorial") == {C.TOOL_NAME}
    assert classes_of(tags, "a.b.c_d") == {C.TOOL_NAME}


def test_unicode_names_and_values(tagger):
    tool = fn("météo_東京", {"ville": {"type": "string", "enum": ["Zürich", "東京"]}}, description="Wetter ☀")
    tags = tagger.tag(req([tool], query="Météo à Zürich le 3 mars, \"東京\" aussi"))
    assert classes_of(tags, "météo_東京") == {C.TOOL_NAME}
    assert classes_of(tags, "Zürich", start=tools_start(tags)) == {C.ENUM_VALUE}
    assert classes_of(tags, "Wetter ☀") == {C.DESCRIPTION}
    q = tags.text.index("Météo à")
    assert classes_of(tags, "Zürich", start=q) == {C.QUERY_VALUE}
    assert classes_of(tags, '"東京"', start=q) == {C.QUERY_VALUE}


def test_escaped_quotes_and_backslashes_in_descriptions(tagger):
    desc = 'Path like "C:\\Users\\x" or \\n literal; say "hi"'
    tags = tagger.tag(req([fn("read_file", {"p": {"type": "string", "description": desc}}, description=desc)]))
    rendered = json.dumps(desc, ensure_ascii=False)[1:-1]
    assert classes_of(tags, rendered) == {C.DESCRIPTION}
    assert classes_of(tags, rendered, nth=1) == {C.DESCRIPTION}


def test_parameters_named_required_and_type(tagger):
    props = {"type": {"type": "string", "enum": ["a", "b"]}, "required": {"type": "boolean"},
             "properties": {"type": "string"}}
    tags = tagger.tag(req([fn("odd", props, ["type", "required"])]))
    t0 = tools_start(tags)
    params_at = tags.text.index('"properties": {', t0) + len('"properties": {')
    assert classes_of(tags, '"type"', start=params_at) >= {C.PARAM_NAME}
    assert C.PARAM_NAME in classes_of(tags, '"required": {', start=params_at)
    assert classes_of(tags, "properties", nth=0, start=params_at) == {C.PARAM_NAME}
    req_list = tags.text.index('"required": ["', t0) + len('"required": [')
    assert classes_of(tags, '"type", "required"', start=req_list - 1) >= {C.REQUIRED_LIST}
    assert C.PARAM_NAME not in classes_of(tags, '"type", "required"', start=req_list - 1)


def test_empty_tool_list(tagger):
    for tools in ([], None):
        tags = tagger.tag(req(tools, query="just chat"))
        assert "<tools>" not in tags.text
        assert set(tags.classes) <= {C.TEMPLATE_SPECIAL, C.TEMPLATE_TEXT, C.QUERY_TEXT, C.QUERY_VALUE}


def test_fifty_plus_tools(tagger):
    tools = [fn(f"tool_{i}.op", {f"arg_{i}": {"type": "string", "enum": [f"v{i}"]}}, [f"arg_{i}"])
             for i in range(60)]
    tags = tagger.tag(req(tools))
    assert tags.notes == []
    for i in range(60):
        assert classes_of(tags, f'"tool_{i}.op"') - {C.SCHEMA_PUNCT} == {C.TOOL_NAME}
        assert classes_of(tags, f"arg_{i}", start=tools_start(tags)) == {C.PARAM_NAME}


def test_unknown_keywords_are_schema_text(tagger):
    tool = fn("f", {"x": {"type": "string", "x-weird": {"deep": [1, "two"]}, "format": "date"}},
              **{"vendorExtension": True})
    tool["function"]["x-meta"] = "stuff"
    tags = tagger.tag(req([tool]))
    assert classes_of(tags, "x-weird") == {C.SCHEMA_TEXT}
    assert classes_of(tags, "deep") == {C.SCHEMA_TEXT}
    assert classes_of(tags, "vendorExtension") == {C.SCHEMA_TEXT}
    assert classes_of(tags, "stuff") == {C.SCHEMA_TEXT}
    assert classes_of(tags, "format") == {C.SCHEMA_KEY}


def test_query_values(tagger):
    q = "Book 3 tickets for 'Hamlet' on 2025-03-14 at 7:30 pm, budget $120.50, email a@b.co"
    tags = tagger.tag(req([], query=q))
    for v in (" 3", "'Hamlet'", "2025-03-14", "7:30 pm", "$120.50", "a@b.co"):
        assert classes_of(tags, v.strip()) == {C.QUERY_VALUE}, v
    assert classes_of(tags, "tickets") == {C.QUERY_TEXT}


def test_response_format_schema_absent_from_prompt_is_noted(tagger):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    tags = tagger.tag(req([], query="answer please", response_format=rf))
    assert any("response_format" in n for n in tags.notes)
    assert C.PARAM_NAME not in tags.classes
    # pasted into the system message, it is found and tagged
    tags = tagger.tag(req([], query="q", system="Reply with: " + json.dumps(schema), response_format=rf))
    assert classes_of(tags, "answer") == {C.PARAM_NAME} and tags.notes == []


def test_sql_ddl_in_prompt(tagger):
    ddl = ("CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name VARCHAR(40) NOT NULL, "
           "country_id INT REFERENCES country(id));\nCREATE TABLE country (id INT, title TEXT DEFAULT 'x')")
    tags = tagger.tag(req(None, query="How many singers?", system=ddl))
    assert classes_of(tags, "singer ") >= {C.SQL_TABLE}
    assert classes_of(tags, "singer_id") == {C.SQL_COLUMN}
    assert classes_of(tags, "VARCHAR") == {C.SQL_TYPE}
    assert classes_of(tags, "PRIMARY") == classes_of(tags, "KEY") == {C.SQL_CONSTRAINT}
    assert classes_of(tags, "CREATE", nth=1) == {C.SQL_KEYWORD}
    assert classes_of(tags, "country(") >= {C.SQL_TABLE}
    assert classes_of(tags, "'x'") == {C.SQL_LITERAL}


@pytest.mark.parametrize("tools, path", [
    ("nope", "tools"),
    ([1], "tools[0]"),
    ([{"type": "function"}], "tools[0].function"),
    ([{"type": "function", "function": {"name": ""}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "f", "description": 3}}], "tools[0].function.description"),
    ([fn("a"), fn("b"), fn("c"), fn("d", {"x": {"type": "dict"}})], "tools[3].function.parameters.properties.x.type"),
    ([fn("a", {"x": {"type": 5}})], "tools[0].function.parameters.properties.x.type"),
    ([fn("a", {"x": {"type": "array", "items": {"type": "tuple"}}})],
     "tools[0].function.parameters.properties.x.items.type"),
    ([fn("a", {"x": "string"})], "tools[0].function.parameters.properties.x"),
    ([fn("a", {"x": {"type": "string"}}, "x")], "tools[0].function.parameters.required"),
    ([fn("a", {"x": {"type": "string", "enum": "abc"}})], "tools[0].function.parameters.properties.x.enum"),
    ([fn("a", {"a b": {"anyOf": [{"type": "string"}, {"type": "float"}]}})],
     "tools[0].function.parameters.properties['a b'].anyOf[1].type"),
])
def test_malformed_tools_name_the_path(tagger, tools, path):
    with pytest.raises(ToolSchemaError) as e:
        tagger.tag(req(tools))
    assert e.value.path == path
    assert str(e.value).startswith(path)


def test_malformed_request_fields(tagger):
    with pytest.raises(ToolSchemaError, match=r"^messages"):
        tagger.tag({"messages": "hi"})
    with pytest.raises(ToolSchemaError, match=r"^response_format.json_schema.schema.type"):
        tagger.tag(req([], response_format={"type": "json_schema",
                                            "json_schema": {"name": "x", "schema": {"type": "dict"}}}))


def test_history_tool_calls_get_output_classes(tagger):
    tools = [fn("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}})]
    msgs = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "days": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": -3}'},
        {"role": "user", "content": "And tomorrow?"},
    ]
    tags = tagger.tag({"messages": msgs, "tools": tools})
    assert tags.notes == []
    call_at = tags.text.index('<tool_call>\n{"name": "get_weather"')
    assert classes_of(tags, "get_weather", start=call_at) == {C.OUT_FUNC_NAME}
    assert classes_of(tags, "city", start=call_at) == {C.OUT_ARG_KEY}
    assert classes_of(tags, "Oslo", start=call_at) == {C.OUT_VALUE_STR}
    assert classes_of(tags, " 2", start=call_at) == {C.OUT_VALUE_NUM}
    assert classes_of(tags, "-3") == {C.QUERY_VALUE}  # values in tool results
    assert classes_of(tags, "tomorrow") == {C.QUERY_TEXT}
