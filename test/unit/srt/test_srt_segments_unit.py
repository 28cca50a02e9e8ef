"""Shared segments (srt/managers/segments.py) on CPU at tiny sizes, the radix cache off: real ``Req`` objects
with a segment end in their tags, SGLang's ``ReqToTokenPool`` and the PASK pools (srt_kit.py).

* once a request's KV is written to its segment end (``compressed``) or its whole prompt
  (``full``), :func:`ensure_segment` cuts the segment to exactly the positions
  :func:`~sglang_pask.methods.segment.segment_kept` keeps, per unit, and nothing of the own span;
  it is idempotent;
* every request sharing the segment keeps the same positions, whatever its own tokens;
* ``compress_request`` in segment mode drops own positions only, within the own allocation;
* releasing leaves the pools idle."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sglang")
from sglang_pask.methods.segment import own_slots, segment_kept  # noqa: E402
from sglang_pask.srt.managers.persist import compress_request  # noqa: E402
from sglang_pask.srt.managers.request_tags import tags_of  # noqa: E402
from sglang_pask.srt.managers.segments import ensure_segment, segment_kept_units, segment_ready  # noqa: E402
from sglang_pask.srt.state import state  # noqa: E402
from srt_kit import (  # noqa: E402
    Rig,
    assert_twins_then_idle,
    compress_step,
    prompt_classes,
    reset_counters,
    serving_config,
)

S = 24  # segment end
OWN = 16  # own prompt tokens after it


@pytest.fixture(autouse=True)
def _counters():
    reset_counters()
    yield
    reset_counters()


def _segment_ids_and_classes():
    return list(range(500, 500 + S)), prompt_classes(S, seed=3)


def _request(rig: Rig, own_seed: int, rid: str):
    seg_ids, seg_classes = _segment_ids_and_classes()
    own_ids = [int(x) for x in np.random.default_rng(own_seed).integers(1000, 2000, OWN)]
    return rig.request(seg_ids + own_ids, seg_classes + prompt_classes(OWN, seed=own_seed), segment_end=S, rid=rid)


def _expected(config) -> list[np.ndarray]:
    _, seg_classes = _segment_ids_and_classes()
    kept = segment_kept(config.method, config.num_layers, config.groups, seg_classes,
                        segment_budget=config.rule.segment_budget)
    return [kept[layers[0]] for layers in config.units]


def _segment_held(rig: Rig, req) -> list[np.ndarray]:
    return [h[h < S] for h in rig.held(req)]


@pytest.mark.parametrize("method, segment_budget", [("pask", None), ("pask", 0.2), ("streaming", None),
                                                    ("random", None)])
def test_cut_keeps_the_rules_positions_for_every_sharer(method, segment_budget):
    config = serving_config(method, 0.33, segment="system", segment_budget=segment_budget)
    rig = Rig(config)
    expect = _expected(config)
    reqs = [_request(rig, seed, f"r{seed}") for seed in range(3)]
    for req in reqs:
        assert tags_of(req).segment_end == S
        rig.prefill(req, upto=S - 1)  # not yet written to the segment end: nothing happens
        assert not segment_ready(req, config, req.extend_end)
        assert ensure_segment(req, rig.req_to_token, rig.alloc, config) == 0
        rig.prefill(req, upto=S)  # the chunk that ends at S (the admission hook forces it)
        assert segment_ready(req, config, req.extend_end)
        freed = ensure_segment(req, rig.req_to_token, rig.alloc, config)
        assert freed == sum(S - len(k) for k in expect)
        assert ensure_segment(req, rig.req_to_token, rig.alloc, config) == 0  # idempotent
        got = _segment_held(rig, req)
        for u, (g, e) in enumerate(zip(got, expect)):
            assert np.array_equal(g, e), f"{req.rid} unit {u}: segment holds {g.tolist()}, the rule keeps {e.tolist()}"
        rig.prefill(req)  # the rest of the prompt: every own token held
        assert all(np.array_equal(h[h >= S], np.arange(S, S + OWN)) for h in rig.held(req))
    assert state().segments["segments_compressed"] == 3
    assert state().segments["segment_slots_dropped"] == 3 * sum(S - len(k) for k in expect)
    assert sum(len(k) * len(u) for k, u in zip(expect, config.units)) == tags_of(reqs[0]).segment_slots
    assert all(np.array_equal(a, b) for a, b in zip(segment_kept_units(reqs[0], config),
                                                    segment_kept_units(reqs[2], config)))
    for req in reqs:
        rig.release(req)
    rig.assert_idle()


def test_full_prefill_cuts_after_the_whole_prompt():
    config = serving_config("pask", 0.33, segment="system", own_budget=0.5, segment_prefill="full")
    rig = Rig(config)
    req = _request(rig, 0, "full")
    rig.prefill(req, upto=S)
    assert not segment_ready(req, config, req.extend_end)
    assert ensure_segment(req, rig.req_to_token, rig.alloc, config) == 0
    assert all(len(h) == S for h in rig.held(req))
    rig.prefill(req)
    assert segment_ready(req, config, req.extend_end)
    assert ensure_segment(req, rig.req_to_token, rig.alloc, config) > 0
    for g, e in zip(_segment_held(rig, req), _expected(config)):
        assert np.array_equal(g, e)
    rig.release(req)
    rig.assert_idle()


@pytest.mark.parametrize("own_budget", [None, 0.5, 1.0])
def test_compression_drops_own_positions_only(own_budget):
    """After the cut, decode-time compression leaves the segment's positions as they are and
    keeps the own span within its allocation (:func:`own_slots`); own budget 1 drops nothing."""
    config = serving_config("pask", 0.33, schedule="continuous", interval=1, segment="system",
                            own_budget=own_budget)
    rig = Rig(config)
    req = _request(rig, 1, "own")
    rig.prefill(req, upto=S)
    ensure_segment(req, rig.req_to_token, rig.alloc, config)
    seg_before = _segment_held(rig, req)
    rig.prefill(req)
    dropped = 0
    for _ in range(6):
        seq_len = int(req.kv.kv_committed_len)
        before = rig.held(req)
        dropped += compress_request(req, rig.req_to_token, rig.alloc, config)
        after = rig.held(req)
        assert all(np.array_equal(a, b) for a, b in zip(_segment_held(rig, req), seg_before))
        own = [h[h >= S] for h in after]
        assert all(np.isin(o, b).all() and o[-1] == seq_len - 1 for o, b in zip(own, before))
        allowed = own_slots(config.method, config.num_layers, seq_len, S, tags_of(req).segment_slots, own_budget)
        assert sum(len(o) * len(u) for o, u in zip(own, config.units)) <= max(allowed, config.num_layers)
        rig.decode(req)
    assert (dropped == 0) == (own_budget == 1.0)
    rig.release(req)
    rig.assert_idle()


@pytest.mark.parametrize("method, own_budget", [("pask", None), ("pask", 0.5), ("streaming", None), ("random", 1.0)])
def test_batched_segment_compression_equals_request_by_request(method, own_budget, monkeypatch):
    """``compress_batch`` in segment mode (own spans as padded rows: one selection, one free per
    unit) and ``compress_request`` per request, on twin rigs fed the same requests and steps: three
    sharing the segment and joining at different steps, one without a segment (the ordinary rule
    in the same batch). After every step each request holds the same positions per unit, the same
    slots are free, the same counters count, the batched path never falls back; releasing leaves
    both idle."""

    config = serving_config(method, 0.33, schedule="continuous", interval=1, segment="system", own_budget=own_budget)
    rigs = [Rig(config, full_size=512), Rig(config, full_size=512)]
    reqs, counters = [], []
    for k, rig in enumerate(rigs):
        reset_counters()
        rs = [_request(rig, seed, f"s{seed}") for seed in range(3)]
        rs.append(rig.request([int(x) for x in range(700, 731)], rid="plain"))
        reqs.append(rs)
        running = []
        for step in range(7):
            if step < len(rs):
                req = rs[step]
                if tags_of(req).segment_end:
                    rig.prefill(req, upto=S)
                    ensure_segment(req, rig.req_to_token, rig.alloc, config)
                rig.prefill(req)
                running.append(req)
            compress_step(rig, running, config, k == 0, monkeypatch)
            for req in running:
                rig.decode(req, token=90 + step)
        counters.append(dict(state().compression))
    assert counters[0] == counters[1] and counters[0]["errors"] == 0 and counters[0]["compressions"] > 0
    assert_twins_then_idle(rigs, reqs)
