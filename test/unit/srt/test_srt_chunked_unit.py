"""The chunked prefill rule on the scheduler side (srt/managers/chunked.py) on CPU at tiny sizes, no server:
real ``Req`` objects, SGLang's ``ReqToTokenPool`` and the PASK pools (srt_kit.py).

* the rule of a process: chunks of ``--pask-prefill-chunk`` (default a quarter of a unit pool)
  above the longest prompt a unit pool holds whole; off in segment mode, at budget 1, and for a
  method reading attention statistics (refused when asked for by the flag);
* a long prompt written chunk by chunk and compressed at every chunk end (and only there) holds,
  per unit, at most what :func:`~sglang_pask.methods.chunks.chunked_need` planned -- exactly that
  peak, and after the prefill-end compression exactly the planned ``after``; the kept sets are
  the method's own selection over what was held (the runner's order, ``test_chunked_prefill_server.py``
  checks them against it); releasing leaves the pools idle;
* a short prompt is untouched by the rule."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sglang")
from sglang_pask.methods.chunks import ChunkRule  # noqa: E402
from sglang_pask.srt.managers import chunked  # noqa: E402
from sglang_pask.srt.managers.persist import compress_request  # noqa: E402
from sglang_pask.srt.state import state  # noqa: E402
from srt_kit import Rig, reset_counters, serving_config  # noqa: E402


@pytest.fixture(autouse=True)
def _state():
    reset_counters()
    yield
    reset_counters()


def test_the_rule_of_a_process():
    assert chunked.configure(serving_config("pask", 0.33), capacity=400, context_len=2048) == ChunkRule(100, 393, 398)
    assert chunked.configure(serving_config("pask", 0.33, prefill_chunk=64), 400, 300) == ChunkRule(64, 293, 398)
    assert chunked.configure(serving_config("pask", 0.33, prefill_chunk=0), 400, 2048) is None
    assert chunked.configure(serving_config("pask", 0.33, segment="system"), 400, 2048) is None
    assert chunked.configure(serving_config("full", None), 400, 2048) is None
    assert chunked.configure(serving_config("snapkv", 0.33), 400, 2048) is None  # automatic: off
    assert chunked.rule() is None
    for kw, text in [({"prefill_chunk": 64, "segment": "system"}, "needs --pask-segment none"),
                     ({"prefill_chunk": -1}, "integer >= 0")]:
        with pytest.raises(ValueError, match=text):
            serving_config("pask", 0.33, **kw)
    with pytest.raises(ValueError, match="--pask-prefill-chunk 64: snapkv reads attention statistics"):
        serving_config("snapkv", 0.33, prefill_chunk=64)


def test_rule_ends():
    r = ChunkRule(size=10, above=25)
    assert r.ends(25) == [] and r.ends(26) == [10, 20] and r.ends(30) == [10, 20]
    assert r.next_end(31, 0, 10) == 20 and r.next_end(31, 0, 30) is None
    assert ChunkRule(0, 0).ends(100) == [] and ChunkRule(10, 0).ends(7) == []
    assert ChunkRule(10, 0).ends(35, start=4) == [14, 24, 34]
    assert ChunkRule(10, 0).budget_at(20, 0.33) == 0.33  # no room: the method's budget
    room = ChunkRule(10, 0, room=30)
    assert room.budget_at(10, 0.33) == 1.0 and room.budget_at(40, 0.33) == 0.5 and room.budget_at(100, 0.33) == 0.33
    for bad in [{"size": -1}, {"size": True}, {"above": 1.5}, {"size": 10, "room": 10}]:
        with pytest.raises(ValueError, match="chunked prefill"):
            ChunkRule(**bad)


@pytest.mark.parametrize("method", ["pask", "streaming", "random"])
def test_compressed_at_chunk_ends_within_the_planned_peak(method):
    config = serving_config(method, 0.33, prefill_chunk=24)
    rule = chunked.configure(config, capacity=40, context_len=256)
    rig = Rig(config, full_size=256)
    P = 100
    req = rig.request(list(range(100, 100 + P)), rid="long")
    assert chunked.applies(req) and rule.ends(P) == [24, 48, 72, 96]
    plan = chunked.plan(req, config)
    peak, written = 0, 0
    for e in rule.ends(P) + [P]:
        if e - 5 > written:  # an engine may write in other pieces: nothing happens mid-chunk
            rig.prefill(req, upto=e - 5)
            assert chunked.compress_chunk(req, rig.req_to_token, rig.alloc, config) == 0
        rig.prefill(req, upto=e)
        held = rig.held(req)
        peak = max(peak, max(len(h) for h in held))
        assert all(np.array_equal(h[h >= written], np.arange(written, e)) for h in held)  # the chunk, whole
        chunked.compress_chunk(req, rig.req_to_token, rig.alloc, config)
        written = e
    assert peak == plan.peak < P
    compress_request(req, rig.req_to_token, rig.alloc, config)  # prefill end (decode step 0)
    assert max(len(h) for h in rig.held(req)) == plan.after
    assert 0 < state().chunked["chunk_compressions"] <= 4 and state().chunked["chunk_slots_dropped"] > 0
    rig.release(req)
    rig.assert_idle()


def test_short_prompts_are_untouched():
    config = serving_config("pask", 0.33, prefill_chunk=24)
    chunked.configure(config, capacity=40, context_len=256)
    rig = Rig(config, full_size=256)
    req = rig.request(list(range(100, 133)), rid="short")  # 33 tokens: at the rule's `above`
    assert not chunked.applies(req)
    rig.prefill(req, upto=24)
    assert chunked.compress_chunk(req, rig.req_to_token, rig.alloc, config) == 0
    rig.prefill(req)
    assert all(len(h) == 33 for h in rig.held(req))
    rig.release(req)
    rig.assert_idle()
