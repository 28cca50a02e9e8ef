"""Drops at SGLang's eviction point (srt/managers/persist.py) on CPU at tiny sizes: real ``Req`` objects with
the plugin's tags, SGLang's ``ReqToTokenPool`` and the PASK pools (tests/srt_kit.py), no server.

For every method the server runs, under both schedules: at each compression ``compress_request``
keeps, per unit, exactly the set the method selects over what the unit held (the unit's first
layer's), frees every other request-owned slot, never a position below
``cache_protected_len``; decode steps between compressions keep what they add; releasing the
request leaves every allocator idle (no leaked or twice-freed slot, every mapping cleared)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("sglang")
from sglang_pask.methods.base import CacheView  # noqa: E402
from sglang_pask.srt.managers.persist import (  # noqa: E402
    PROTECTED_TAIL,
    compress_batch,
    compress_request,
    record_release,
)
from sglang_pask.srt.managers.request_tags import tags_of  # noqa: E402
from sglang_pask.srt.serving import _needs_attention, server_methods  # noqa: E402
from sglang_pask.srt.state import state  # noqa: E402
from srt_kit import Rig, assert_twins_then_idle, compress_step, reset_counters, serving_config  # noqa: E402

PROMPT = 40


@pytest.fixture(autouse=True)
def _counters():
    reset_counters()
    yield
    reset_counters()


def _expected_kept(rig: Rig, req) -> list[np.ndarray]:
    """Per unit, what the method keeps of what the request holds now (the unit's first layer)."""
    config = rig.config
    held = rig.held(req)
    retained = [None] * config.num_layers
    for h, layers in zip(held, config.units):
        for layer in layers:
            retained[layer] = h
    seq_len = int(req.kv.kv_committed_len)
    view = CacheView(num_layers=config.num_layers, groups=config.groups, seq_len=seq_len,
                     classes=tags_of(req).classes(req, seq_len), retained=retained,
                     protected_tail=PROTECTED_TAIL, prompt_len=len(req.origin_input_ids))
    kept = config.method.select(view).kept
    return [np.asarray(kept[layers[0]]) for layers in config.units]


def _slots(rig: Rig, req) -> int:
    return sum(len(h) * len(u) for h, u in zip(rig.held(req), rig.config.units))


@pytest.mark.parametrize("schedule", ["prefill", "continuous"])
@pytest.mark.parametrize("method", [m for m in server_methods() if _needs_attention(m) is None])
def test_compress_keeps_the_methods_set_and_frees_the_rest(method, schedule):
    config = serving_config(method, None if method == "full" else 0.33, schedule=schedule, interval=2)
    rig = Rig(config)
    req = rig.request(list(range(100, 100 + PROMPT)))
    rig.prefill(req)
    compressions = 0
    for step in range(9):
        seq_len = int(req.kv.kv_committed_len)
        before = rig.held(req)
        due = config.method.due(step, _slots(rig, req), seq_len, config.num_layers)
        expect = _expected_kept(rig, req) if due else before
        available = rig.alloc.unit_available_sizes()
        freed = compress_request(req, rig.req_to_token, rig.alloc, config)
        after = rig.held(req)
        for u, (e, a) in enumerate(zip(expect, after)):
            assert np.array_equal(a, e), f"step {step} unit {u}: held {a.tolist()}, the method keeps {e.tolist()}"
        dropped = [len(b) - len(a) for b, a in zip(before, after)]
        assert freed == sum(dropped)
        assert rig.alloc.unit_available_sizes() == [x + d for x, d in zip(available, dropped)]
        assert rig.alloc.full_available_size() == rig.alloc.size - seq_len  # full ids stay live
        if due:
            compressions += 1
            budget = int(np.floor(config.budget * config.num_layers * seq_len + 1e-9))
            assert _slots(rig, req) <= max(budget, PROTECTED_TAIL * config.num_layers) or method == "pask"
        rig.decode(req)
    assert state().compression["compressions"] == compressions
    assert state().compression["requests_compressed"] == (1 if compressions else 0)
    assert state().compression["errors"] == 0
    if method == "full":
        assert compressions == 0 and rig.alloc.dropped_total == 0
    else:
        assert compressions == (1 if schedule == "prefill" else 5) and rig.alloc.dropped_total > 0
    rig.release(req)
    rig.assert_idle()


def test_tree_owned_prefix_is_never_dropped():
    """Positions below ``cache_protected_len`` belong to the tree: the method's choice there is
    not applied (only request-owned positions are dropped)."""
    config = serving_config("streaming", 0.25)
    rig = Rig(config)
    req = rig.request(list(range(PROMPT)))
    rig.prefill(req)
    req.kv.cache_protected_len = 16
    expect = _expected_kept(rig, req)
    compress_request(req, rig.req_to_token, rig.alloc, config)
    for e, h in zip(expect, rig.held(req)):
        want = np.union1d(np.arange(16), e)
        assert np.array_equal(h, want), (h.tolist(), want.tolist())


def test_not_due_touches_nothing():
    config = serving_config("pask", 0.33, schedule="prefill")
    rig = Rig(config)
    req = rig.request(list(range(PROMPT)))
    rig.prefill(req)
    req.decode_batch_idx = 3  # prefill schedule: only step 0 checks
    assert compress_request(req, rig.req_to_token, rig.alloc, config) == 0
    assert all(len(h) == PROMPT for h in rig.held(req))
    req.decode_batch_idx = 0
    req.kv.kv_committed_len = 1  # only the protected tail
    assert compress_request(req, rig.req_to_token, rig.alloc, config) == 0
    assert state().compression["compressions"] == 0


def test_two_requests_compress_independently_and_balance():
    """Two requests in the same pools: each keeps its own method set; releasing one leaves the
    other's slots exactly as they were; releasing both leaves the pools idle."""
    config = serving_config("random", 0.33)
    rig = Rig(config)
    a, b = rig.request(list(range(30)), rid="a"), rig.request(list(range(50, 86)), rid="b")
    rig.prefill(a)
    rig.prefill(b)
    for req in (a, b):
        expect = _expected_kept(rig, req)
        compress_request(req, rig.req_to_token, rig.alloc, config)
        assert all(np.array_equal(h, e) for h, e in zip(rig.held(req), expect))
    kept_b = rig.held(b)
    rig.release(a)
    assert all(np.array_equal(x, y) for x, y in zip(rig.held(b), kept_b))
    assert rig.alloc.unit_slots_in_use() == [len(h) for h in kept_b]
    rig.release(b)
    rig.assert_idle()


def test_compress_batch_clears_batch_is_full_and_counts_errors():
    """A real ScheduleBatch: drops clear ``batch_is_full`` (so the freed slots admit waiting
    requests); a request whose compression fails is counted and keeps Full KV, the others are
    compressed."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    config = serving_config("streaming", 0.33)
    rig = Rig(config)
    good, bad = rig.request(list(range(30)), rid="good"), rig.request(list(range(40, 70)), rid="bad")
    rig.prefill(good)
    rig.prefill(bad)
    tags_of(bad).prompt = tags_of(bad).prompt[:5]  # classes of 5 positions for 30: this request raises
    batch = ScheduleBatch(reqs=[bad, good], req_to_token_pool=rig.req_to_token_pool,
                          token_to_kv_pool_allocator=rig.alloc, batch_is_full=True, device="cpu")
    compress_batch(batch, rig.alloc, config)
    assert state().compression["errors"] == 1 and state().compression["compressions"] == 1
    assert batch.batch_is_full is False
    assert all(len(h) == 30 for h in rig.held(bad))  # kept Full KV
    assert all(len(h) < 30 for h in rig.held(good))
    # nothing freed: the flag stays as SGLang set it
    batch.batch_is_full = True
    batch.reqs = [good]
    compress_batch(batch, rig.alloc, config)
    assert batch.batch_is_full is True


def test_record_release_and_kept_log(tmp_path):
    config = serving_config("pask", 0.33, kept_log=str(tmp_path))
    rig = Rig(config)
    req = rig.request(list(range(PROMPT)), rid="rec")
    rig.prefill(req)
    compress_request(req, rig.req_to_token, rig.alloc, config)
    rig.decode(req)
    held = [len(h) for h in rig.held(req)]
    record_release(req, rig.req_to_token, rig.alloc)
    rec = state().released[-1]
    per = rig.pool.bytes_per_token_layer()
    assert rec["rid"] == "rec" and rec["seq_len"] == PROMPT + 1 and rec["unit_slots"] == held
    assert rec["kv_bytes"] == sum(n * len(u) for n, u in zip(held, config.units)) * per
    assert rec["full_kv_bytes"] == (PROMPT + 1) * config.num_layers * per and not rec["finished"]
    logged = [json.loads(x) for f in tmp_path.glob("kept-*.jsonl") for x in f.read_text().splitlines()]
    assert len(logged) == 1 and logged[0]["rid"] == "rec" and logged[0]["step"] == 0
    assert {int(u): len(k) for u, k in logged[0]["kept"].items()} == {0: held[0] - 1, 1: held[1] - 1}
    rig.release(req)
    rig.assert_idle()


@pytest.mark.parametrize("schedule", ["prefill", "continuous"])
@pytest.mark.parametrize("method", [m for m in server_methods() if _needs_attention(m) is None])
def test_batched_compression_equals_request_by_request(method, schedule, monkeypatch):
    """``compress_batch`` (one padded selection and one free per unit for all due requests) and
    ``compress_request`` per request, on twin rigs fed the same requests and steps (three
    requests of different lengths, one with a tree-owned prefix, joining at different steps):
    after every step each request holds the same positions per unit, the same slots are free,
    the same counters count; releasing everything leaves both idle."""
    config = serving_config(method, None if method == "full" else 0.33, schedule=schedule, interval=2)
    rigs = [Rig(config, full_size=512), Rig(config, full_size=512)]
    prompts = [(list(range(100, 140)), "a"), (list(range(200, 223)), "b"), (list(range(300, 357)), "c")]
    reqs = [[rig.request(ids, classes=None, rid=rid) for ids, rid in prompts] for rig in rigs]
    counters = []
    for k, (rig, rs) in enumerate(zip(rigs, reqs)):
        reset_counters()
        running = []
        for step in range(8):
            if step < len(rs):  # a request joins at prefill end, the others decode
                rig.prefill(rs[step])
                if rs[step].rid == "b":
                    rs[step].kv.cache_protected_len = 7
                running.append(rs[step])
            compress_step(rig, running, config, k == 0, monkeypatch)  # the batched path must not fall back
            for req in running:
                rig.decode(req, token=90 + step)
        counters.append(dict(state().compression))
    assert counters[0] == counters[1] and counters[0]["errors"] == 0
    assert_twins_then_idle(rigs, reqs)
