"""KV persistence per unit in a live server (``--pask-policy`` with the trained tiny model):

* memory is really freed: each finished request held about b x its Full KV (what its row still
  maps in the per-unit pools when SGLang releases it, read back from ``/server_info``), and the
  pools return to their idle counts;
* load (64 concurrent clients: tool calls, malformed requests, aborted streams, prompts over a
  unit pool -- served, prefilled in chunks -- and over the context length -- refused) leaves no
  leak, no 5xx, no crash: pools idle afterwards, no compression
  errors, SGLang's own idle leak check (strict: a leak would kill the scheduler) ran after the
  load and logged nothing;
* bad persistence flags are refused with one line naming the problem, before anything starts
  (all through SGLang's own argument parsing, two through the launcher: exit 1 within seconds);
* without a policy the server is stock (conftest's shared server); ``streaming`` serves too
  (every server method's kept sets and accounting: test_srt_persist_unit.py, on CPU).

One server serves the first two groups (module-scoped). Every server sleeps when idle
(``--sleep-on-idle``): on 2 cores an idle scheduler's busy loop would otherwise take a core from
the rest.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT

openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")

from sglang_pask.testing import running_server  # noqa: E402

MODEL = ROOT / "models" / "pask-tiny-fc"
# the lookup 0.33 policy (the shipped 0.33 one adds a learned residual)
POLICY = ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.33.json"
SCORER = ROOT / "policies" / "pask-tiny-fc.kvzap.safetensors"
BUDGET = 0.33
MAX_TOTAL = 4096
#: SGLang's idle leak check (scheduler.on_idle -> SchedulerInvariantChecker): strict means a leak
#: raises in the scheduler (the server dies) instead of logging a warning. On by default in
#: SGLang 0.5.23; set explicitly so the test does not depend on the default. (Its busy check,
#: SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY, off by default, counts one slot per allocated token
#: and so reports a false leak as soon as a drop frees unit slots: not used here.)
STRICT_IDLE = {"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1"}
#: every server here: an idle SGLang scheduler otherwise spins a whole core (on 2 cores, a second
#: live server halves everything else); asleep it polls its sockets for up to 1 s per idle pass,
#: and still runs the idle leak check on every pass
SLEEP = ["--sleep-on-idle"]
#: what SGLang logs (or raises) when that check fails (invariant_checker._report_leak,
#: _check_req_pool, the busy check's assertions)
#: per-request persistence (the whole prompt is the request's own; a policy turns the radix cache
#: off unless --pask-segment system; said here explicitly): the radix-cache path, which caches
#: compressed shared segments, has its own tests (test_srt_radix_server.py)
NO_RADIX = ["--disable-radix-cache"]
LEAK_TEXTS = ("memory leak detected", "Mem Leak Detected", "KV double free", "use-after-free")
#: what the plugin logs when its own accounting or drops fail
PASK_FAILURES = ("sglang_pask: compression failed", "sglang_pask: release record failed",
                 "sglang_pask: chunk compression failed", "sglang_pask: chunked admission failed")


def _tiny_requests(n: int, start: int = 0) -> list[dict]:
    """``n`` synthetic `tiny` requests (messages + tools) whose answer is one call (simple and
    multiple categories: 64 tokens hold it)."""
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.tiny.examples import request_body

    entries = [e for e in generate("eval", 3 * n, profile="tiny", start=start) if len(e.ground_truth) == 1]
    assert len(entries) >= n
    return [request_body(e)[0] for e in entries[:n]]


def _server_info(srv) -> dict:
    r = requests.get(f"{srv.url}/server_info", timeout=30)
    r.raise_for_status()
    return r.json()


def _state(srv) -> dict:
    return _server_info(srv)["internal_states"][0]


def _pask(srv) -> dict:
    return _state(srv)["pask"]


def _idle(pools: dict) -> bool:
    return (pools["full_available"] == pools["full_size"] and pools["kv_bytes_in_use"] == 0
            and pools["unit_available"] == pools["unit_sizes"])


def _wait_pools_idle(srv, timeout: float = 60.0) -> dict:
    """The pask state once every pool is back at its idle count (or the last one seen)."""
    deadline = time.monotonic() + timeout
    while True:
        state = _pask(srv)
        if _idle(state["pools"]) or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def _idle_check_seconds(srv) -> float:
    """Scheduler seconds spent in SGLang's sanity_check_cache stage (its idle leak check), from
    /metrics (the server runs with --enable-metrics)."""
    text = requests.get(f"{srv.url}/metrics", timeout=30).text
    vals = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("sglang:scheduler_stage_seconds_total{") and 'category="sanity_check_cache"' in line]
    assert vals, "no sanity_check_cache stage in /metrics"
    return sum(vals)


def _assert_call(resp, body: dict) -> bool:
    """The response makes a call of a tool of ``body``. Returns whether every call's arguments
    are a JSON object (not asserted: SGLang's qwen tag for non-strict tools lets the arguments be
    any JSON value, and a model under a small budget may write a string there)."""
    calls = resp.choices[0].message.tool_calls
    assert calls, f"no tool call: {resp.choices[0].message}"
    names = {t["function"]["name"] for t in body["tools"]}
    assert all(c.function.name in names for c in calls), calls

    def is_object(text):
        try:
            return isinstance(json.loads(text), dict)
        except ValueError:
            return False

    return all(is_object(c.function.arguments) for c in calls)


def _call(client, body: dict, **kw):
    return client.chat.completions.create(model="default", messages=body["messages"], tools=body["tools"],
                                          tool_choice="required", parallel_tool_calls=False, max_tokens=64,
                                          temperature=0, **kw)


def _assert_released_within_budget(rec: dict, pools: dict, budget: float) -> float:
    """A released request held b x Full KV (within 5%) plus, per unit, the newest token (written
    by the last decode step, after the last compression). Returns kv_bytes / full_kv_bytes."""
    per = pools["bytes_per_token_layer"]
    num_layers = sum(len(u) for u in pools["units"])
    assert rec["full_kv_bytes"] == rec["seq_len"] * num_layers * per, rec
    allowed = math.floor(budget * num_layers * rec["seq_len"]) * per
    assert 0.95 * allowed <= rec["kv_bytes"] <= 1.05 * budget * rec["full_kv_bytes"] + per * num_layers, rec
    return rec["kv_bytes"] / rec["full_kv_bytes"]


@pytest.fixture(scope="module")
def persist_server():
    args = ["--pask-policy", str(POLICY), "--pask-budget", str(BUDGET), "--pask-schedule", "continuous",
            "--max-total-tokens", str(MAX_TOTAL), "--enable-metrics", "--decode-log-interval", "1", *SLEEP,
            *NO_RADIX]
    with running_server(str(MODEL), args, env=STRICT_IDLE) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(persist_server):
    return openai.OpenAI(base_url=persist_server.base_url, api_key="none", timeout=180, max_retries=0)


# -- 1. memory is really freed ------------------------------------------------------------------

def test_released_requests_held_budget_fraction(persist_server, client):
    state = _pask(persist_server)
    assert state["method"]["name"] == "pask" and state["method"]["budget"] == BUDGET
    assert state["method"]["schedule"] == "continuous"
    # the policy was calibrated under prefill: --pask-schedule continuous is an override, said at
    # start-up and in /server_info with every field's source
    op = state["operating_point"]
    assert op["schedule"] == {"value": "continuous", "source": "flag"} and op["overridden"] == {"schedule": "prefill"}
    assert op["interval"]["source"] == "policy" and op["segment"] == {"value": "none", "source": "policy"}
    assert (f"sglang_pask: {POLICY.name} overrides the policy's operating point: --pask-schedule continuous "
            "(policy: prefill)") in persist_server.log()
    assert state["method"]["policy"]["name"] == json.loads(POLICY.read_text())["name"]
    # which compression operators run (csrc when `make install` built them), at start-up and here
    from sglang_pask import ops

    assert state["kernels"] == ops.implementation()
    assert f"sglang_pask: kernels: {ops.implementation()}" in persist_server.log()
    pools = state["pools"]
    assert pools["full_size"] == MAX_TOTAL
    assert pools["unit_sizes"] == [math.ceil(BUDGET * MAX_TOTAL)] * len(pools["units"])
    assert pools["units"] == [[0, 1], [2, 3]]  # one unit per policy group
    dropped0 = pools["dropped_total"]

    bodies = _tiny_requests(8, start=100)
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        responses = list(pool.map(lambda b: _call(client, b), bodies))
    usage = {}
    objects = 0
    for body, r in zip(bodies, responses):
        objects += _assert_call(r, body)
        usage[r.id] = r.usage

    state = _wait_pools_idle(persist_server)
    released = {rec["rid"]: rec for rec in state["released"]}
    ratios = []
    for rid, u in usage.items():
        rec = released.get(rid)  # SGLang's rid is the OpenAI response id
        assert rec is not None, f"no release record for {rid}"
        assert rec["finished"]
        # KV is written for the prompt and every output token but the last sampled one
        assert rec["seq_len"] == u.prompt_tokens + u.completion_tokens - 1, (rec, u)
        ratios.append(_assert_released_within_budget(rec, state["pools"], BUDGET))
    print(f"kv_bytes/full_kv_bytes of {len(ratios)} requests: {[round(x, 4) for x in ratios]} "
          f"({objects} with object arguments)")
    assert _idle(state["pools"]), state["pools"]
    assert state["pools"]["dropped_total"] > dropped0
    assert state["compression"]["errors"] == 0


# -- 2. no leaks, no crashes under load ---------------------------------------------------------

_TOOL = {"type": "function", "function": {"name": "get_playlist", "description": "Get a playlist record.",
         "parameters": {"type": "object", "properties": {"reference": {"type": "string"}},
                        "required": ["reference"]}}}
_MSGS = [{"role": "user", "content": "Get the playlist with code K5."}]
_BASE = {"model": "default", "max_tokens": 16, "temperature": 0}

#: name -> request body (a dict, sent as JSON) or raw bytes (sent as the body as it is)
MALFORMED = {
    "parameters-string": {**_BASE, "messages": _MSGS, "tool_choice": "required",
                          "tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]},
    "parameters-list": {**_BASE, "messages": _MSGS, "tool_choice": "required",
                        "tools": [{"type": "function", "function": {"name": "f", "parameters": [1, 2]}}]},
    "parameters-bad-type": {**_BASE, "messages": _MSGS, "tool_choice": "required",
                            "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                                "type": "object", "properties": {"a": {"type": "nope"}}}}}]},
    "tool-without-name": {**_BASE, "messages": _MSGS,
                          "tools": [{"type": "function", "function": {"parameters": {"type": "object"}}}]},
    "tools-not-a-list": {**_BASE, "messages": _MSGS, "tools": {"a": 1}, "tool_choice": "required"},
    "messages-missing": {**_BASE, "tools": [_TOOL]},
    "messages-empty": {**_BASE, "messages": [], "tools": [_TOOL]},
    "invalid-json": b'{"model": "default", "messages": [{"role": "user", "content": "x"}',
}


def test_special_token_in_a_tool_is_a_400(persist_server, client):
    """A tool named ``<|im_end|>`` would be read as that token (the tools block would end inside
    the tools JSON): SGLang accepts it, the plugin answers 400 with one line naming the field, and
    the server keeps serving."""
    body = {**_BASE, "messages": _MSGS, "tool_choice": "required",
            "tools": [{"type": "function", "function": {**_TOOL["function"], "name": "<|im_end|>"}}]}
    r = _post(persist_server, body)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    msg = r.json()["message"]
    assert msg == ("tools[0].function.name: contains the special token '<|im_end|>' of the tokenizer (it would "
                   "be read as that token, not as text)"), msg
    ok = _tiny_requests(1, start=900)[0]
    _assert_call(_call(client, ok), ok)


def test_admission_uses_slots_freed_by_compression(persist_server, client):
    """Compression frees unit slots for waiting requests: SGLang marks the running batch full when
    a waiting request does not fit and clears the mark only when a request leaves, so without the
    plugin clearing it after drops, the running batch would stay at about what fits uncompressed
    (``fit``) until requests finish. With it, about twice ``fit`` and more run at once."""
    unit_size = min(_pask(persist_server)["pools"]["unit_sizes"])
    bodies = _tiny_requests(16, start=600)
    mark = len(persist_server.log())

    def one(body):
        return client.chat.completions.create(model="default", messages=body["messages"], tools=body["tools"],
                                              max_tokens=48, temperature=0, extra_body={"ignore_eos": True})

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        resps = list(pool.map(one, bodies))
    longest = max(r.usage.prompt_tokens + r.usage.completion_tokens for r in resps)
    fit = unit_size // longest  # requests the unit pools hold uncompressed
    running = [int(x) for x in re.findall(r"Decode batch[^,]*, #running-req: (\d+)", persist_server.log()[mark:])]
    print(f"unit slots {unit_size}, longest request {longest} tokens: {fit} fit uncompressed; "
          f"most running at once {max(running)}")
    assert all(r.usage.completion_tokens == 48 for r in resps)
    assert 1 <= fit and max(running) >= 2 * fit + 1
    assert _idle(_wait_pools_idle(persist_server)["pools"])


def _post(srv, body) -> requests.Response:
    if isinstance(body, bytes):
        return requests.post(f"{srv.url}/v1/chat/completions", data=body, timeout=180,
                             headers={"Content-Type": "application/json"})
    return requests.post(f"{srv.url}/v1/chat/completions", json=body, timeout=180)


def test_load_no_leak_no_crash(persist_server, client):
    srv = persist_server
    pools = _pask(srv)["pools"]
    capacity = min(pools["full_size"], *pools["unit_sizes"])  # the scheduler's max_total_num_tokens
    assert _server_info(srv)["max_total_num_tokens"] == capacity
    # "word " is 2 tokens: over a unit pool (the capacity), under the context length (2048): served,
    # prefilled in chunks (srt/managers/chunked.py); over the context: refused by the tokenizer manager
    oversize = {**_BASE, "messages": [{"role": "user", "content": "word " * (capacity // 2 + 100)}]}
    oversize_tools = {**oversize, "tools": [_TOOL], "tool_choice": "required"}
    over_context = {**_BASE, "messages": [{"role": "user", "content": "word " * 1100}]}
    bodies = _tiny_requests(16, start=200)
    errors: list[str] = []
    results: dict[str, list] = {"call": [], "malformed": [], "aborted": [], "oversize": []}
    lock = threading.Lock()

    def good(i):
        r = _call(client, bodies[i])
        return "object" if _assert_call(r, bodies[i]) else "non-object arguments"

    def bad(name):
        r = _post(srv, MALFORMED[name])
        assert 400 <= r.status_code < 500, (name, r.status_code, r.text[:300])
        return r.status_code

    def aborted(i):
        stream = _call(client, bodies[i % len(bodies)], stream=True)
        first = next(iter(stream))
        stream.close()  # the client goes away after the first chunk
        assert first.choices is not None
        return "closed"

    def too_long(i):
        body = [oversize, oversize_tools, over_context][i % 3]
        r = _post(srv, body)
        if body is not over_context:  # longer than a unit pool holds whole: served in chunks
            assert r.status_code == 200, (r.status_code, r.text[:300])
            assert r.json()["usage"]["prompt_tokens"] > capacity
            return "served in chunks"
        assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
        msg = r.json()["message"]
        assert "is longer than the model's context length (2048 tokens)" in msg, msg
        return r.status_code

    jobs = ([("call", good, i) for i in range(16)] + [("malformed", bad, n) for n in MALFORMED] * 3
            + [("aborted", aborted, i) for i in range(8)] + [("oversize", too_long, i) for i in range(16)])
    jobs = [jobs[(7 * k) % len(jobs)] for k in range(len(jobs))]  # interleave the kinds
    assert len(jobs) == 64

    def run(job):
        kind, fn, arg = job
        try:
            out = fn(arg)
            with lock:
                results[kind].append(out)
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append(f"{kind} {arg}: {e!r}"[:500])

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=64) as pool:
        list(pool.map(run, jobs))
    elapsed = time.monotonic() - t0
    print(f"load: {len(jobs)} clients in {elapsed:.1f}s: " + ", ".join(
        f"{k} {len(v)} ({sorted(set(v), key=str)})" for k, v in results.items()))
    assert not errors, "\n".join(errors)
    assert [len(results[k]) for k in ("call", "malformed", "aborted", "oversize")] == [16, 24, 8, 16]

    state = _wait_pools_idle(srv)
    assert _idle(state["pools"]), state["pools"]
    assert state["compression"]["errors"] == 0, state["compression"]
    # SGLang's idle leak check runs on every idle scheduler pass: it must run after the load
    checked = _idle_check_seconds(srv)
    deadline = time.monotonic() + 30
    while _idle_check_seconds(srv) <= checked:
        assert time.monotonic() < deadline, "SGLang's idle leak check did not run"
        time.sleep(1)
    assert srv.proc.poll() is None, "server died"
    assert requests.get(f"{srv.url}/health", timeout=30).status_code == 200
    log = srv.log()
    for text in LEAK_TEXTS + PASK_FAILURES:
        assert text not in log, f"{text!r} in the server log"
    # and it still serves
    body = _tiny_requests(1, start=300)[0]
    _assert_call(_call(client, body), body)
    assert _idle(_wait_pools_idle(srv)["pools"])


# -- 3. bad flags fail fast ---------------------------------------------------------------------

BAD_FLAGS = {
    "expected_attention": (["--pask-method", "expected_attention"],
                           "error: --pask-method: 'expected_attention' needs attention statistics (expected_heads) "
                           "that the server does not record; the server runs: full, streaming, h2o, snapkv, "
                           "pyramidkv, adakv, kvzip, kvzap, pask, random (use `pask eval --backend hf` for "
                           "expected_attention)"),
    "unknown-method": (["--pask-method", "nosuch"], "error: --pask-method: unknown method 'nosuch' "
                       "(the server runs: full, streaming, h2o, snapkv, pyramidkv, adakv, kvzip, kvzap, pask, random)"),
    "budget-0": (["--pask-budget", "0"], "error: --pask-budget must be in (0, 1], got 0"),
    "budget-1.5": (["--pask-budget", "1.5"], "error: --pask-budget must be in (0, 1], got 1.5"),
    "schedule-weekly": (["--pask-schedule", "weekly"],
                        "error: --pask-schedule must be one of continuous, prefill, got 'weekly'"),
    "budget-without-policy": (["--pask-budget", "0.5"], "error: --pask-budget needs --pask-policy"),
    # a typo is named as a typo with or without a policy (not "needs --pask-policy": SnapKV runs without one)
    "unknown-method-without-policy": (["--pask-method", "kvzipp"], "error: --pask-method: unknown method 'kvzipp' "
                                      "(the server runs: full, streaming, h2o, snapkv, pyramidkv, adakv, kvzip, kvzap, "
                                      "pask, random)"),
    # the learned scorer's file: required by kvzap, refused for a method that reads none
    "kvzap-without-scorer": (["--pask-method", "kvzap"], "error: --pask-scorer: kvzap needs a scorer file: pass "
                             "--pask-scorer PATH (e.g. policies/pask-tiny-fc.kvzap.safetensors; `pask fit-scorer` "
                             "writes one)"),
    "scorer-for-snapkv": (["--pask-method", "snapkv", "--pask-scorer", str(SCORER)],
                          "error: --pask-scorer: method 'snapkv' reads no learned scorer (those that do: kvzap, pask)"),
    "scorer-for-pask": (["--pask-scorer", str(SCORER)],
                        "error: --pask-scorer: the policy's residual reads no statistic, not the learned scorer "
                        "(kvzap and a policy whose residual statistic is 'learned' read one)"),
    "scorer-without-policy": (["--pask-scorer", str(SCORER)], "error: --pask-scorer needs --pask-policy"),
    "segment-tools": (["--pask-segment", "tools"], "error: --pask-segment must be one of none, system, got 'tools'"),
    "segment-budget-without-segment": (["--pask-segment-budget", "0.2"],
                                       "error: --pask-segment-budget needs --pask-segment system"),
    "own-budget-without-segment": (["--pask-own-budget", "1"], "error: --pask-own-budget needs --pask-segment system"),
    "own-budget-2": (["--pask-segment", "system", "--pask-own-budget", "2"],
                     "error: --pask-own-budget must be in (0, 1], got 2"),
    "segment-prefill-whole": (["--pask-segment", "system", "--pask-segment-prefill", "whole"],
                              "error: --pask-segment-prefill must be one of compressed, full, got 'whole'"),
    "segment-prefill-without-segment": (["--pask-segment-prefill", "full"],
                                        "error: --pask-segment-prefill full needs --pask-segment system"),
}


def _bad_argv(name: str) -> list[str]:
    policy = [] if name.endswith("without-policy") else ["--pask-policy", str(POLICY)]
    return ["--model-path", str(MODEL), "--port", "1", *policy, *BAD_FLAGS[name][0]]


#: the cases that go through the real launcher (the others through SGLang's own argument parsing
#: in one interpreter: each launch is an interpreter importing SGLang, ~6 s alone on 2 cores)
LAUNCHED = ("expected_attention", "budget-without-policy")

_PARSE_ALL = """
import json, sys
from sglang.srt.plugins import load_plugins
from sglang.srt.server_args import prepare_server_args
load_plugins()
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    try:
        prepare_server_args(argv)
        out[name] = None
    except SystemExit as e:
        out[name] = str(e.code)
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def bad_flag_runs():
    """(launches: name -> (exit status, stderr, seconds), parsed: name -> SystemExit message)."""
    def launch(name):
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "sglang_pask.launch_server", *_bad_argv(name)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        return r.returncode, r.stderr, time.monotonic() - t0

    def parse_all():
        argvs = json.dumps({name: _bad_argv(name) for name in BAD_FLAGS})
        r = subprocess.run([sys.executable, "-c", _PARSE_ALL, argvs], cwd=ROOT, capture_output=True, text=True,
                           timeout=120, env={**os.environ, "SGLANG_PASK_POLICY": ""})
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.split("RESULT ", 1)[1])

    with ThreadPoolExecutor(max_workers=2) as pool:
        parsed = pool.submit(parse_all)
        launches = dict(zip(LAUNCHED, pool.map(launch, LAUNCHED)))
        return launches, parsed.result()


@pytest.mark.parametrize("name", list(BAD_FLAGS))
def test_bad_flag_refused_with_one_line(bad_flag_runs, name):
    _launches, parsed = bad_flag_runs
    assert parsed[name] == BAD_FLAGS[name][1]


@pytest.mark.parametrize("name", LAUNCHED)
def test_bad_flag_stops_the_launcher_fast(bad_flag_runs, name):
    rc, stderr, elapsed = bad_flag_runs[0][name]
    assert rc == 1, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == BAD_FLAGS[name][1]
    assert "Traceback" not in stderr
    assert elapsed < 60, f"took {elapsed:.1f}s: not fast"


# -- 4., 5.: stock (the shared server of conftest) and streaming ---------------------------------
# (``random`` served here too until issue 22; what it keeps per unit and that it releases every
# slot is now tested on CPU for every server method: test_srt_persist_unit.py)

#: StreamingLLM needs no policy: the server runs it on the model's shape alone (plugin.policy_free_stand_in)
STREAMING = ["--pask-method", "streaming", "--pask-budget", "0.5", "--max-total-tokens", str(MAX_TOTAL), *NO_RADIX]


@pytest.fixture(scope="module")
def side_servers(fc_server):
    """name -> a live server: ``stock`` (conftest's shared server of the model, no policy) and
    ``streaming`` (:data:`STREAMING`)."""
    with running_server(str(MODEL), [*STREAMING, "--skip-server-warmup", *SLEEP], env=STRICT_IDLE) as srv:
        yield {"stock": fc_server, "streaming": srv}


def test_no_policy_is_stock(side_servers):
    srv = side_servers["stock"]
    info = _server_info(srv)
    assert "pask" not in info["internal_states"][0]
    assert info["max_total_num_tokens"] == 65536  # the whole --max-total-tokens pool, as stock SGLang sizes it
    assert "sglang_pask: KV pools" not in srv.log() and "sglang_pask: persistence" not in srv.log()


@pytest.fixture(scope="module")
def no_whitespace_bias_fc() -> dict[str, int]:
    """logit_bias banning whitespace-only tokens of the trained model's tokenizer (as conftest's
    no_whitespace_bias for the random model): under random drops the model otherwise tends to
    fill the tool call's JSON with whitespace until max_tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    ids = [i for i in range(len(tok)) if (t := tok.decode([i])) and not t.strip()]
    assert ids
    return {str(i): -100 for i in ids}


@pytest.mark.parametrize("name, budget", [("streaming", 0.5)])
def test_other_methods_serve(side_servers, no_whitespace_bias_fc, name, budget):
    srv = side_servers[name]
    cli = openai.OpenAI(base_url=srv.base_url, api_key="none", timeout=180, max_retries=0)
    body = _tiny_requests(1, start=400)[0]
    r = _call(cli, body, logit_bias=no_whitespace_bias_fc)
    _assert_call(r, body)
    state = _wait_pools_idle(srv)
    assert state["method"]["name"] == name and state["method"]["budget"] == budget
    assert state["pools"]["units"] == [[0], [1], [2], [3]]  # per-layer methods: one unit per layer
    assert state["pools"]["unit_sizes"] == [math.ceil(budget * MAX_TOTAL)] * len(state["pools"]["units"])
    rec = next(x for x in state["released"] if x["rid"] == r.id)
    ratio = _assert_released_within_budget(rec, state["pools"], budget)
    print(f"{name}: kv_bytes/full_kv_bytes {ratio:.4f} (seq_len {rec['seq_len']}), "
          f"calls {[(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls]}")
    assert _idle(state["pools"]) and state["compression"]["errors"] == 0
    assert state["pools"]["dropped_total"] > 0
    assert not re.search("|".join(map(re.escape, LEAK_TEXTS + PASK_FAILURES)), srv.log())
    assert f"--pask-method {name} without --pask-policy: the model's shape only" in srv.log()


def test_eval_records_what_the_server_runs(side_servers):
    """``pask eval --backend openai`` records the method a PASK server reports (not a label), the
    model directory it serves, and refuses a label that contradicts the server."""
    from sglang_pask.eval.openai_backend import OpenAIBackend
    from sglang_pask.eval.records import model_record

    srv = side_servers["streaming"]
    got = OpenAIBackend(srv.base_url).describe()
    assert got["method"]["name"] == "streaming" and got["budget"] == 0.5
    assert got["schedule"] == got["method"]["schedule"] and got["method_options"] == {}
    assert got["model"] == model_record(str(MODEL)) and got["policy"] is None
    assert OpenAIBackend(srv.base_url, labels={"method": "streaming", "budget": 0.5}).describe()["budget"] == 0.5
    with pytest.raises(ValueError, match=r"--budget 0.33 contradicts the server .* streaming at budget 0.5"):
        OpenAIBackend(srv.base_url, labels={"budget": 0.33}).describe()
    stock = OpenAIBackend(side_servers["stock"].base_url, labels={"method": "full"}).describe()
    assert "method" not in stock and stock["model"] == model_record(str(MODEL))
