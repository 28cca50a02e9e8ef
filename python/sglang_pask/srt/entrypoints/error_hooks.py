"""Short request errors: every 4xx message is one line, naming what is wrong, never a traceback
fragment, a file path or a dump (active only with a policy, like every other hook; each target is
declared in :mod:`sglang_pask.srt.seam`).

* HTTP process, FastAPI's ``RequestValidationError`` (malformed JSON, a missing or ill-typed
  field): SGLang's handler answers 400 with ``str(exc)``, which carries the endpoint context
  (``File "/.../http_server.py", line N, in ...``) and the raw error dicts. The seam wraps the
  handler SGLang's app holds (:func:`around_validation_handler`): the same shape and status, and a
  message built from ``exc.errors()`` (:func:`validation_message`); SGLang's own envelopes for
  ``/v1/messages`` (already a ``loc: msg`` digest) and ``/v1/systemone`` (FastAPI's detail list)
  are left to SGLang's handler.
* HTTP process, AFTER ``OpenAIServingChat._validate_request``: a tool whose ``parameters`` is not
  a valid JSON Schema gets ``str(jsonschema.SchemaError)`` from SGLang (the useful first line, then
  a 15-30 line dump of the metaschema rule); kept are the first line and the location
  (``schema['properties']['x']['type']``). A request SGLang accepts but
  :func:`sglang_pask.rendering.validate_request_text` refuses (a special-token string inside a tool
  or message) gets that one line as its 400.
* Scheduler: refusals of prompts the per-unit pools cannot hold, and of requests whose signed
  tags do not validate, are :mod:`sglang_pask.srt.managers.prompt_limits`.

SGLang is not patched otherwise; every other message passes through unchanged.
"""

from __future__ import annotations

import re

_LOCATION = re.compile(r"^On (schema\S*?):?$", re.M)
#: at most this many field errors are named in one message (a union of message types fails
#: once per member); the rest are counted
MAX_ERRORS = 4
#: the paths whose validation envelope SGLang's own handler writes (not ``str(exc)``)
_SGLANG_ENVELOPES = ("/v1/messages", "/v1/systemone")


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


# --- malformed requests (FastAPI's RequestValidationError) ------------------------------------

def _one_line(text) -> str:
    return " ".join(str(text or "").split())


def _loc(loc) -> str:
    """``("body", "messages", 0, "content")`` -> ``body.messages[0].content``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _json_position(body, pos) -> str:
    """`` (line L, column C)`` of character ``pos`` (0-based) in ``body``, as ``json`` counts them."""
    if not isinstance(pos, int):
        return ""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str):
        return f" (character {pos + 1})"
    return f" (line {body.count(chr(10), 0, pos) + 1}, column {pos - body.rfind(chr(10), 0, pos)})"


def validation_message(errors, body=None) -> str:
    """One line from FastAPI's ``exc.errors()``: ``invalid JSON in the request body: <what>
    (line L, column C)`` for a body that does not parse, ``<loc>: <msg>`` for each other error
    (joined with ``; ``, at most :data:`MAX_ERRORS`). The erroneous input is not echoed."""
    parts = []
    for err in errors or ():
        loc = tuple(err.get("loc") or ())
        if err.get("type") == "json_invalid":
            what = _one_line((err.get("ctx") or {}).get("error")) or "does not parse"
            parts.append(f"invalid JSON in the request body: {what}"
                         f"{_json_position(body, loc[-1] if loc else None)}")
        else:
            msg = _one_line(err.get("msg")) or "invalid"
            parts.append(f"{_loc(loc)}: {msg}" if loc else msg)
    if len(parts) > MAX_ERRORS:
        parts = [*parts[:MAX_ERRORS], f"and {len(parts) - MAX_ERRORS} more"]
    return "; ".join(parts) or "invalid request"


async def around_validation_handler(original, request, exc):
    """What SGLang's app answers a ``RequestValidationError`` with: SGLang's envelope and status
    (400, ``ErrorResponse``; the nested ``{"error": ...}`` on ``/v1/responses``), our one-line
    message. ``/v1/messages`` and ``/v1/systemone`` keep SGLang's handler."""
    path = request.url.path.removeprefix(request.scope.get("root_path", ""))
    if path.startswith(_SGLANG_ENVELOPES):
        return await original(request, exc)
    from http import HTTPStatus

    from fastapi.responses import JSONResponse
    from sglang.srt.entrypoints.openai.protocol import ErrorResponse

    message, status = validation_message(exc.errors(), getattr(exc, "body", None)), HTTPStatus.BAD_REQUEST
    if path.startswith("/v1/responses"):
        nested = {"message": message, "type": status.phrase, "param": None, "code": status.value}
        return JSONResponse(status_code=status.value, content={"error": nested})
    err = ErrorResponse(message=message, type=status.phrase, code=status.value)
    return JSONResponse(status_code=status.value, content=err.model_dump())
