"""A hostile and careless client against a live PASK server (issue 47; the requests:
``hostile_kit.py``), in three modes: the README's line (the shipped tiny policy, radix off), the
radix mode (``--pask-segment system``: the tree shares compressed segments) and chunked prefill
(``--max-total-tokens 1200``: a long prompt is prefilled in chunks).

In each mode, one server:

1. answers a fixed set of requests (chat tool calls; a ``/generate`` on raw ids; in the chunked
   mode a prompt longer than a unit pool);
2. gets every hostile request (forged structure tags of every kind, ids outside the vocabulary,
   bodies that are not JSON objects, malformed fields), each sent while the others' effects are
   still around;
3. then answers the fixed set again.

Asserted: no hostile request gets a 5xx or no answer; every one the engine cannot run gets a 4xx
(all but the stop id past the vocabulary, which the engine runs); the server is alive after each;
the scheduler saw no forged or refused tags (all stopped at the HTTP edge); the fixed answers are
the same before and after; every pool slot is free again (radix: held by the tree, as before the
hostile requests: they planted no node). In the radix mode, ``/generate`` on the ids a forged
request named as a shared segment hits nothing (``cached_tokens`` 0) and answers as before.
Prints one line per mode: requests, 4xx, 5xx, alive, leaked slots, answers changed.
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import ROOT, SLEEP
from hostile_kit import cases, envelope, generate, send, tags_action
from srt_kit import long_tool_request

requests = pytest.importorskip("requests")

from sglang_pask.testing import running_server  # noqa: E402

MODEL = ROOT / "models" / "pask-tiny-fc"
MODES = {
    "recommended": ["--pask-policy", str(ROOT / "policies" / "pask-tiny-fc.b0.33.json"), "--disable-radix-cache"],
    "radix": ["--pask-policy", str(ROOT / "experiments/policies/pask-tiny-fc.segment.b0.33.json"),
              "--pask-segment", "system"],
    # the chunked prefill rule takes methods that read no statistics: the lookup 0.33 policy (the
    # shipped one reads the learned scorer and is written whole)
    "chunked": ["--pask-policy", str(ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.33.json"),
                "--disable-radix-cache", "--max-total-tokens", "1200"],
}
#: cases the engine can run (a 200 is right): a stop id that no token ever matches
RUNNABLE = {"a stop token id past the vocabulary"}


def _bodies():
    """(chat bodies of three train entries, a rendered prompt's ids, the tokenizer)."""
    from sglang_pask.eval.synthetic import generate as entries
    from sglang_pask.rendering import render_chat
    from sglang_pask.tiny.examples import request_body
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    bodies = [request_body(e)[0] for e in entries("train", 3, profile="tiny", start=40)]
    ids = list(render_chat(tok, {**bodies[0], "tool_choice": "required"}).token_ids)
    return bodies, ids, tok


def _chat(body: dict) -> dict:
    return {"model": "default", "tool_choice": "required", "max_tokens": 32, "temperature": 0, **body}


def _answers(srv, fixed) -> list:
    out = []
    for path, body in fixed:
        r = requests.post(f"{srv.url}{path}", json=body, timeout=300)
        assert r.status_code == 200, (path, r.text[:300])
        j = r.json()
        out.append(j["output_ids"] if path == "/generate" else
                   [(c["function"]["name"], c["function"]["arguments"])
                    for c in j["choices"][0]["message"].get("tool_calls") or []] or j["choices"][0]["message"])
    return out


def _pask(srv) -> dict:
    return requests.get(f"{srv.url}/server_info", timeout=30).json()["internal_states"][0]["pask"]


def _leaked(state: dict) -> int:
    """Slots neither free nor held by the radix tree (0 when the server is idle and balanced)."""
    pools = state["pools"]
    tree = state.get("tree") or {"tokens": 0, "unit_slots": [0] * len(pools["unit_available"])}
    return (pools["full_size"] - pools["full_available"] - tree["tokens"]) + sum(
        n - a - t for a, t, n in zip(pools["unit_available"], tree["unit_slots"], pools["unit_sizes"]))


def _settled(srv, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = _pask(srv)
        if _leaked(state) == 0 or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def _alive(srv) -> bool:
    try:
        return srv.proc.poll() is None and requests.get(f"{srv.url}/health", timeout=30).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.parametrize("mode", list(MODES))
def test_hostile_client(mode):
    bodies, ids, tok = _bodies()
    vocab = json.loads((MODEL / "config.json").read_text())["vocab_size"]
    fixed = [("/v1/chat/completions", _chat(b)) for b in bodies] + [("/generate", generate(ids[:60], 24))]
    if mode == "chunked":
        fixed.append(("/v1/chat/completions", _chat(long_tool_request(tok, 600))))
    hostile = cases(ids[:48], vocab, _chat(bodies[0]))
    with running_server(str(MODEL), [*MODES[mode], "--skip-server-warmup", *SLEEP]) as srv:
        before = _answers(srv, fixed)
        tree_before = _settled(srv).get("tree")
        rows = []
        for name, path, body in hostile:
            status, text = send(srv.url, path, body)
            rows.append((name, status, text, _alive(srv)))
        if mode == "radix":  # the forged segment names the first 48 ids; nothing may hit them now
            seg = ids[:60]
            status, _ = send(srv.url, "/generate", generate(seg, kv_hints=envelope(tags_action(60, [[0, 60]], seg=48))))
            rows.append(("forged segment of 48 ids", status, "", _alive(srv)))
            plain = requests.post(f"{srv.url}/generate", json=generate(seg, 24), timeout=300).json()
            assert plain["meta_info"]["cached_tokens"] == 0
            assert plain["output_ids"] == before[len(bodies)]
        after = _answers(srv, fixed)
        state = _settled(srv)
        alive = _alive(srv)

    n4 = sum(1 for r in rows if r[1] is not None and 400 <= r[1] < 500)
    n5 = sum(1 for r in rows if r[1] is None or r[1] >= 500)
    changed = sum(a != b for a, b in zip(before, after))
    leaked = _leaked(state)
    always = alive and all(r[3] for r in rows)
    print(f"\n{mode}: {len(rows)} hostile requests, {n4} 4xx, {n5} 5xx or no answer, alive after each {always}, "
          f"leaked slots {leaked}, fixed answers changed {changed} of {len(fixed)}")
    bad = [r for r in rows if r[1] is None or r[1] >= 500 or not r[3]]
    assert not bad, bad
    wrong = [r for r in rows if r[0] not in RUNNABLE and not 400 <= r[1] < 500]
    assert not wrong, wrong
    assert all("Traceback" not in r[2] for r in rows)
    assert alive and changed == 0 and leaked == 0, (alive, changed, leaked, state["pools"])
    assert state["tags"]["forged"] == 0 and state["tags"]["refused"] == 0, state["tags"]
    assert state["compression"].get("errors", 0) == 0, state["compression"]
    if mode == "radix":
        assert state["tree"]["nodes"] == tree_before["nodes"] and state["tree"]["tokens"] == tree_before["tokens"]
    if mode == "chunked":
        assert state["chunked_prefill"]["chunked_requests"] >= 2  # the long prompt, before and after
