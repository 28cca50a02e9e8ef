"""The trust boundary on CPU, no server (srt/entrypoints/edge.py, srt/managers/request_tags.py; DESIGN.md §6):

* the tags action the server attaches is signed under its per-server key; a changed payload, an
  action signed under another key, or one written by hand does not verify;
* the HTTP edge refuses client-written ``sglang_pask.*`` actions and token ids outside the
  vocabulary with one line (a ``ValueError``: SGLang's 400), and lets every other action through;
* the scheduler reads only a signed action: a forged one is counted and ignored (the request is
  untagged, classed OTHER, under its budget), a signed one that does not fit the request is
  refused with a line naming the field;
* the middleware answers a JSON body that is not an object with a 400 and hands every other body
  to the app byte for byte;
* the seam's ``AppMiddleware``: a middleware not added is reported, an added one passes, an app
  that already serves is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
from array import array
from types import SimpleNamespace

import pytest
from sglang_pask.environ import envs

pytest.importorskip("sglang")
from sglang.srt.managers.kv_hints import KvHintAction, KvHintsEnvelope  # noqa: E402
from sglang_pask.srt import seam  # noqa: E402
from sglang_pask.srt.entrypoints import edge  # noqa: E402
from sglang_pask.srt.managers import request_tags  # noqa: E402
from sglang_pask.srt.managers.request_tags import (  # noqa: E402
    ACTION_TYPE,
    RequestTags,
    TagError,
    attach,
    client_actions,
    signed,
    validate,
)
from sglang_pask.srt.state import reset, state  # noqa: E402
from sglang_pask.structure.classes import StructClass  # noqa: E402

#: the per-server signing key's variable
HINT_KEY = envs.SGLANG_PASK_HINT_KEY.name

C = len(StructClass)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(HINT_KEY, "11" * 32)
    reset()
    yield
    reset()


def _own(classes, seg=0, rid="r"):
    carrier = SimpleNamespace(rid=rid, kv_hints=None)
    attach(carrier, classes, "qwen3_tools", seg)
    return carrier.kv_hints


def _action(payload, action_type=ACTION_TYPE):
    return KvHintAction(action_id="x", action_type=action_type, action_version="1", payload=payload)


def _req(n, envelope):
    return SimpleNamespace(rid="q", origin_input_ids=array("q", range(n)), kv_hints=envelope)


# --- signing -----------------------------------------------------------------------------------

def test_own_action_verifies_and_changes_do_not(monkeypatch):
    env = _own([1, 1, 3, 3, 3], seg=2)
    (action,) = env.actions
    assert signed(action) and client_actions(env) == []
    payload = dict(action.payload)
    for field, value in (("runs", [[1, 5]]), ("seg", 3), ("n", 6), ("n", 5), ("tracker", "json")):
        forged = {**payload, field: value}
        assert signed(_action(forged)) == (forged == payload), field
    assert not signed(_action({k: v for k, v in payload.items() if k != "mac"}))
    monkeypatch.setenv(HINT_KEY, "22" * 32)  # another server's key
    assert not signed(action)
    monkeypatch.delenv(HINT_KEY)  # no key (no policy): nothing verifies, nothing signs
    assert not signed(action)
    with pytest.raises(RuntimeError, match=HINT_KEY):
        _own([1, 2])


def test_client_actions_names_only_unsigned_reserved_types():
    own = _own([1, 2, 3]).actions[0]
    other = _action({"anything": 1}, action_type="vendor.prefetch")
    forged = _action({"n": 3, "runs": [[999, 3]], "tracker": "qwen3_tools", "seg": 0, "mac": "0" * 64})
    assert client_actions(KvHintsEnvelope(protocol_version="1", message_id="m", actions=[own, other])) == []
    env = KvHintsEnvelope(protocol_version="1", message_id="m", actions=[other, forged, own])
    assert client_actions(env) == [ACTION_TYPE]
    future = _action({}, action_type="sglang_pask.budget")
    assert client_actions(KvHintsEnvelope(protocol_version="1", message_id="m", actions=[future])) == [
        "sglang_pask.budget"]


# --- validation ----------------------------------------------------------------------------------

def test_validate_accepts_own_payload():
    classes = [1, 1, 5, 5, 5, 0, C - 1]
    payload = dict(_own(classes, seg=3).actions[0].payload)
    assert validate(payload, len(classes)).tolist() == classes


@pytest.mark.parametrize("change, message", [
    ({"n": 6}, "n = 6, the prompt has 7 tokens"),
    ({"runs": [[999, 7]]}, "class 999, outside 0.."),
    ({"runs": [[-7, 7]]}, "class -7"),
    ({"runs": [[1, 0], [1, 7]]}, "count 0"),
    ({"runs": [[1, 3]]}, "cover 3 tokens, n = 7"),
    ({"runs": [[1, "7"]]}, "must be [class, count]"),
    ({"runs": [[1.0, 7]]}, "must be [class, count]"),
    ({"runs": "1x7"}, "runs must be a list"),
    ({"tracker": "evil"}, "unknown tracker 'evil'"),
    ({"seg": 7}, "seg = 7, outside 0..6"),
    ({"seg": -1}, "seg = -1"),
    ({"seg": True}, "seg = True"),
])
def test_validate_names_the_problem(change, message):
    payload = {**dict(_own([1] * 7).actions[0].payload), **change}
    with pytest.raises(TagError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate(payload, 7)


def test_scheduler_reads_only_signed_actions():
    n = 6
    forged = _action({"n": n, "runs": [[int(StructClass.TOOL_NAME), n]], "tracker": "qwen3_tools", "seg": 3})
    tags = RequestTags(_req(n, KvHintsEnvelope(protocol_version="1", message_id="m", actions=[forged])))
    assert not tags.tagged and tags.error is None and tags.segment_end == 0
    assert tags.prompt.tolist() == [int(StructClass.OTHER)] * n
    assert state().tags["forged"] == 1 and state().tags["untagged"] == 1

    own = _own([2, 2, 7, 7, 7, 1], seg=3)
    both = KvHintsEnvelope(protocol_version="1", message_id="m", actions=[forged, *own.actions])
    tags = RequestTags(_req(n, both))  # the forged one comes first: still only the signed one counts
    assert tags.tagged and tags.prompt.tolist() == [2, 2, 7, 7, 7, 1] and tags.segment_end == 3
    assert state().tags["forged"] == 2 and state().tags["tagged"] == 1


def test_signed_tags_that_do_not_fit_refuse_the_request():
    tags = RequestTags(_req(5, _own([1, 2, 3, 4])))  # signed for 4 ids, the request runs 5
    assert tags.error == "tags: n = 4, the prompt has 5 tokens" and not tags.tagged
    assert tags.prompt.tolist() == [0] * 5 and tags.segment_end == 0
    assert state().tags["refused"] == 1


# --- the HTTP edge -----------------------------------------------------------------------------------

def _manager(vocab=100):
    return SimpleNamespace(model_config=SimpleNamespace(vocab_size=vocab))


def test_edge_refuses_bad_ids_in_one_line():
    ok = SimpleNamespace(input_embeds=None, kv_hints=None)
    assert edge.after_validate_one_request(None, _manager(), ok, [0, 5, 99]) is None
    for ids, bad in (([1, -3, 2], "input_ids[1] = -3"), ([1, 2, 100], "input_ids[2] = 100"),
                     ([1_000_000], "input_ids[0] = 1000000")):
        with pytest.raises(ValueError) as e:
            edge.after_validate_one_request(None, _manager(), ok, ids)
        assert str(e.value) == f"{bad} is not a token id of this model (valid: 0 .. 99)"
    assert edge.ids_error(None, 10) is None and edge.ids_error([], 10) is None
    assert "input_ids[1] = 'x'" in edge.ids_error([1, "x"], 10)


def test_edge_refuses_embeddings_and_logprob_fields_the_scheduler_cannot_run():
    def obj(**kw):
        return SimpleNamespace(**{"input_embeds": None, "kv_hints": None, "return_logprob": True,
                                  "top_logprobs_num": 0, "logprob_start_len": -1, **kw})

    ids = [1, 2, 3, 4]
    for kw in ({}, {"top_logprobs_num": 100}, {"logprob_start_len": 0}, {"logprob_start_len": 4},
               {"return_logprob": False, "top_logprobs_num": 10 ** 6, "logprob_start_len": -9}):
        assert edge.after_validate_one_request(None, _manager(), obj(**kw), ids) is None, kw
    for kw, message in (({"top_logprobs_num": 101}, "top_logprobs_num = 101 is outside 0 .. 100"),
                        ({"logprob_start_len": -5}, "logprob_start_len = -5 is neither -1 (none) nor in 0 .. 4"),
                        ({"logprob_start_len": 5}, "logprob_start_len = 5 is neither"),
                        ({"input_embeds": [[0.0] * 8]}, "input_embeds are not served with --pask-policy")):
        with pytest.raises(ValueError) as e:
            edge.after_validate_one_request(None, _manager(), obj(**kw), ids)
        assert str(e.value).startswith(message) and "\n" not in str(e.value), kw


def test_edge_refuses_client_written_tags_and_passes_others():
    forged = KvHintsEnvelope(protocol_version="1", message_id="m", actions=[
        _action({"n": 3, "runs": [[999, 3]], "tracker": "qwen3_tools", "seg": 0})])
    obj = SimpleNamespace(input_embeds=None, kv_hints=forged)
    with pytest.raises(ValueError, match=f"kv_hints: action type '{ACTION_TYPE}' is reserved for the server"):
        edge.after_validate_one_request(None, _manager(), obj, [1, 2, 3])
    other = KvHintsEnvelope(protocol_version="1", message_id="m",
                            actions=[_action({"x": 1}, "vendor.prefetch"), *_own([1, 2, 3]).actions])
    assert edge.after_validate_one_request("r", _manager(), SimpleNamespace(input_embeds=None, kv_hints=other),
                                           [1, 2, 3]) == "r"


# --- non-object bodies ----------------------------------------------------------------------------------

@pytest.mark.parametrize("body, kind", [
    (b"[1, 2, 3]", "an array"), (b'  "x"', "a string"), (b"42", "a number"), (b"-1.5", "a number"),
    (b"null", "null"), (b"true", "a boolean"), (b'{"a": 1}', None), (b"", None), (b"[1, 2", None),
    (b"nonsense", None),
])
def test_non_object(body, kind):
    assert edge.non_object(body) == kind


def _drive(body: bytes, chunks: int = 1, method: str = "POST", content_type: bytes = b"application/json"):
    """Run the middleware over an app that echoes the body it reads; returns (status, body)."""
    seen = {}

    async def app(scope, receive, send):
        got = b""
        while True:
            m = await receive()
            got += m.get("body", b"")
            if not m.get("more_body"):
                break
        seen["body"] = got
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    parts = [body[k * len(body) // chunks:(k + 1) * len(body) // chunks] for k in range(chunks)]
    queue = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent = []

    async def receive():
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "headers": [(b"content-type", content_type)]}
    asyncio.run(edge.JsonObjectBody(app)(scope, receive, send))
    status = sent[0]["status"]
    return status, b"".join(m.get("body", b"") for m in sent[1:]), seen.get("body")


def test_middleware_refuses_non_object_json():
    status, body, reached = _drive(b"[1, 2, 3]")
    assert status == 400 and reached is None
    assert json.loads(body) == {"object": "error", "message": "the request body must be a JSON object, got an array",
                                "type": "BadRequest", "param": None, "code": 400}


@pytest.mark.parametrize("chunks", [1, 3])
def test_middleware_hands_other_bodies_on_unchanged(chunks):
    payload = json.dumps({"messages": [{"role": "user", "content": "x" * 500}]}).encode()
    for body in (payload, b"[1, 2", b"not json at all"):
        status, out, reached = _drive(body, chunks)
        assert (status, out, reached) == (200, b"ok", body)
    assert _drive(b"[1]", method="GET")[2] == b"[1]"  # only POST bodies are looked at
    assert _drive(b"[1]", content_type=b"multipart/form-data; boundary=x")[2] == b"[1]"


def test_seam_middleware_declaration():
    fastapi = pytest.importorskip("fastapi")
    app = fastapi.FastAPI()
    d = seam.AppMiddleware(f"{__name__}._APP", "sglang_pask.srt.entrypoints.edge:JsonObjectBody")
    globals()["_APP"] = app
    try:
        assert "is not in" in seam.check(d)
        seam.add_middleware(d)
        seam.add_middleware(d)  # once only
        assert [m.cls for m in app.user_middleware].count(edge.JsonObjectBody) == 1
        assert seam.check(d) is None
        app.middleware_stack = app.build_middleware_stack()  # the app serves
        with pytest.raises(seam.SeamError, match="already serves"):
            seam.add_middleware(d)
    finally:
        del globals()["_APP"]
    declared = [x for x in seam.DECLARED if isinstance(x, seam.AppMiddleware)]
    assert [x.cls for x in declared] == ["sglang_pask.srt.entrypoints.edge:JsonObjectBody"]


def test_plugin_makes_a_new_key(monkeypatch):
    monkeypatch.setenv(HINT_KEY, "11" * 32)
    request_tags.make_key()
    first = os.environ[HINT_KEY]
    request_tags.make_key()
    second = os.environ[HINT_KEY]
    assert first != "11" * 32 and first != second and len(bytes.fromhex(second)) == 32
