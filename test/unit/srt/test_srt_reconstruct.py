"""KVzip's scoring pass in the server (srt/attention/reconstruct.py), on the real pools of the CPU rig: the
no-write attention of a reconstruction chunk against a masked softmax written out here -- which
context positions its queries see (held, ``< sinks`` or in ``[a, b)``, each KV head's own set),
causal over its own tokens, the output and the recorded score (the most any query of a KV head's
group pays a position) -- and that a pass writes nothing to the pools. (The whole forward through
SGLang's model, against the reference runner: test_server_attention_parity.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("sglang")

import torch  # noqa: E402
from sglang.srt.mem_cache.memory_pool import KVWriteLoc  # noqa: E402
from sglang_pask.srt.attention import head_masks, reconstruct  # noqa: E402
from sglang_pask.srt.state import state  # noqa: E402
from srt_kit import Rig, reset_counters, serving_config  # noqa: E402

KV_HEADS, GROUP, D = 2, 2, 4


@pytest.fixture(autouse=True)
def _clean():
    reset_counters()
    head_masks.masks().clear()
    yield
    head_masks.masks().clear()


def _rig_with_context(T: int, seed: int):
    config = serving_config("kvzip", 0.33, schedule="prefill")
    rig = Rig(config, kv_heads=KV_HEADS)
    req = rig.request(list(range(100, 100 + T)))
    ids = rig.prefill(req)
    gen = torch.Generator().manual_seed(seed)
    for layer in range(config.num_layers):  # random K/V at every layer's slots of the context
        rig.pool.set_kv_buffer(SimpleNamespace(layer_id=layer), KVWriteLoc(ids, None),
                               torch.randn(T, KV_HEADS, D, generator=gen), torch.randn(T, KV_HEADS, D, generator=gen))
    return config, rig, req


def _reference(q, k, v, ctx_k, ctx_v, ctx_pos, a, b, sinks, head_allow):
    """Per query head, one masked softmax over (context, own): ``q [n, Hq, D]``, ``k``/``v``
    ``[n, Hkv, D]``, ``ctx_k``/``ctx_v`` ``[T, Hkv, D]`` at ``ctx_pos``; ``head_allow [Hkv, T]``."""
    n, T = q.shape[0], ctx_k.shape[0]
    out = torch.empty(n, KV_HEADS * GROUP, D)
    top = torch.zeros(KV_HEADS, T)
    for h in range(KV_HEADS * GROUP):
        kv = h // GROUP
        keys = torch.cat([ctx_k[:, kv], k[:, kv]])  # [T + n, D]
        vals = torch.cat([ctx_v[:, kv], v[:, kv]])
        seen = ((ctx_pos < sinks) | ((ctx_pos >= a) & (ctx_pos < b))) & head_allow[kv]
        for i in range(n):
            mask = torch.cat([seen, torch.arange(n) <= i])
            scores = (keys @ q[i, h]) * 0.5
            p = torch.softmax(scores.masked_fill(~mask, float("-inf")), 0)
            out[i, h] = p @ vals
            top[kv] = torch.maximum(top[kv], p[:T])
    return out, top


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("a,b,sinks", [(0, 40, 0), (16, 32, 4), (32, 40, 4)])
def test_a_pass_attends_as_a_masked_softmax_and_records_the_top_attention(a, b, sinks, per_head):
    T, n = 40, 9
    config, rig, req = _rig_with_context(T, seed=a + b)
    row = int(req.kv.req_pool_idx)
    head_allow = torch.ones(KV_HEADS, T, dtype=torch.bool)
    if per_head:  # head 1 no longer reads every third position (a per-head selection)
        mask = np.ones((KV_HEADS, T), dtype=bool)
        mask[1, ::3] = False
        for u in range(len(config.units)):
            head_masks.store(row, u, np.arange(T), mask)
        head_allow = torch.from_numpy(mask)
    backend = SimpleNamespace(req_to_token_pool=rig.req_to_token_pool, pool=rig.pool)
    scoring = reconstruct.Pass(row, a, b, sinks, T, meta=reconstruct._visible(backend, row, T, a, b, sinks))
    before = [rig.pool.get_key_buffer(layer).clone() for layer in range(config.num_layers)]
    gen = torch.Generator().manual_seed(7)
    ids = rig.row(req)
    for layer_id in range(config.num_layers):
        layer = SimpleNamespace(layer_id=layer_id, tp_q_head_num=KV_HEADS * GROUP, tp_k_head_num=KV_HEADS,
                                v_head_dim=D, scaling=0.5)
        q = torch.randn(n, KV_HEADS * GROUP, D, generator=gen)
        k, v = torch.randn(n, KV_HEADS, D, generator=gen), torch.randn(n, KV_HEADS, D, generator=gen)
        got = scoring.attend(q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1), layer, rig.pool)
        slots = rig.pool.translate(rig.pool.unit_of[layer_id], ids)
        ctx_k = rig.pool.get_key_buffer(layer_id)[slots]
        ctx_v = rig.pool.get_value_buffer(layer_id)[slots]
        want, top = _reference(q, k, v, ctx_k, ctx_v, torch.arange(T), a, b, sinks, head_allow)
        torch.testing.assert_close(got, want.reshape(n, -1), rtol=1e-5, atol=1e-6)
        pos = scoring.meta[rig.pool.unit_of[layer_id]][1]
        seen = (pos < sinks) | ((pos >= a) & (pos < b))
        assert bool(seen.all()) and len(pos) == int(((torch.arange(T) < sinks) | (torch.arange(T) >= a)
                                                    & (torch.arange(T) < b)).sum())
        torch.testing.assert_close(scoring.top[layer_id], top[:, pos], rtol=1e-5, atol=1e-6)
        if per_head:
            hidden = scoring.top[layer_id][1][pos % 3 == 0]
            assert hidden.numel() and bool((hidden == 0).all())  # a position head 1 no longer reads
    for layer in range(config.num_layers):  # nothing written
        assert torch.equal(rig.pool.get_key_buffer(layer), before[layer])
    rig.release(req)
    rig.assert_idle()


def test_kvzip_heads_needs_the_torch_backend(monkeypatch):
    monkeypatch.setattr(state(), "reconstruct_backend", None)
    config, rig, req = _rig_with_context(8, seed=0)
    with pytest.raises(RuntimeError, match="torch attention backend"):
        reconstruct.kvzip_heads(req, 8, rig.held(req), config.method, backend=None)
    rig.release(req)
