"""BFCL function docs -> OpenAI tools, and the way back for decoded calls.

BFCL docs use Gorilla spellings (``dict``, ``float``, ``tuple``, ``any``) and function names with
dots (``math.factorial``); OpenAI tools want JSON Schema types and names matching
``^[a-zA-Z0-9_-]{1,64}$``. :func:`bfcl_to_openai_tools` converts one entry's function list and
returns a name map ``openai_name -> bfcl_name``; :func:`restore_names` applies it to decoded calls.

Name scheme (per function list, deterministic, collision-free by construction):
  1. a name that is already valid keeps itself (it is claimed first, so it can never be displaced);
  2. otherwise every invalid character becomes ``_`` and the result is cut to 64 characters
     (``math.factorial`` -> ``math_factorial``, BFCL's own convention for OpenAI-style models);
  3. if that name is already taken in this list, ``_2``, ``_3``, ... is appended (cutting the stem
     so the whole stays within 64) until it is free.
Invariant: the map is a bijection between the list's BFCL names and its OpenAI names, so the
inverse is exact; names not in the map (a model's invention) pass through unchanged.

Type mapping (recursively through ``properties`` and ``items``): dict->object, float->number,
tuple->array, any->string; string, integer, boolean, array, number, object stay. The top-level
``parameters.type`` becomes ``object``. BFCL's non-standard ``optional`` key is dropped; every
other key is copied. A malformed doc raises ``ValueError`` naming the path, e.g.
``functions[2].parameters.properties.x.type``.
"""

from __future__ import annotations

import copy
import re

__all__ = ["TYPE_MAP", "bfcl_to_openai_tools", "openai_name", "restore_names", "restore_call"]

TYPE_MAP = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "tuple": "array",
    "array": "array",
    "any": "string",
    "string": "string",
    "integer": "integer",
    "boolean": "boolean",
}
_VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_DROP_KEYS = ("optional",)


def openai_name(name: str) -> str:
    """The base OpenAI name for one BFCL name (step 2 of the scheme; no collision handling)."""
    if _VALID.match(name):
        return name
    return (_INVALID_CHAR.sub("_", name) or "_")[:64]


def _assign_names(names: list[str]) -> dict[str, str]:
    """bfcl_name -> openai_name for one list (names must be distinct)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for n in names:  # step 1: valid names claim themselves
        if _VALID.match(n):
            out[n] = n
            taken.add(n)
    for n in names:
        if n in out:
            continue
        base = openai_name(n)
        cand, k = base, 2
        while cand in taken:
            suffix = f"_{k}"
            cand = base[: 64 - len(suffix)] + suffix
            k += 1
        out[n] = cand
        taken.add(cand)
    return out


def _convert_schema(schema: object, path: str) -> dict:
    if not isinstance(schema, dict):
        raise ValueError(f"{path}: expected an object schema, got {type(schema).__name__}")
    if "type" not in schema:
        raise ValueError(f"{path}.type: missing")
    t = schema["type"]
    if not isinstance(t, str) or t not in TYPE_MAP:
        raise ValueError(f"{path}.type: unknown type {t!r} (known: {sorted(TYPE_MAP)})")
    out = {k: copy.deepcopy(v) for k, v in schema.items() if k not in _DROP_KEYS}
    out["type"] = TYPE_MAP[t]
    if "properties" in schema:
        props = schema["properties"]
        if not isinstance(props, dict):
            raise ValueError(f"{path}.properties: expected an object, got {type(props).__name__}")
        out["properties"] = {k: _convert_schema(v, f"{path}.properties.{k}") for k, v in props.items()}
    if "items" in schema:
        out["items"] = _convert_schema(schema["items"], f"{path}.items")
    return out


def bfcl_to_openai_tools(functions: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """Convert one entry's BFCL function docs to OpenAI tools.

    Returns ``(tools, name_map)``: tools in input order, each
    ``{"type": "function", "function": {"name", "description", "parameters"}}``, and
    ``name_map`` = openai_name -> bfcl_name covering every function. The input is not modified.
    """
    if not isinstance(functions, list):
        raise ValueError(f"functions: expected a list, got {type(functions).__name__}")
    names: list[str] = []
    for i, f in enumerate(functions):
        if not isinstance(f, dict):
            raise ValueError(f"functions[{i}]: expected an object, got {type(f).__name__}")
        n = f.get("name")
        if not isinstance(n, str) or not n:
            raise ValueError(f"functions[{i}].name: missing or not a non-empty string")
        if n in names:
            raise ValueError(f"functions[{i}].name: duplicate name {n!r}")
        names.append(n)
    assigned = _assign_names(names)
    tools = []
    for i, f in enumerate(functions):
        params = f.get("parameters", {"type": "dict", "properties": {}})
        path = f"functions[{i}].parameters"
        params = _convert_schema(params, path)
        if params["type"] != "object":
            raise ValueError(f"{path}.type: top-level parameters must be dict/object")
        params.setdefault("properties", {})
        desc = f.get("description", "")
        if not isinstance(desc, str):
            raise ValueError(f"functions[{i}].description: expected a string")
        fn = {"name": assigned[f["name"]], "description": desc, "parameters": params}
        tools.append({"type": "function", "function": fn})
    return tools, {o: b for b, o in assigned.items()}


def restore_call(name: str, name_map: dict[str, str]) -> str:
    """The BFCL name for an OpenAI tool name; unknown names pass through unchanged."""
    return name_map.get(name, name)


def restore_names(calls: list[dict], name_map: dict[str, str]) -> list[dict]:
    """Map decoded calls ``[{openai_name: args}]`` back to ``[{bfcl_name: args}]`` (new list)."""
    return [{restore_call(n, name_map): a for n, a in c.items()} for c in calls]
