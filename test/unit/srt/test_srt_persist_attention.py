"""The server's compression for methods that read attention statistics (H2O, SnapKV and PyramidKV
per layer), on the real pools, allocator and ``Req`` of the CPU rig: the recorder
(srt/attention/window_stats.py) is fed each forward's queries over the keys each layer holds, as the torch
backend feeds it, and at every due step the request keeps exactly what the method selects from a
view carrying those statistics; under ``prefill`` the recorder stops after step 0, and releasing
the request forgets its row. (The statistics themselves: test_srt_window_stats.py; the same
against the reference runner, through a live server: test_server_attention_parity.py.)"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sglang")

import torch  # noqa: E402
from sglang_pask.methods import CacheView  # noqa: E402
from sglang_pask.srt.attention import head_masks, window_stats  # noqa: E402
from sglang_pask.srt.managers.persist import PROTECTED_TAIL, compress_batch, compress_request  # noqa: E402
from sglang_pask.srt.managers.request_tags import tags_of  # noqa: E402
from sglang_pask.srt.serving import _needs_attention, server_methods  # noqa: E402
from sglang_pask.srt.state import state  # noqa: E402
from srt_kit import Rig, reset_counters, serving_config  # noqa: E402

#: the methods whose statistics the recorder keeps (KVzip's scores: test_srt_reconstruct.py)
ATTENTION_METHODS = [m for m in server_methods() if _needs_attention(m) in window_stats.KINDS]


@pytest.fixture(autouse=True)
def _clean():
    reset_counters()
    yield
    reset_counters()


def _retained(rig, req):
    out = [None] * rig.config.num_layers
    for h, layers in zip(rig.held(req), rig.config.units):
        for layer in layers:
            out[layer] = h
    return out


def _feed(rig, req, first: int, end: int, gen: torch.Generator, kv_heads: int = 1) -> None:
    """One forward of queries ``first ..< end`` through the recorder, as the torch backend hands it
    over: per layer, 2 query heads per KV head over the keys the layer's unit holds (``< end``)."""
    rec, row = state().recorder, int(req.kv.req_pool_idx)
    rec.begin(row, first, end)
    for layer, held in enumerate(_retained(rig, req)):
        k_pos = torch.from_numpy(held[held < end])
        q = torch.randn(2 * kv_heads, end - first, 4, generator=gen)
        rec.record(row, layer, q, torch.randn(kv_heads, len(k_pos), 4, generator=gen), torch.arange(first, end),
                   k_pos, 0.5)


def test_the_server_runs_the_methods_whose_statistics_it_records():
    assert ATTENTION_METHODS == ["h2o", "snapkv", "pyramidkv", "adakv"]
    assert "kvzip" in server_methods() and "expected_attention" not in server_methods()
    # KVzap reads the learned scorer's predictions, captured in the forwards (test_srt_learned_scores.py)
    assert _needs_attention("kvzap") == "learned_heads" and "kvzap" in server_methods()


@pytest.mark.parametrize("schedule", ["prefill", "continuous"])
@pytest.mark.parametrize("method", ATTENTION_METHODS)
def test_compress_keeps_what_the_method_selects_from_the_recorded_statistics(method, schedule):
    config = serving_config(method, 0.33, schedule=schedule, interval=2)
    rec = window_stats.setup(config.method, kv_heads=1)
    assert rec.kind == config.method.needs_attention
    gen = torch.Generator().manual_seed(0)
    rig = Rig(config)
    req = rig.request(list(range(100, 140)))
    rig.prefill(req)
    _feed(rig, req, 0, 40, gen)
    compressions = 0
    for step in range(7):
        seq_len = int(req.kv.kv_committed_len)
        retained = _retained(rig, req)
        slots = sum(len(h) * len(u) for h, u in zip(rig.held(req), config.units))
        due = config.method.due(step, slots, seq_len, config.num_layers)
        if due:
            view = CacheView(num_layers=config.num_layers, groups=config.groups, seq_len=seq_len,
                             classes=tags_of(req).classes(req, seq_len), retained=retained,
                             protected_tail=PROTECTED_TAIL, prompt_len=40,
                             attention=rec.stats(int(req.kv.req_pool_idx), retained))
            kept = config.method.select(view).kept
            expect = [np.asarray(kept[layers[0]]) for layers in config.units]
        else:
            expect = rig.held(req)
        compress_request(req, rig.req_to_token, rig.alloc, config)
        for u, (e, a) in enumerate(zip(expect, rig.held(req))):
            assert np.array_equal(a, e), f"step {step} unit {u}"
        compressions += due
        rig.decode(req)
        _feed(rig, req, seq_len, seq_len + 1, gen)
    row = int(req.kv.req_pool_idx)
    assert compressions == (1 if schedule == "prefill" else 4)
    assert rec.rows[row].active == (schedule == "continuous")  # prefill: nothing reads them after step 0
    rig.release(req)
    window_stats.forget(row)
    assert row not in rec.rows
    rig.assert_idle()


def test_a_batch_is_compressed_request_by_request_with_statistics():
    """The batched path has no statistics to give a method: a batch of an attention method goes
    request by request (same kept sets as compress_request, no error)."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    config = serving_config("snapkv", 0.33, schedule="prefill")
    window_stats.setup(config.method)
    gen = torch.Generator().manual_seed(1)
    rig = Rig(config, full_size=512)
    reqs = [rig.request(list(range(b, b + n)), rid=str(b)) for b, n in ((100, 40), (200, 57))]
    for req in reqs:
        rig.prefill(req)
        _feed(rig, req, 0, len(req.origin_input_ids), gen)
    batch = ScheduleBatch(reqs=reqs, req_to_token_pool=rig.req_to_token_pool,
                          token_to_kv_pool_allocator=rig.alloc, device="cpu")
    compress_batch(batch, rig.alloc, config)

    assert state().compression["errors"] == 0 and state().compression["requests_compressed"] == 2
    for req in reqs:
        rig.release(req)
    rig.assert_idle()


@pytest.mark.parametrize("method", ["snapkv", "adakv"])
def test_a_per_head_selection_leaves_each_kv_heads_set_for_attention(method):
    """2 KV heads: the unit keeps the union of the heads' sets, and :mod:`head_masks` says which
    of them each head reads -- the selection's ``head_mask`` -- until the row is forgotten."""
    config = serving_config(method, 0.33, schedule="prefill")
    rec = window_stats.setup(config.method, kv_heads=2)
    gen = torch.Generator().manual_seed(2)
    rig = Rig(config, kv_heads=2)
    req = rig.request(list(range(60, 210)))  # 150 tokens: 0.33 keeps more than SnapKV's 32-token window
    rig.prefill(req)
    _feed(rig, req, 0, 150, gen, kv_heads=2)
    row, retained = int(req.kv.req_pool_idx), _retained(rig, req)
    view = CacheView(num_layers=config.num_layers, groups=config.groups, seq_len=150,
                     classes=tags_of(req).classes(req, 150), retained=retained, protected_tail=PROTECTED_TAIL,
                     prompt_len=150, attention=rec.stats(row, retained))
    sel = config.method.select(view)
    assert compress_request(req, rig.req_to_token, rig.alloc, config) > 0
    hidden = 0
    for u, (layers, held) in enumerate(zip(config.units, rig.held(req))):
        assert np.array_equal(held, sel.kept[layers[0]])  # the union
        allow = head_masks.allow(row, u, torch.from_numpy(held))
        want = np.asarray(sel.head_mask[layers[0]], dtype=bool)
        got = np.ones_like(want) if allow is None else allow.numpy()
        assert np.array_equal(got, want), f"unit {u}"
        hidden += int((~want).sum())
    assert hidden > 0  # the heads did keep different sets
    rig.release(req)
    head_masks.forget(row)
    assert not head_masks.masked([row])
    rig.assert_idle()
