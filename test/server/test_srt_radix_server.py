"""The PASK radix cache in a live server (issue 13: ``--pask-policy P --pask-segment system`` with
the radix cache on, so the tree caches each request's shared segment -- its system/tools
message -- compressed once):

* memory: 32 requests sharing one tools block of >= 300 tokens hold, read from the pools, one
  compressed copy of the block (in the tree) plus each request's own tokens at the budget --
  <= 1.05 x (b x prefix + sum of b x own) -- where a Full KV server (same binary, ``--pask-method
  full``) holds the prefix once plus every own token; with ``--pask-own-budget 0.5
  --pask-segment-prefill full`` the own tokens are held at 0.5 instead -- <= 1.05 x (b x prefix +
  sum of 0.5 x own) -- and every request recomputes the segment, yet the tree holds one
  compressed copy (each request's own copy is freed as a duplicate); with ``--pask-own-budget 1
  --pask-segment-prefill full`` (the mode that keeps accuracy, README) one compressed copy plus
  every own token -- <= 1.05 x (b x prefix + sum of own), above the issue's bound, and printed
  against it;
* a request that hits the cached segment reads exactly the slots a miss computed: its kept
  positions at every compression and its tokens equal the miss's (the same request again) and
  the reference runner's with ``segment="system"``; the same under ``--pask-own-budget 0.5
  --pask-segment-prefill full`` (runner ``own_budget=0.5, segment_prefill="full"``);
* accounting: after load with prefix hits, evictions (a KV memory far smaller than the distinct
  tools blocks) and aborted streams, every unit slot and full id is either free or in the tree
  (counters back to idle), SGLang's strict idle leak check never fired, the server still serves;
* (a node stamped under another policy, method or budget is never a match, the tree's
  publish/cut/share/evict bookkeeping: test_srt_radix_unit.py, on CPU without a server).

The request data are train and calib entries (building and testing; never eval).
"""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT

openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")

from sglang_pask.policy.operating_point import SegmentRule  # noqa: E402
from sglang_pask.testing import running_server  # noqa: E402

MODEL = ROOT / "models" / "pask-tiny-fc"
# the lookup 0.33 policy (the shipped 0.33 one adds a learned residual)
POLICY = ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.33.json"
BUDGET = 0.33
OWN_BUDGET = 0.5
STRICT_IDLE = {"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1"}
SLEEP = ["--sleep-on-idle"]
LEAK_TEXTS = ("memory leak detected", "Mem Leak Detected", "KV double free", "use-after-free",
              "sglang_pask: compression failed", "sglang_pask: segment compression failed")


def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MODEL))


def _segment_end(body: dict) -> int:
    from sglang_pask.rendering import render_chat

    return render_chat(_tokenizer(), {**body, "tool_choice": "required"}).segment_end


def shared_block(n: int, min_segment: int = 300) -> tuple[list[dict], int]:
    """``n`` train-split tiny requests with one tools block: the union of the tools of consecutive
    single-call entries, until its system message is ``>= min_segment`` tokens; request ``i`` asks
    the query of one of those entries, numbered (so no two prompts are equal). Returns (bodies,
    segment end)."""
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.tiny.examples import request_body

    entries = [e for e in generate("train", 100, profile="tiny") if len(e.ground_truth) == 1]
    tools, names, used = [], set(), []
    for e in entries:
        body = request_body(e)[0]
        new = [t for t in body["tools"] if t["function"]["name"] not in names]
        tools += new
        names |= {t["function"]["name"] for t in new}
        used.append(body)
        if _segment_end({"messages": body["messages"], "tools": tools}) >= min_segment:
            break
    bodies = []
    for i in range(n):
        messages = [dict(m) for m in used[i % len(used)]["messages"]]
        messages[-1]["content"] = f"{messages[-1]['content']} (request {i})"
        bodies.append({"messages": messages, "tools": tools})
    return bodies, _segment_end(bodies[0])


def _pask(srv) -> dict:
    r = requests.get(f"{srv.url}/server_info", timeout=30)
    r.raise_for_status()
    return r.json()["internal_states"][0]["pask"]


def _call(client, body: dict, **kw):
    return client.chat.completions.create(model="default", messages=body["messages"], tools=body["tools"],
                                          tool_choice="required", max_tokens=48, temperature=0, **kw)


def _client(srv):
    return openai.OpenAI(base_url=srv.base_url, api_key="none", timeout=300, max_retries=0)


def _balanced(state: dict) -> bool:
    """Idle accounting: every full id and unit slot is free or held by the tree."""
    pools, tree = state["pools"], state["tree"]
    return (pools["full_available"] + tree["tokens"] == pools["full_size"]
            and all(a + t == n for a, t, n in zip(pools["unit_available"], tree["unit_slots"], pools["unit_sizes"]))
            and pools["kv_bytes_in_use"] == tree["kv_bytes"] and tree["protected_tokens"] == 0)


def _wait_balanced(srv, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = _pask(srv)
        if _balanced(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def _start_together(specs: dict[str, list[str]], env=None):
    managers = {k: running_server(str(MODEL), [*a, "--skip-server-warmup", *SLEEP], env=env) for k, a in specs.items()}
    with ThreadPoolExecutor(max_workers=len(managers)) as pool:
        futures = {k: pool.submit(cm.__enter__) for k, cm in managers.items()}
        started = [cm for k, cm in managers.items() if futures[k].exception() is None]
    return managers, futures, started


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """``pask``: PASK@0.33 with the radix cache on and the kept/tag logs; ``pask_own``: the same
    with ``--pask-own-budget 0.5 --pask-segment-prefill full``; ``pask_kept``: own budget 1, full
    prefill; ``full``: the same binary with ``--pask-method full``.
    Started together, stopped by PID, also on failure."""
    logs = tmp_path_factory.mktemp("radix-logs")
    # continuous: the bounds below count every output token at the budget (the policy says prefill)
    common = ["--pask-policy", str(POLICY), "--pask-segment", "system", "--pask-schedule", "continuous",
              "--max-total-tokens", "16384"]
    specs = {"pask": [*common, "--pask-budget", str(BUDGET), "--pask-kept-log", str(logs / "kept"),
                      "--pask-tag-log", str(logs / "tags")],
             "pask_own": [*common, "--pask-budget", str(BUDGET), "--pask-own-budget", str(OWN_BUDGET),
                          "--pask-segment-prefill", "full", "--enable-cache-report",
                          "--pask-kept-log", str(logs / "kept-own"), "--pask-tag-log", str(logs / "tags-own")],
             "pask_kept": [*common, "--pask-budget", str(BUDGET), "--pask-own-budget", "1",
                           "--pask-segment-prefill", "full"],
             "full": [*common, "--pask-method", "full"]}
    managers, futures, started = _start_together(specs, env=STRICT_IDLE)
    try:
        out = {k: f.result() for k, f in futures.items()}
        out["logs"] = logs
        yield out
    finally:
        for cm in started:
            cm.__exit__(None, None, None)


def _send_shared(srv, bodies) -> list:
    client = _client(srv)
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda b: _call(client, b), bodies))


def test_shared_tools_block_memory(servers):
    bodies, seg = shared_block(32)
    assert seg >= 300
    held = {}
    for name in ("pask", "pask_own", "pask_kept", "full"):
        srv = servers[name]
        out = _send_shared(srv, bodies)
        assert all(r.choices[0].message.tool_calls for r in out)
        state = _wait_balanced(srv)
        assert _balanced(state), state
        pools, tree = state["pools"], state["tree"]
        assert tree["nodes"] == 1 and tree["tokens"] == seg, tree  # one cached segment, whole
        released = state["released"][-32:]
        assert len(released) == 32 and all(r["finished"] for r in released)
        per, layers = pools["bytes_per_token_layer"], sum(len(u) for u in pools["units"])
        # each request's row maps the tree's segment ids: what it held of its own is the rest
        own_bytes = [r["kv_bytes"] - tree["kv_bytes"] for r in released]
        own_tokens = [r["seq_len"] - seg for r in released]
        assert all(b > 0 for b in own_bytes) and all(t > 0 for t in own_tokens)
        total = tree["kv_bytes"] + sum(own_bytes)
        full_equiv = (seg + sum(own_tokens)) * layers * per
        held[name] = (total, full_equiv, tree, state["segments"], pools, (seg, sum(own_tokens)))
    total, full_equiv, tree, counters, pools, _ = held["pask"]
    per, units = pools["bytes_per_token_layer"], pools["units"]
    layers = sum(len(u) for u in units)
    index_bytes = pools["index_bytes"]
    full_total = held["full"][0]
    print(f"32 requests, one tools block of {seg} tokens: PASK@{BUDGET} held {total} KV bytes "
          f"(segment {tree['kv_bytes']} in the tree, unit slots {tree['unit_slots']}), Full KV {full_total} "
          f"(ratio {total / full_total:.3f}); bound 1.05 x b x (prefix + own) = {1.05 * BUDGET * full_equiv:.0f}; "
          f"indices {index_bytes} bytes; segments {counters}")
    assert full_total == held["full"][1]  # Full KV: the prefix once, every own token (its own run's)
    newest = 32 * layers * per  # each request's last token, written after its last compression
    assert total <= 1.05 * BUDGET * full_equiv + newest
    # the segment itself: at most floor(b x L x S) token-layer slots, what the rule keeps
    seg_slots = sum(n * len(u) for n, u in zip(tree["unit_slots"], units))
    assert 0.95 * math.floor(BUDGET * layers * seg) <= seg_slots <= math.floor(BUDGET * layers * seg)
    assert counters["segment_chunks_forced"] == 1 and counters["segments_compressed"] == 1, counters
    # the accurate mode (full prefill): the tree keeps the block whole, once (the first request's
    # insert; the others hit it or had their copies freed as duplicates), nothing chunked at the
    # segment end, nothing cut; each request reads its view of it (segment_views)
    own_total, _, own_tree, own_counters, _, (prefix, own) = held["pask_own"]
    bound = 1.05 * (prefix + OWN_BUDGET * own) * layers * per + newest
    print(f"--pask-own-budget {OWN_BUDGET} --pask-segment-prefill full: held {own_total} KV bytes (segment "
          f"{own_tree['kv_bytes']}, whole); bound 1.05 x (prefix + {OWN_BUDGET} x own) = {bound - newest:.0f} + "
          f"newest {newest}; segments {own_counters}")
    assert own_tree["unit_slots"] == [seg] * len(units) and own_tree["kv_bytes"] == seg * layers * per
    assert own_counters["segment_chunks_forced"] == 0 and own_counters["segments_compressed"] == 0, own_counters
    assert own_counters["views"] >= 32, own_counters
    assert own_total <= bound
    # own tokens kept too: the block once, every own token -- Full KV's bytes
    kept_total, _, kept_tree, kept_counters, _, (prefix, own) = held["pask_kept"]
    print(f"--pask-own-budget 1 --pask-segment-prefill full: held {kept_total} KV bytes (segment "
          f"{kept_tree['kv_bytes']}; Full KV {full_total}, ratio {kept_total / full_total:.3f})")
    assert kept_tree["unit_slots"] == [seg] * len(units) and kept_counters["segments_compressed"] == 0
    assert own_total < kept_total <= full_total


def test_hit_reads_what_a_miss_computed(servers):
    """Three requests on a new tools block, one after another: the first misses (its segment is
    prefilled alone and compressed), the others hit; the last is the first again. Kept positions
    at every compression and tokens equal the reference runner's with segment='system'."""
    from sglang_pask.eval.parity import _lines, compare, runner_trace, server_traces
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.hf import Runner
    from sglang_pask.tiny.examples import request_body

    srv = servers["pask"]
    before = _pask(srv)["segments"]
    entries = generate("calib", 2, profile="tiny", group=2)
    bodies = [{**request_body(e)[0], "tool_choice": "required"} for e in entries]
    bodies.append(bodies[0])
    client = _client(srv)
    outs = [_call(client, {k: b[k] for k in ("messages", "tools")}) for b in bodies]
    time.sleep(1.0)  # the output record is written at release
    after = _pask(srv)["segments"]
    assert after["segment_chunks_forced"] - before["segment_chunks_forced"] == 1  # one miss
    assert [c.function for c in outs[0].choices[0].message.tool_calls] == \
        [c.function for c in outs[2].choices[0].message.tool_calls]
    kept_dir, tag_dir = str(servers["logs"] / "kept"), str(servers["logs"] / "tags")
    # the miss and the hit of the same request: the same kept positions at every compression
    prompts = [r for r in _lines(os.path.join(tag_dir, "prompt-*.jsonl"))]
    first_rids = [r["rid"] for r in prompts if r["token_ids"] == prompts[-3]["token_ids"]][-2:]
    kept = _lines(os.path.join(kept_dir, "kept-*.jsonl"))
    miss, hit = ([(k["step"], k["kept"]) for k in kept if k["rid"] == rid] for rid in first_rids)
    assert miss and miss == hit
    served = server_traces(kept_dir, tag_dir)  # the last of a prompt: A's hit, B's hit
    runner = Runner(str(MODEL), method="pask", budget=BUDGET, policy=str(POLICY), grammar="sglang",
                    method_options={"schedule": "continuous"}, segment_rule=SegmentRule("system"))
    units = runner.groups
    for body in bodies[:2]:
        body = {**body, "chat_template_kwargs": {"enable_thinking": False}}
        ref = runner_trace(runner, body, units, 48)
        got = served.get(tuple(ref["prompt_ids"]))
        assert got is not None, "the server's record of the request is missing"
        row = compare(got, ref)
        assert row["kept_equal"] and row["tokens_equal"], row


def test_own_budget_matches_the_runner(servers):
    """The accurate mode (``--pask-own-budget 0.5 --pask-segment-prefill full``): two requests
    sharing a new tools block, each sent twice. The first misses; every later one hits the
    tree's whole block (cached tokens >= the block, no recompute) and answers with the same tool
    calls as its first pass; kept positions at every compression (what the request reads: its
    view of the block, its own tokens) and tokens equal the runner's with ``own_budget=0.5,
    segment_prefill="full"``."""
    from sglang_pask.eval.parity import compare, runner_trace, server_traces
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.hf import Runner
    from sglang_pask.tiny.examples import request_body

    srv = servers["pask_own"]
    entries = generate("calib", 2, profile="tiny", group=2)
    bodies = [{**request_body(e)[0], "tool_choice": "required"} for e in entries]
    client = _client(srv)
    first = [_call(client, {k: b[k] for k in ("messages", "tools")}) for b in bodies]
    again = [_call(client, {k: b[k] for k in ("messages", "tools")}) for b in bodies]
    seg = _segment_end({k: bodies[0][k] for k in ("messages", "tools")})
    assert first[0].usage.prompt_tokens_details.cached_tokens == 0  # a new block: the miss
    for a, b in zip(first, again):
        assert b.usage.prompt_tokens_details.cached_tokens == seg, b.usage  # the whole block, no own token
        assert [c.function for c in a.choices[0].message.tool_calls] == \
            [c.function for c in b.choices[0].message.tool_calls]
    time.sleep(1.0)  # the output record is written at release
    served = server_traces(str(servers["logs"] / "kept-own"), str(servers["logs"] / "tags-own"))
    runner = Runner(str(MODEL), method="pask", budget=BUDGET, policy=str(POLICY), grammar="sglang",
                    method_options={"schedule": "continuous"},
                    segment_rule=SegmentRule("system", own_budget=OWN_BUDGET, segment_prefill="full"))
    compared = 0
    for body in bodies:
        body = {**body, "chat_template_kwargs": {"enable_thinking": False}}
        ref = runner_trace(runner, body, runner.groups, 48)
        got = served.get(tuple(ref["prompt_ids"]))
        assert got is not None, "the server's record of the request is missing"
        row = compare(got, ref)
        assert row["kept_equal"] and row["tokens_equal"], row
        compared += row["compressions"]
    assert compared > 0  # the own span was compressed (at 0.5), not merely kept
    print(f"own budget {OWN_BUDGET}: {compared} compressions compared, all equal")


@pytest.mark.parametrize("mode", ["compressed", "accurate"])
def test_accounting_after_hits_evictions_and_aborts(mode):
    """A KV memory of 1536 full ids (507 slots per unit at 0.33) against 15 distinct tools blocks,
    each asked twice, and 6 streams closed after their first chunk, all at once: the tree must
    evict (the compressed mode) or demote cold whole blocks first (the accurate mode:
    ``--pask-own-budget 1 --pask-segment-prefill full``); afterwards every full id and unit slot
    is free or in the tree."""
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.tiny.examples import request_body

    accurate = ["--pask-own-budget", "1", "--pask-segment-prefill", "full"] if mode == "accurate" else []
    args = ["--pask-policy", str(POLICY), "--pask-segment", "system", "--pask-budget", str(BUDGET),
            "--max-total-tokens", "1536", *accurate,
            "--skip-server-warmup", *SLEEP]
    bodies = [request_body(e)[0] for e in generate("calib", 30, profile="tiny", group=2)]
    with running_server(str(MODEL), args, env=STRICT_IDLE) as srv:
        client = _client(srv)
        errors, lock = [], threading.Lock()

        def good(b):
            try:  # parallel calls may not fit in 48 tokens: a "length" finish is an answer too
                choice = _call(client, b).choices[0]
                assert choice.message.tool_calls or choice.finish_reason == "length", choice
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(e)[:300])

        def aborted(b):
            try:
                stream = _call(client, b, stream=True)
                next(iter(stream))
                stream.close()
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e)[:300])

        jobs = [(good, b) for b in bodies] + [(aborted, b) for b in bodies[::5]]
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda j: j[0](j[1]), jobs))
        assert not errors, errors
        state = _wait_balanced(srv)
        seg = state["segments"]
        print(f"after {len(jobs)} requests on 15 tools blocks: tree {state['tree']}, pools unit_available "
              f"{state['pools']['unit_available']} of {state['pools']['unit_sizes']}, segments {seg}")
        assert _balanced(state), state
        if mode == "compressed":  # evictions happened: more segments computed than the tree holds, some twice
            assert state["tree"]["nodes"] < 15 and seg["segments_compressed"] > state["tree"]["nodes"], state
        else:  # cold whole blocks were demoted before LRU evicted any
            tiers = state["tree"]["tiers"]
            assert state["tree"]["demoted"] > 0 and seg["views"] > 0, state["tree"]
            assert tiers["whole"]["blocks"] + tiers["compressed"]["blocks"] == state["tree"]["nodes"], tiers
        assert state["compression"]["errors"] == 0
        log = srv.log()
        for text in LEAK_TEXTS:
            assert text not in log, f"{text!r} in the server log"
        assert srv.proc.poll() is None
        choice = _call(client, bodies[0]).choices[0]  # still serves (an answer, as good() counts one)
        assert choice.message.tool_calls or choice.finish_reason == "length", choice


def test_demoted_hit_matches_the_runner(tmp_path):
    """Both kinds of hit in the accurate mode (full prefill), against the runner: a
    request sent again while its block is whole reads the block's view (runner
    ``segment_prefill="full"``); after other blocks push the block out of KV memory it is demoted,
    not evicted, and the same request sent a third time is a hit on the compressed block (cached
    tokens > 0, its rid in ``demoted_rids``) that prefills its own tokens against it -- the runner's
    ``compressed`` segment mode. Kept positions at every compression (the block's positions the
    request reads plus its own, compressed at 0.5 so that the kept log holds a record; at own budget 1
    nothing is compressed per request and both engines log none) and tokens equal, both times."""
    from sglang_pask.eval.parity import compare, runner_trace, server_traces
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.hf import Runner
    from sglang_pask.tiny.examples import request_body

    kept, tags = tmp_path / "kept", tmp_path / "tags"
    args = ["--pask-policy", str(POLICY), "--pask-segment", "system", "--pask-budget", str(BUDGET),
            "--pask-own-budget", str(OWN_BUDGET), "--pask-segment-prefill", "full", "--max-total-tokens", "1536",
            "--enable-cache-report", "--pask-kept-log", str(kept), "--pask-tag-log", str(tags),
            "--skip-server-warmup", *SLEEP]
    bodies = [{**request_body(e)[0], "tool_choice": "required"} for e in generate("calib", 40, profile="tiny", group=2)]
    # entry 6: one whose tokens differ between the two runner modes (entries 0-4 answer alike
    # either way), so the test tells the two kinds of hit apart; then one entry of every other block
    first, others = bodies[6], [b for i, b in enumerate(bodies) if i % 2 == 0 and i != 6]
    send = {k: first[k] for k in ("messages", "tools")}
    seg = _segment_end(send)
    rules = {"whole": SegmentRule("system", own_budget=OWN_BUDGET, segment_prefill="full"),
             "demoted": SegmentRule("system", own_budget=OWN_BUDGET)}
    with running_server(str(MODEL), args, env=STRICT_IDLE) as srv:
        client = _client(srv)
        _call(client, send)
        again = _call(client, send)
        assert again.usage.prompt_tokens_details.cached_tokens == seg, again.usage  # the whole block
        time.sleep(1.0)  # the output record is written at release
        traces = {"whole": server_traces(str(kept), str(tags))}
        sent = 0
        for body in others:  # until the first block, the least recently used, is demoted
            if _pask(srv)["tree"]["demoted"] > 0:
                break
            _call(client, {k: body[k] for k in ("messages", "tools")})
            sent += 1
        state = _pask(srv)
        assert state["tree"]["demoted"] > 0, state["tree"]
        third = _call(client, send)
        assert 0 < third.usage.prompt_tokens_details.cached_tokens <= seg, third.usage
        time.sleep(1.0)
        traces["demoted"] = server_traces(str(kept), str(tags))
        demoted_rids = _pask(srv)["demoted_rids"]
        assert _balanced(_wait_balanced(srv)) and srv.proc.poll() is None
    print(f"{sent} other blocks sent before the demotion; tree {state['tree']}")
    body = {**first, "chat_template_kwargs": {"enable_thinking": False}}
    refs = {}
    for kind, rule in rules.items():
        runner = Runner(str(MODEL), method="pask", budget=BUDGET, policy=str(POLICY), grammar="sglang",
                        segment_rule=rule)
        ref = refs[kind] = runner_trace(runner, body, runner.groups, 48)
        got = traces[kind].get(tuple(ref["prompt_ids"]))
        assert got is not None, "the server's record of the request is missing"
        assert (got["rid"] in demoted_rids) == (kind == "demoted"), (kind, got["rid"], demoted_rids)
        row = compare(got, ref)
        assert row["compressions"] > 0 and row["kept_equal"] and row["tokens_equal"], (kind, row)
        print(f"{kind} hit: {row['compressions']} compression(s), {len(got['output_ids'])} tokens: the runner's")
    assert refs["whole"]["output_ids"] != refs["demoted"]["output_ids"]  # the two modes answer differently
