"""Paint the parsed JSON of one tool (or one JSON schema) onto a per-char :class:`RankMap`.

The walk carries a *context* (tool wrapper / function / schema / properties map / default /
unknown), so a key's class depends on where it sits, not on its spelling: a parameter literally
named ``"type"`` or ``"required"`` is a key of a ``properties`` map and is ``PARAM_NAME``.
String contents get the class; their quotes stay ``SCHEMA_PUNCT`` (the container's fill).
"""

from __future__ import annotations

from .classes import StructClass as C
from .json_spans import JNode
from .spans import RankMap

#: Schema keywords whose value is a schema.
_SUB_SCHEMA = {"items", "additionalProperties", "not", "contains", "propertyNames",
               "additionalItems", "unevaluatedProperties", "unevaluatedItems", "if", "then", "else"}
#: Schema keywords whose value is a list of schemas.
_SCHEMA_LIST = {"anyOf", "oneOf", "allOf", "prefixItems"}
#: Schema keywords whose value maps names to schemas (the names are not parameters).
_SCHEMA_MAP = {"$defs", "definitions", "patternProperties", "dependentSchemas"}
#: Other known keywords: key is SCHEMA_KEY, value is SCHEMA_TEXT.
_KNOWN_PLAIN = {"format", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                "minLength", "maxLength", "minItems", "maxItems", "uniqueItems", "multipleOf",
                "minProperties", "maxProperties", "$ref", "$schema", "$id", "examples", "nullable",
                "strict", "deprecated", "readOnly", "writeOnly", "contentMediaType", "$comment",
                "dependentRequired"}


def _paint_str(node: JNode, rmap: RankMap, cls: C) -> None:
    """Paint a string's contents (not its quotes), or a scalar / container's whole span."""
    if node.kind == "string":
        rmap.paint(node.start + 1, node.end - 1, cls)
    elif node.kind in ("number", "literal"):
        rmap.paint(node.start, node.end, cls)
    else:
        _paint_leaves(node, rmap, cls)


def _paint_leaves(node: JNode, rmap: RankMap, cls: C) -> None:
    """Paint every key and scalar inside ``node`` with ``cls`` (punctuation stays as is)."""
    if node.kind == "object":
        for _key, ks, ke, child in node.items:
            rmap.paint(ks + 1, ke - 1, cls)
            _paint_leaves(child, rmap, cls)
    elif node.kind == "array":
        for child in node.items:
            _paint_leaves(child, rmap, cls)
    else:
        _paint_str(node, rmap, cls)


def _key(rmap: RankMap, ks: int, ke: int, cls: C) -> None:
    rmap.paint(ks + 1, ke - 1, cls)


def paint_tool(node: JNode, rmap: RankMap) -> None:
    """Paint one rendered tool: ``{"type": "function", "function": {...}}`` or a bare function."""
    rmap.paint(node.start, node.end, C.SCHEMA_PUNCT)
    if node.kind != "object":
        return
    if "function" in node.value and isinstance(node.value["function"], dict):
        for key, ks, ke, child in node.items:
            if key == "function" and child.kind == "object":
                _key(rmap, ks, ke, C.SCHEMA_KEY)
                _function(child, rmap)
            elif key == "type":
                _key(rmap, ks, ke, C.SCHEMA_KEY)
                _paint_str(child, rmap, C.SCHEMA_TEXT)
            else:
                _key(rmap, ks, ke, C.SCHEMA_TEXT)
                _paint_leaves(child, rmap, C.SCHEMA_TEXT)
    else:
        _function(node, rmap)


def _function(node: JNode, rmap: RankMap) -> None:
    for key, ks, ke, child in node.items:
        if key == "name" and child.kind == "string":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_str(child, rmap, C.TOOL_NAME)
        elif key == "description":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_str(child, rmap, C.DESCRIPTION)
        elif key == "parameters":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            paint_schema(child, rmap)
        elif key == "strict":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_str(child, rmap, C.SCHEMA_TEXT)
        else:
            _key(rmap, ks, ke, C.SCHEMA_TEXT)
            _paint_leaves(child, rmap, C.SCHEMA_TEXT)


def paint_schema(node: JNode, rmap: RankMap) -> None:
    """Paint a JSON-schema node (``true``/``false`` schemas and non-objects are schema text)."""
    if node.kind != "object":
        _paint_leaves(node, rmap, C.SCHEMA_TEXT)
        return
    for key, ks, ke, child in node.items:
        if key == "type":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_leaves(child, rmap, C.PARAM_TYPE)
        elif key == "properties" and child.kind == "object":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            for _pk, pks, pke, pchild in child.items:
                _key(rmap, pks, pke, C.PARAM_NAME)
                paint_schema(pchild, rmap)
        elif key in ("enum", "const"):
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_leaves(child, rmap, C.ENUM_VALUE)
        elif key == "required" and child.kind == "array":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_leaves(child, rmap, C.REQUIRED_LIST)
        elif key == "default":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_leaves(child, rmap, C.DEFAULT_VALUE)
        elif key in ("description", "title"):
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_leaves(child, rmap, C.DESCRIPTION)
        elif key in _SUB_SCHEMA:
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            if child.kind == "array":  # draft-4 tuple "items": [schema, ...]
                for sub in child.items:
                    paint_schema(sub, rmap)
            else:
                paint_schema(child, rmap)
        elif key in _SCHEMA_LIST and child.kind == "array":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            for sub in child.items:
                paint_schema(sub, rmap)
        elif key in _SCHEMA_MAP and child.kind == "object":
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            for _dk, dks, dke, dchild in child.items:
                _key(rmap, dks, dke, C.SCHEMA_TEXT)
                paint_schema(dchild, rmap)
        elif key in _KNOWN_PLAIN:
            _key(rmap, ks, ke, C.SCHEMA_KEY)
            _paint_leaves(child, rmap, C.SCHEMA_TEXT)
        else:  # unknown keyword: tolerated, tagged as schema text
            _key(rmap, ks, ke, C.SCHEMA_TEXT)
            _paint_leaves(child, rmap, C.SCHEMA_TEXT)


def collect_literals(schema, out: set[str]) -> None:
    """Add the string forms of every ``enum`` / ``const`` member in ``schema`` (recursively)."""
    if isinstance(schema, dict):
        for key, val in schema.items():
            if key == "enum" and isinstance(val, list):
                out.update(str(v) for v in val if isinstance(v, (str, int, float)) and not isinstance(v, bool))
            elif key == "const" and isinstance(val, (str, int, float)) and not isinstance(val, bool):
                out.add(str(val))
            elif key == "properties" and isinstance(val, dict):
                for sub in val.values():
                    collect_literals(sub, out)
            elif key != "default":
                collect_literals(val, out)
    elif isinstance(schema, list):
        for v in schema:
            collect_literals(v, out)
