"""The HTTP edge: what a client sends is checked here, in the process that serves HTTP, before
anything reaches the scheduler (DESIGN.md §6, trust boundary; targets declared in :mod:`..seam`,
active with a policy like every other hook: a server started without one is stock SGLang, the
Full KV baseline, and answers as stock does).

* AFTER ``TokenizerManager._validate_one_request`` (every generate request, single or each item
  of a batch, after SGLang's own length checks; its ``ValueError`` is SGLang's 400):

  - **token ids** outside ``[0, vocab_size)`` are refused (:func:`ids_error`): stock SGLang sends
    them on, and the scheduler's embedding lookup raises ``IndexError``, which kills the server;
  - **log-probability fields** the scheduler cannot run are refused (:func:`logprobs_error`:
    ``top_logprobs_num`` past the vocabulary, ``logprob_start_len`` below -1 or past the prompt;
    stock: both kill the server);
  - **input embeddings** are refused (:data:`EMBEDS_REFUSED`): the plugin's tags, budget
    arithmetic and shared segments are computed from token ids, and on these CPUs SGLang 0.5.23's
    scheduler dies on them (rows of the wrong width raise in its own check; well-formed float32
    rows meet a bfloat16 weight: measured);
  - **KV-hint actions of type** ``sglang_pask.*`` that this server did not write (its own carry
    an HMAC under a per-server key, :mod:`..managers.request_tags`) are refused: structure tags, segment
    ends and budgets never come from a client.

* :class:`JsonObjectBody`, an ASGI middleware, innermost (it sees the body SGLang's
  decompression middleware hands on): a POST body that is valid JSON but not an object (an
  array, a string, a number, ``null``) gets a 400 naming what it is. Stock SGLang answers ``[1,
  2, 3]`` on ``/v1/chat/completions`` with a 500 (a pydantic validator calls ``.get`` on the
  list). A body that is not JSON at all is left to FastAPI (its 400 names the position).
"""

from __future__ import annotations

import json

EMBEDS_REFUSED = ("input_embeds are not served with --pask-policy (structure tags and the KV budget are "
                  "computed from token ids): send input_ids, text or messages")
#: the first byte of a JSON text that is not an object (after whitespace)
_NON_OBJECT_START = frozenset(b'["-0123456789tfn')
_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
          type(None): "null"}


def ids_error(input_ids, vocab_size: int) -> str | None:
    """Why ``input_ids`` cannot be run (None: they can): the first id outside the vocabulary."""
    if not input_ids:
        return None
    try:
        if 0 <= min(input_ids) and max(input_ids) < vocab_size:
            return None
    except TypeError:
        pass
    for i, t in enumerate(input_ids):
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size:
            return (f"input_ids[{i}] = {t!r} is not a token id of this model (valid: 0 .. "
                    f"{vocab_size - 1})")[:200]
    return None


def logprobs_error(obj, input_ids, vocab_size: int) -> str | None:
    """Why a request's log-probability fields cannot be run (None: they can): ``top_logprobs_num``
    past the vocabulary (stock: the scheduler's top-k raises "selected index k out of range" and
    the server dies), ``logprob_start_len`` neither -1 nor a prompt position (stock: below -1 kills
    the server)."""
    if not getattr(obj, "return_logprob", False):
        return None
    k = getattr(obj, "top_logprobs_num", None)
    if isinstance(k, int) and not 0 <= k <= vocab_size:
        return f"top_logprobs_num = {k} is outside 0 .. {vocab_size} (the model's vocabulary)"
    start, n = getattr(obj, "logprob_start_len", None), len(input_ids or ())
    if isinstance(start, int) and not (start == -1 or 0 <= start <= n):
        return f"logprob_start_len = {start} is neither -1 (none) nor in 0 .. {n} (the prompt's tokens)"
    return None


def after_validate_one_request(result, manager=None, obj=None, input_ids=None, *args, **kwargs):
    """Refuse (``ValueError``: HTTP 400, one line) bad ids, input embeddings and client-written
    ``sglang_pask.*`` actions; else the result unchanged."""
    if getattr(obj, "input_embeds", None) is not None:
        raise ValueError(EMBEDS_REFUSED)
    vocab = getattr(getattr(manager, "model_config", None), "vocab_size", None)
    if vocab and (err := ids_error(input_ids, int(vocab)) or logprobs_error(obj, input_ids, int(vocab))):
        raise ValueError(err)
    hints = getattr(obj, "kv_hints", None)
    if hints is not None:
        from sglang_pask.srt.managers.request_tags import client_actions

        if forged := client_actions(hints):
            raise ValueError(f"kv_hints: action type {forged[0]!r} is reserved for the server "
                             "(sglang_pask computes structure tags itself from what it renders)")
    return result


def non_object(body: bytes) -> str | None:
    """What a JSON ``body`` is when it is valid JSON but not an object (``"an array"``, ...); None
    for an object, an empty body or text that is not JSON."""
    head = body.lstrip()[:1]
    if not head or head[0] not in _NON_OBJECT_START:
        return None
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return _KINDS.get(type(value), type(value).__name__)


class JsonObjectBody:
    """ASGI middleware: a POST whose body is JSON but not an object is answered 400 (SGLang's
    ``ErrorResponse`` shape) without reaching the app; every other request goes on unchanged,
    its body replayed to the app as received."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") != "POST" or _multipart(scope):
            return await self.app(scope, receive, send)
        messages, body = [], b""
        while True:
            message = await receive()
            messages.append(message)
            if message.get("type") != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if kind := non_object(body):
            return await _refuse(send, f"the request body must be a JSON object, got {kind}")
        pending = iter(messages)

        async def replay():
            for message in pending:
                return message
            return await receive()

        await self.app(scope, replay, send)


def _multipart(scope) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower().startswith(b"multipart/")
    return False


async def _refuse(send, message: str) -> None:
    body = json.dumps({"object": "error", "message": message, "type": "BadRequest", "param": None,
                       "code": 400}).encode()
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
