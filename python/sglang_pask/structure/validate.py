"""Validation of the request fields the taggers rely on; errors name the offending path.

Only what the taggers read is checked (types of ``name``, ``description``, ``parameters``,
``properties``, ``type``, ``enum``, ``required``, sub-schemas). Unknown keywords are accepted
(and later tagged as schema text). Nothing here mutates its input.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, Iterator

JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_SUB = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


class ToolSchemaError(ValueError):
    """A malformed tool, schema or request. ``path`` names the offending field,
    e.g. ``tools[3].function.parameters.properties.x.type``."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _name(v: Any) -> str:
    return type(v).__name__


def _child(path: str, key: str) -> str:
    simple = key.isidentifier() or (key and all(c.isalnum() or c in "_-$" for c in key))
    return f"{path}.{key}" if simple else f"{path}[{key!r}]"


def validate_schema(schema: Any, path: str) -> None:
    """Check one JSON-schema node (dict or bool) and its sub-schemas."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ToolSchemaError(path, f"a schema must be an object, got {_name(schema)}")
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        for i, one in enumerate(types):
            p = f"{path}.type" if not isinstance(t, list) else f"{path}.type[{i}]"
            if not isinstance(one, str):
                raise ToolSchemaError(p, f"type must be a string, got {_name(one)}")
            if one not in JSON_TYPES:
                raise ToolSchemaError(p, f"unknown type {one!r} (expected one of {sorted(JSON_TYPES)})")
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise ToolSchemaError(f"{path}.properties", f"must be an object, got {_name(props)}")
        for key, sub in props.items():
            validate_schema(sub, _child(f"{path}.properties", str(key)))
    req = schema.get("required")
    if req is not None and not isinstance(req, bool):  # draft-3 boolean "required" is tolerated
        if not isinstance(req, list):
            raise ToolSchemaError(f"{path}.required", f"must be a list of names, got {_name(req)}")
        for i, r in enumerate(req):
            if not isinstance(r, str):
                raise ToolSchemaError(f"{path}.required[{i}]", f"must be a string, got {_name(r)}")
    enum = schema.get("enum")
    if enum is not None and not isinstance(enum, list):
        raise ToolSchemaError(f"{path}.enum", f"must be a list, got {_name(enum)}")
    for key in _SUB:
        if key in schema:
            sub = schema[key]
            if key == "items" and isinstance(sub, list):
                for i, s in enumerate(sub):
                    validate_schema(s, f"{path}.items[{i}]")
            else:
                validate_schema(sub, f"{path}.{key}")
    for key in _LISTS:
        if key in schema:
            subs = schema[key]
            if not isinstance(subs, list):
                raise ToolSchemaError(f"{path}.{key}", f"must be a list of schemas, got {_name(subs)}")
            for i, s in enumerate(subs):
                validate_schema(s, f"{path}.{key}[{i}]")
    for key in ("$defs", "definitions"):
        if key in schema:
            defs = schema[key]
            if not isinstance(defs, dict):
                raise ToolSchemaError(f"{path}.{key}", f"must be an object, got {_name(defs)}")
            for k, s in defs.items():
                validate_schema(s, _child(f"{path}.{key}", str(k)))


def validate_tools(tools: Any) -> list[dict]:
    """Check an OpenAI ``tools`` list; returns it (``None`` -> ``[]``)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ToolSchemaError("tools", f"must be a list, got {_name(tools)}")
    for i, tool in enumerate(tools):
        p = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise ToolSchemaError(p, f"a tool must be an object, got {_name(tool)}")
        if tool.get("type", "function") != "function":
            raise ToolSchemaError(f"{p}.type", f"only 'function' tools are supported, got {tool.get('type')!r}")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise ToolSchemaError(f"{p}.function", f"must be an object, got {_name(fn)}")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ToolSchemaError(f"{p}.function.name", f"must be a non-empty string, got {name!r}")
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise ToolSchemaError(f"{p}.function.description", f"must be a string, got {_name(desc)}")
        if "parameters" in fn and fn["parameters"] is not None:
            validate_schema(fn["parameters"], f"{p}.function.parameters")
    return tools


def validate_response_format(rf: Any) -> dict | None:
    """Return the JSON schema of an OpenAI ``response_format`` (``None`` if there is none)."""
    if rf is None:
        return None
    if not isinstance(rf, dict):
        raise ToolSchemaError("response_format", f"must be an object, got {_name(rf)}")
    kind = rf.get("type")
    if kind == "json_object":
        return {"type": "object"}
    if kind in (None, "text"):
        return None
    if kind != "json_schema":
        raise ToolSchemaError("response_format.type", f"unknown response_format type {kind!r}")
    js = rf.get("json_schema")
    if not isinstance(js, dict):
        raise ToolSchemaError("response_format.json_schema", f"must be an object, got {_name(js)}")
    schema = js.get("schema", js.get("schema_"))
    if schema is None:
        return {}
    validate_schema(schema, "response_format.json_schema.schema")
    return schema


def validate_messages(messages: Any) -> list[dict]:
    if not isinstance(messages, list):
        raise ToolSchemaError("messages", f"must be a list, got {_name(messages)}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ToolSchemaError(f"messages[{i}]", f"must be an object, got {_name(m)}")
        if not isinstance(m.get("role"), str):
            raise ToolSchemaError(f"messages[{i}].role", "must be a string")
        c = m.get("content")
        if c is not None and not isinstance(c, (str, list)):
            raise ToolSchemaError(f"messages[{i}].content", f"must be a string or list, got {_name(c)}")
    return messages


_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, any code point here is a lone surrogate
#: the parts of a request the chat template renders as text (special tokens are refused there)
RENDERED = ("messages", "tools")


@functools.lru_cache(maxsize=8)
def _any_of(specials: tuple[str, ...]) -> re.Pattern | None:
    ordered = sorted((t for t in set(specials) if t), key=lambda t: (-len(t), t))
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    """``(path, string, is_key)`` for every string of a JSON-like value (object keys too)."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, dict):
        for k, v in value.items():
            child = _child(path, str(k)) if path else _child("", str(k)).lstrip(".")
            if isinstance(k, str):
                yield child, k, True
            yield from _strings(v, child)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def validate_text(request: dict, specials: Iterable[str] = ()) -> None:
    """Every string of ``request`` (an OpenAI chat request body; object keys included) is valid
    Unicode text: a lone UTF-16 surrogate (JSON's ``"\\ud800"``) cannot be encoded, the tokenizer
    would raise ``TypeError``. No string of :data:`RENDERED` (``messages``, ``tools``) holds one of
    ``specials`` (the tokenizer's special tokens, e.g. ``<|im_end|>``): the tokenizer would read the
    text as that token, so a tool named ``<|im_end|>`` would end the system message inside the
    tools JSON (and move the shared segment's end there). Raises :class:`ToolSchemaError` naming
    the first such field."""
    pattern = _any_of(tuple(specials))
    for key, value in request.items():
        for path, text, is_key in _strings({key: value}, ""):
            what = "the name contains" if is_key else "contains"
            if (bad := _SURROGATE.search(text)) is not None:
                code = f"U+{ord(bad.group()):04X}"
                raise ToolSchemaError(path, f"{what} a lone surrogate {code} (not valid Unicode text)")
            if pattern is not None and key in RENDERED and (tok := pattern.search(text)) is not None:
                raise ToolSchemaError(path, f"{what} the special token {tok.group()!r} of the tokenizer "
                                            "(it would be read as that token, not as text)")
