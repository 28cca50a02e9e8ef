"""Short request errors (HTTP process; active only with a policy, like every other hook; the
target is declared in :mod:`.seam`).

SGLang answers a tool whose ``parameters`` is not a valid JSON Schema with HTTP 400 and
``str(jsonschema.SchemaError)``: the useful first line, then a 15-30 line dump of the
metaschema rule and the offending subschema. AFTER ``OpenAIServingChat._validate_request`` keeps
the first line and the location (``schema['properties']['x']['type']``); SGLang is not patched
and every other message passes through unchanged. A request SGLang accepts but
:func:`sglang_pask.rendering.validate_request_text` refuses (a special-token string inside a tool
or message) gets that one line as its 400.
"""

from __future__ import annotations

import re

_LOCATION = re.compile(r"^On (schema\S*?):?$", re.M)


def short_schema_error(message: str) -> str:
    """``"Tool 0 function has invalid 'parameters' schema: 'dict' is not valid ... (at
    schema['properties']['x']['type'])"`` from SGLang's multi-line message; other text unchanged."""
    if "invalid 'parameters' schema" not in message or "\n" not in message:
        return message
    first = message.split("\n", 1)[0].rstrip()
    where = _LOCATION.search(message)
    return f"{first} (at {where.group(1)})" if where else first


def after_validate(result, serving=None, request=None, *args, **kwargs):
    """SGLang's message shortened; else, a request SGLang accepted that our one rendering path
    refuses (a special token of the tokenizer in a tool or message, e.g. a tool named
    ``<|im_end|>``, which would be read as that token) gets its one-line message: HTTP 400
    instead of serving a prompt whose structure is not what it says."""
    if isinstance(result, str):
        return short_schema_error(result)
    tokenizer = getattr(getattr(serving, "tokenizer_manager", None), "tokenizer", None)
    if result is None and request is not None and tokenizer is not None:
        from sglang_pask.rendering import validate_request_text
        from sglang_pask.structure import ToolSchemaError

        try:
            validate_request_text(tokenizer, request)
        except ToolSchemaError as e:
            return str(e)
    return result
