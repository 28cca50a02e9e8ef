"""Short request errors (HTTP process; active only with a policy, like every other hook; the
target is declared in :mod:`.seam`).

SGLang answers a tool whose ``parameters`` is not a valid JSON Schema with HTTP 400 and
``str(jsonschema.SchemaError)``: the useful first line, then a 15-30 line dump of the
metaschema rule and the offending subschema. AFTER ``OpenAIServingChat._validate_request`` keeps
the first line and the location (``schema['properties']['x']['type']``); SGLang is not patched
and every other message passes through unchanged.
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


def after_validate(result, *args, **kwargs):
    return short_schema_error(result) if isinstance(result, str) else result
