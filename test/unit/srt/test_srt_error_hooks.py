"""srt/entrypoints/error_hooks, srt/managers/prompt_limits: every 4xx message they write is one line
that names what is wrong.

* ``short_schema_error`` on the message SGLang builds (``str(SchemaError)``);
* ``validation_message`` on FastAPI's ``exc.errors()`` (malformed JSON, a missing field, a
  nested location), and the handler the seam wraps around the one an app holds, on a FastAPI app
  with SGLang's own request model and SGLang's handler: SGLang's envelope, our message;
* the seam's ``AppHandler`` declaration: a handler not installed is reported, an installed one
  passes, an app that already serves is refused;
* ``length_message``: a too-long prompt names the limit that refused it.
"""

import json

import pytest
from sglang_pask.srt import seam
from sglang_pask.srt.entrypoints.error_hooks import short_schema_error, validation_message
from sglang_pask.srt.managers.prompt_limits import PromptLimits, length_message


def _sglang_message(schema) -> str:
    """What serving_chat._validate_request returns: its alias rewrite, then check_schema."""
    jsonschema = pytest.importorskip("jsonschema")
    from sglang.srt.entrypoints.openai.serving_chat import normalize_json_schema_types

    normalize_json_schema_types(schema)
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        return f"Tool 0 function has invalid 'parameters' schema: {str(e)}"
    raise AssertionError("schema is valid")


def test_keeps_first_line_and_location():
    msg = _sglang_message({"type": "object", "properties": {"x": {"type": "nope"}}})
    assert msg.count("\n") > 5  # SGLang's dump
    assert short_schema_error(msg) == ("Tool 0 function has invalid 'parameters' schema: 'nope' is not valid under "
                                       "any of the given schemas (at schema['properties']['x']['type'])")
    top = short_schema_error(_sglang_message({"type": "object", "required": "x"}))
    assert "\n" not in top and top.startswith("Tool 0 function has invalid 'parameters' schema: 'x' is not of type")


def test_other_messages_unchanged():
    for m in ("Tool names must be unique across request and message tools.", "line one\nline two", ""):
        assert short_schema_error(m) == m


# --- malformed requests ------------------------------------------------------------------------

def _json_invalid(body: str) -> dict:
    """FastAPI's error dict for a body ``json`` cannot parse (fastapi/routing.py)."""
    try:
        json.loads(body)
    except json.JSONDecodeError as e:
        return {"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error", "input": {},
                "ctx": {"error": e.msg}}
    raise AssertionError("body parses")


def test_invalid_json_names_the_place():
    body = '{"model": "default", "messages": [}'
    assert validation_message([_json_invalid(body)], body) == (
        "invalid JSON in the request body: Expecting value (line 1, column 35)")
    body = '{"model": "default",\n  "messages": [\n    {"role": "user",}\n]}'
    err = _json_invalid(body)
    assert validation_message([err], body) == (
        "invalid JSON in the request body: Expecting property name enclosed in double quotes (line 3, column 21)")
    assert validation_message([err], body.encode()) == validation_message([err], body)
    assert validation_message([err]) == (  # no body at hand: the character
        f"invalid JSON in the request body: Expecting property name enclosed in double quotes "
        f"(character {err['loc'][1] + 1})")


def test_field_errors_are_loc_and_msg_without_the_input():
    missing = {"type": "missing", "loc": ("body", "messages"), "msg": "Field required",
               "input": {"model": "default", "secret": "do not echo"}}
    assert validation_message([missing]) == "body.messages: Field required"
    nested = {"type": "string_type", "loc": ("body", "messages", 0, "content", "str"),
              "msg": "Input should be a valid\n   string", "input": 3}
    header = {"loc": ["header", "content-type"], "type": "value_error",
              "msg": "Unsupported Media Type: Only 'application/json' is allowed"}
    assert validation_message([missing, nested, header]) == (
        "body.messages: Field required; body.messages[0].content.str: Input should be a valid string; "
        "header.content-type: Unsupported Media Type: Only 'application/json' is allowed")
    many = validation_message([nested] * 9)
    assert many.count("Input should be") == 4 and many.endswith("; and 5 more")
    assert validation_message([]) == "invalid request"


def _app():
    """A FastAPI app with SGLang's chat request model, and SGLang's own validation handler
    registered the way SGLang registers it."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from sglang.srt.entrypoints.http_server import validation_exception_handler
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    app = FastAPI()
    app.exception_handler(RequestValidationError)(validation_exception_handler)

    @app.post("/v1/chat/completions")
    async def chat(request: ChatCompletionRequest):
        return {"ok": True}

    @app.post("/v1/messages")
    async def messages(request: ChatCompletionRequest):
        return {"ok": True}

    return app


#: the app a declaration names (``seam.resolve`` reads it by name, as it reads SGLang's)
APP = None
DECL = seam.AppHandler(f"{__name__}:APP", "fastapi.exceptions.RequestValidationError",
                       "sglang_pask.srt.entrypoints.error_hooks:around_validation_handler")


def test_the_wrapped_handler_keeps_sglangs_envelope_with_one_line(monkeypatch):
    from fastapi.testclient import TestClient

    monkeypatch.setitem(globals(), "APP", _app())
    assert seam.check(DECL) == (f"hook {DECL.hook} is not {DECL.app}'s handler of {DECL.exc}")  # not installed
    seam.wrap_handler(DECL)
    assert seam.check(DECL) is None
    client = TestClient(APP)
    r = client.post("/v1/chat/completions", content='{"model": "default", "messages": [',
                    headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {"object": "error", "type": "Bad Request", "param": None, "code": 400,
                        "message": "invalid JSON in the request body: Expecting value (line 1, column 35)"}
    r = client.post("/v1/chat/completions", json={"model": "default"})
    assert (r.status_code, r.json()["message"]) == (400, "body.messages: Field required")
    # SGLang's own envelope for /v1/messages (SGLang's handler, reached through the wrapper)
    r = client.post("/v1/messages", json={"model": "default"})
    assert r.status_code == 400 and r.json()["type"] == "error" and "messages" in r.json()["error"]["message"]
    with pytest.raises(seam.SeamError, match="already serves"):  # Starlette has copied the handlers
        seam.wrap_handler(DECL)


def test_an_app_without_the_handler_is_refused(monkeypatch):
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError

    app = FastAPI()
    del app.exception_handlers[RequestValidationError]
    monkeypatch.setitem(globals(), "APP", app)
    with pytest.raises(seam.SeamError, match="holds no handler for fastapi.exceptions.RequestValidationError"):
        seam.wrap_handler(DECL)


# --- too-long prompts -------------------------------------------------------------------------

def test_a_too_long_prompt_names_the_limit():
    pool = PromptLimits(context_len=40960, capacity=1352, budget=0.33)  # ceil(0.33 x 4096) slots per unit
    # SGLang: max_req_input_len = min(context_len, capacity) - 6, refused from there on
    assert length_message(1400, 1346, pool) == (
        "the prompt has 1400 tokens; with --pask-policy at budget 0.33 the server accepts at most 1345 (the "
        "per-unit KV pool of 1352 slots holds a whole prompt before it is compressed; raise --max-total-tokens)")
    context = PromptLimits(context_len=4096, capacity=21627, budget=0.33)
    assert length_message(4090, 4090, context) == (
        "the prompt has 4090 tokens; the server accepts at most 4089 (the model's context length is 4096 tokens)")
