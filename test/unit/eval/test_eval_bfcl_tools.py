"""bfcl_tools: type mapping, reversible collision-free names, path-naming errors."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools, restore_names

VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _fn(name, props=None, required=()):
    return {
        "name": name,
        "description": "d",
        "parameters": {"type": "dict", "properties": props or {}, "required": list(required)},
    }


def test_types_recursive():
    props = {
        "a": {"type": "float", "description": "x", "optional": True},
        "b": {"type": "tuple", "items": {"type": "float"}},
        "c": {
            "type": "dict",
            "properties": {
                "d": {"type": "any"},
                "e": {"type": "array", "items": {"type": "dict", "properties": {"f": {"type": "float"}}}},
            },
        },
        "g": {"type": "integer", "enum": [1, 2], "default": 1},
    }
    src = [_fn("m.f", props, ["a"])]
    tools, nm = bfcl_to_openai_tools(src)
    p = tools[0]["function"]["parameters"]
    assert tools[0]["type"] == "function" and p["type"] == "object" and p["required"] == ["a"]
    pr = p["properties"]
    assert pr["a"] == {"type": "number", "description": "x"}
    assert pr["b"] == {"type": "array", "items": {"type": "number"}}
    assert pr["c"]["type"] == "object" and pr["c"]["properties"]["d"]["type"] == "string"
    assert pr["c"]["properties"]["e"]["items"]["properties"]["f"]["type"] == "number"
    assert pr["g"] == {"type": "integer", "enum": [1, 2], "default": 1}
    assert src[0]["parameters"]["type"] == "dict"  # input untouched
    assert nm == {"m_f": "m.f"}


def test_collisions_valid_names_keep_themselves():
    tools, nm = bfcl_to_openai_tools([_fn("a.b"), _fn("a_b"), _fn("a-b"), _fn("a:b")])
    names = [t["function"]["name"] for t in tools]
    assert names[1] == "a_b" and names[2] == "a-b"
    assert len(set(names)) == 4 and all(VALID.match(n) for n in names)
    assert sorted(nm.values()) == sorted(["a.b", "a_b", "a-b", "a:b"])


def test_long_names_truncate_and_stay_distinct():
    base = "x." * 40
    tools, nm = bfcl_to_openai_tools([_fn(base + "1"), _fn(base + "2")])
    names = [t["function"]["name"] for t in tools]
    assert all(VALID.match(n) for n in names) and len(set(names)) == 2
    assert {nm[n] for n in names} == {base + "1", base + "2"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab._-:é", min_size=1, max_size=70), min_size=1, max_size=6, unique=True))
def test_names_bijective(names):
    tools, nm = bfcl_to_openai_tools([_fn(n) for n in names])
    out = [t["function"]["name"] for t in tools]
    assert all(VALID.match(n) for n in out)
    assert len(set(out)) == len(names)
    assert [nm[o] for o in out] == names
    calls = [{o: {"k": i}} for i, o in enumerate(out)]
    assert restore_names(calls, nm) == [{n: {"k": i}} for i, n in enumerate(names)]


def test_restore_unknown_passthrough():
    assert restore_names([{"zzz": {}}], {"a_b": "a.b"}) == [{"zzz": {}}]


@pytest.mark.parametrize(
    "functions, path",
    [
        ([_fn("a"), _fn("b"), _fn("c", {"x": {"type": "complex"}})], "functions[2].parameters.properties.x.type"),
        ([_fn("a", {"x": {"description": "no type"}})], "functions[0].parameters.properties.x.type"),
        (
            [_fn("a", {"x": {"type": "array", "items": {"type": "vector"}}})],
            "functions[0].parameters.properties.x.items.type",
        ),
        ([{"description": "no name", "parameters": {"type": "dict", "properties": {}}}], "functions[0].name"),
        ([_fn("a"), _fn("a")], "functions[1].name"),
        ([_fn("a", {"x": "string"})], "functions[0].parameters.properties.x"),
        ("notalist", "functions"),
    ],
)
def test_malformed_names_path(functions, path):
    with pytest.raises(ValueError) as ei:
        bfcl_to_openai_tools(functions)
    assert str(ei.value).startswith(path)
