"""Property tests of the prompt tagger over generated tool lists and schemas (tiny tokenizer).

300 examples per property per run (most of a run is hypothesis drawing them, not the tagger); not
derandomized, so successive runs explore new ones."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_pask.structure import StructClass as C
from sglang_pask.structure import ToolSchemaError, make_prompt_tagger
from sglang_pask.structure.testing import tiny_tokenizer

_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\ue000\ue001")
_word = st.text(_chars, min_size=1, max_size=10)
_name = st.one_of(_word, st.from_regex(r"[a-z]{1,6}(\.[a-z_]{1,6}){1,2}", fullmatch=True))
_pname = st.one_of(_word, st.sampled_from(["type", "required", "properties", "enum", "name"]))
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(_chars, max_size=6))
_leaf = st.builds(
    lambda t, d, e: {k: v for k, v in (("type", t), ("description", d), ("enum", e)) if v is not None},
    st.sampled_from(["string", "number", "integer", "boolean", "null", ["string", "null"]]),
    st.none() | st.text(_chars, max_size=20), st.none() | st.lists(_scalar, min_size=1, max_size=3))
_schema = st.recursive(
    _leaf,
    lambda ch: st.one_of(
        st.builds(lambda p: {"type": "object", "properties": p, "required": sorted(p)[:1]},
                  st.dictionaries(_pname, ch, max_size=3)),
        st.builds(lambda i: {"type": "array", "items": i}, ch),
        st.builds(lambda i, d: {"type": "string", "default": d, "x-extra": i}, _scalar, _scalar)),
    max_leaves=5)
_tool = st.builds(
    lambda n, d, p: {"type": "function", "function": {"name": n, "description": d, "parameters": {
        "type": "object", "properties": p, "required": list(p)[:2]}}},
    _name, st.text(_chars, max_size=30), st.dictionaries(_pname, _schema, max_size=3))
_query = st.text(_chars, max_size=40)


@pytest.fixture(scope="module")
def tagger():
    return make_prompt_tagger(tiny_tokenizer())


def _name_span(text, tools_at, name, skip):
    needle = '"function": {"name": ' + json.dumps(name, ensure_ascii=False)
    at = text.index(needle, skip)
    return at + len(needle) - len(json.dumps(name, ensure_ascii=False)) + 1, at + len(needle) - 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
@given(st.lists(_tool, max_size=4), _query)
def test_every_token_one_class_and_names_tagged(tagger, tools, query):
    tags = tagger.tag({"messages": [{"role": "user", "content": query}], "tools": tools})
    assert len(tags.classes) == len(tags.token_ids) == len(tags.offsets)
    assert all(isinstance(c, C) and c != C.OTHER for c in tags.classes)
    assert tags.notes == []
    pos = 0
    for tool in tools:
        s, e = _name_span(tags.text, 0, tool["function"]["name"], pos)
        pos = e
        toks = [c for (ts, te), c in zip(tags.offsets, tags.classes) if ts < e and te > s]
        assert toks and all(c == C.TOOL_NAME for c in toks), (tool["function"]["name"], toks)


_junk = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda ch: st.lists(ch, max_size=3) | st.dictionaries(
                         st.sampled_from(["type", "function", "name", "parameters", "properties",
                                          "items", "required", "enum", "anyOf", "x"]), ch, max_size=4),
                     max_leaves=10)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_junk | _tool, max_size=3))
def test_malformed_tools_raise_only_tool_schema_error(tagger, tools):
    try:
        tags = tagger.tag({"messages": [{"role": "user", "content": "q"}], "tools": tools})
    except ToolSchemaError as e:
        assert e.path.startswith("tools")
    else:
        assert len(tags.classes) == len(tags.token_ids)
