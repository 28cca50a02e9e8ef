"""The PASK FlashInfer backend on CPU: its per-unit index streams (:func:`build_unit_indices`) against
the torch reference :func:`held_slots`, its LSE merge, that the module imports without flashinfer,
and its planning/dispatch glue run against a torch stand-in for flashinfer (the real kernels need a
GPU and are not exercised here)."""

from __future__ import annotations

import importlib
import math
import sys
import types
from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch
from sglang_pask.srt.attention.flashinfer_backend import build_unit_indices, merge_lse_states
from sglang_pask.srt.attention.torch_native_backend import sparse_attention
from sglang_pask.srt.mem_cache.segment_views import held_slots

MOD = "sglang_pask.srt.attention.flashinfer_backend"


# -- build_unit_indices vs held_slots --------------------------------------------------------------
def _random_case(seed: int, num_units: int = 3, full_size: int = 96, width: int = 40):
    """A mapping with random drops and a request table (rows in a shuffled order). Request 0 has
    nothing dropped, request 1 holds only its last token (in every unit), request 2 is empty,
    and the rest are random; ids past each seq_len are live (must be ignored)."""
    g = torch.Generator().manual_seed(seed)
    lens = [int(x) for x in torch.randint(1, width + 1, (5,), generator=g)]
    lens[2] = 0
    rows = torch.randperm(8, generator=g)[: len(lens)]
    req_to_token = torch.zeros((8, width + 4), dtype=torch.int32)
    perm = torch.randperm(full_size, generator=g) + 1  # distinct full ids in 1..full_size
    used, spans = 0, []
    for r, n in zip(rows.tolist(), lens):
        n_alloc = n + 3  # three live ids past seq_len
        ids = perm[used:used + n_alloc]
        used += n_alloc
        req_to_token[r, :n_alloc] = ids.to(torch.int32)
        spans.append(ids[:n])
    live = perm[:used]
    mapping = torch.zeros((num_units, full_size + 2), dtype=torch.int64)
    for u in range(num_units):
        mapping[u, live] = torch.randperm(used, generator=g) + 1  # unit slots (injective, > 0)
        drop = torch.rand(used, generator=g) < 0.5
        mapping[u, live[drop]] = 0
        mapping[u, spans[0]] = torch.arange(1, lens[0] + 1) + 2 * full_size  # request 0: all held
        if lens[1] > 1:
            mapping[u, spans[1][:-1]] = 0  # request 1: only the last token
        mapping[u, spans[1][-1]] = 3 * full_size + u + 1
    return mapping, req_to_token, rows, torch.tensor(lens, dtype=torch.int64)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("host_sum", [False, True])
def test_build_unit_indices_matches_held_slots(seed, host_sum):
    mapping, req_to_token, rows, lens = _random_case(seed)
    out = build_unit_indices(mapping, req_to_token, rows, lens,
                             seq_lens_sum=int(lens.sum()) if host_sum else None)
    assert len(out) == mapping.shape[0]
    for u, (kv_indptr, kv_indices) in enumerate(out):
        assert kv_indptr.dtype == torch.int32 and kv_indices.dtype == torch.int32
        assert kv_indptr.shape == (len(lens) + 1,) and int(kv_indptr[0]) == 0
        assert kv_indices.shape == (int(kv_indptr[-1]),)
        assert bool((kv_indices > 0).all())
        for i, (r, n) in enumerate(zip(rows.tolist(), lens.tolist())):
            want, _ = held_slots(mapping[u], req_to_token[r, :n])
            got = kv_indices[kv_indptr[i]:kv_indptr[i + 1]]
            assert torch.equal(got.long(), want), (u, i)
        counts = (kv_indptr[1:] - kv_indptr[:-1]).tolist()
        assert counts[0] == lens[0] and counts[1] == 1 and counts[2] == 0


@pytest.mark.parametrize("seed", range(4))
def test_views_hide_the_same_positions_in_every_index_build(seed, monkeypatch):
    """The accurate radix mode's views (``segment_views``): for requests with a view, a segment
    position the view hides is not held. FlashInfer's flat build, the torch backend's per-request
    and padded builds all equal the reference: the unit's slots with the hidden positions zeroed,
    zeros removed."""
    from sglang_pask.srt.attention.torch_native_backend import padded_held_slots
    from sglang_pask.srt.state import state

    mapping, req_to_token, rows, lens = _random_case(seed)
    g = torch.Generator().manual_seed(100 + seed)
    views = {}
    for i in (0, 3):  # two requests with a view over a segment of up to their length
        s = max(int(lens[i]) - 2, 1)
        views[int(rows[i])] = ("rid", s, [torch.rand(s, generator=g) < 0.4 for _ in range(mapping.shape[0])])
    monkeypatch.setattr(state(), "views", views)
    out = build_unit_indices(mapping, req_to_token, rows, lens)
    for u, (kv_indptr, kv_indices) in enumerate(out):
        padded, counts = padded_held_slots(mapping[u], req_to_token, rows, lens.clamp(min=1), u)
        for i, (r, n) in enumerate(zip(rows.tolist(), lens.tolist())):
            slots = mapping[u][req_to_token[r, :n].long()].clone()
            if r in views:
                _, s, masks = views[r]
                slots[:s][~masks[u]] = 0
            want = slots[slots > 0]
            assert torch.equal(kv_indices[kv_indptr[i]:kv_indptr[i + 1]].long(), want), (u, i)
            assert torch.equal(held_slots(mapping[u], req_to_token[r, :n], r, u)[0], want), (u, i)
            if n:
                assert torch.equal(padded[i, :counts[i]], want), (u, i)


def test_build_unit_indices_empty_batches():
    mapping = torch.zeros((2, 10), dtype=torch.int64)
    r2t = torch.zeros((2, 4), dtype=torch.int32)
    for rows, lens in ((torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)),
                       (torch.tensor([1, 0]), torch.tensor([0, 0]))):
        for kv_indptr, kv_indices in build_unit_indices(mapping, r2t, rows, lens):
            assert kv_indptr.tolist() == [0] * (len(lens) + 1) and kv_indices.numel() == 0


# -- merge_lse_states ------------------------------------------------------------------------------
def _attn_lse2(q, k, v, scale):
    """``q [n, h, d]``, ``k/v [m, h, d]`` -> (o, base-2 LSE); m == 0 gives (0, -inf)."""
    if k.shape[0] == 0:
        return torch.zeros_like(q), torch.full(q.shape[:2], -math.inf)
    logits = torch.einsum("nhd,mhd->nhm", q, k) * scale
    return torch.einsum("nhm,mhd->nhd", logits.softmax(-1), v), torch.logsumexp(logits, -1) / math.log(2)


@pytest.mark.parametrize("split", [0, 3, 7, 10])
def test_merge_lse_states_equals_attention_over_the_union(split):
    g = torch.Generator().manual_seed(split)
    q, k, v = (torch.randn(s, generator=g) for s in ((5, 4, 8), (10, 4, 8), (10, 4, 8)))
    o_a, s_a = _attn_lse2(q, k[:split], v[:split], 0.3)
    o_b, s_b = _attn_lse2(q, k[split:], v[split:], 0.3)
    o, s = merge_lse_states(o_a, s_a, o_b, s_b)
    o_ref, s_ref = _attn_lse2(q, k, v, 0.3)
    torch.testing.assert_close(o, o_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s, s_ref, rtol=1e-5, atol=1e-5)


# -- import without flashinfer ----------------------------------------------------------------------
def test_module_imports_and_refuses_without_flashinfer(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # `import flashinfer` raises ImportError
    monkeypatch.setitem(sys.modules, "flashinfer.cascade", None)
    monkeypatch.delitem(sys.modules, MOD, raising=False)
    mod = importlib.import_module(MOD)
    try:
        assert callable(mod.build_unit_indices)
        with pytest.raises(RuntimeError, match="flashinfer"):
            mod.PaskFlashInferAttnBackend(NS())
        bare = object.__new__(mod.PaskFlashInferAttnBackend)
        with pytest.raises(RuntimeError, match="--disable-cuda-graph"):
            bare.init_cuda_graph_state(8, 64)
    finally:
        sys.modules.pop(MOD, None)  # the next import gets a fresh module


# -- the backend's glue against a torch stand-in for flashinfer -------------------------------------
class _Wrapper:
    """Torch stand-in for FlashInfer's paged/ragged/decode wrappers (page size 1, base-2 LSE)."""

    kind = ""

    def __init__(self, *args, **kwargs):
        self.plan = None

    def begin_forward(self, *args, causal=False, **kwargs):
        if self.kind == "ragged":
            qo, kv = args[:2]
            self.plan = (qo, kv, None, causal)
        elif self.kind == "paged":
            qo, kv, idx = args[:3]
            self.plan = (qo, kv, idx, causal)
        else:
            kv, idx = args[:2]
            self.plan = (torch.arange(kv.numel(), dtype=torch.int32), kv, idx, False)
        assert self.plan[1].dtype == torch.int32

    def _run(self, q, k_all, v_all, causal, sm_scale):
        qo, kv, idx, planned_causal = self.plan
        assert causal == planned_causal
        outs, lses = [], []
        for i in range(qo.numel() - 1):
            qi = q[qo[i]:qo[i + 1]]
            sel = slice(kv[i], kv[i + 1]) if idx is None else idx[kv[i]:kv[i + 1]].long()
            ki, vi = k_all[sel], v_all[sel]
            rep = qi.shape[1] // ki.shape[1]
            ki, vi = ki.repeat_interleave(rep, 1), vi.repeat_interleave(rep, 1)
            if ki.shape[0] == 0:
                outs.append(torch.zeros_like(qi))
                lses.append(torch.full(qi.shape[:2], -math.inf))
                continue
            logits = torch.einsum("nhd,mhd->nhm", qi.float(), ki.float()) * sm_scale
            if causal:
                assert qi.shape[0] == ki.shape[0]
                logits = logits.masked_fill(~torch.ones(qi.shape[0], ki.shape[0], dtype=torch.bool).tril()[:, None],
                                            -math.inf)
            outs.append(torch.einsum("nhm,mhd->nhd", logits.softmax(-1), vi.float()).to(q.dtype))
            lses.append(torch.logsumexp(logits, -1) / math.log(2))
        return torch.cat(outs), torch.cat(lses)

    def forward_return_lse(self, q, *kv, causal=False, sm_scale=None, **kwargs):
        k_all, v_all = kv if len(kv) == 2 else kv[0]
        return self._run(q, k_all, v_all, causal, sm_scale)

    def forward(self, q, *kv, causal=False, sm_scale=None, **kwargs):
        return self.forward_return_lse(q, *kv, causal=causal, sm_scale=sm_scale)[0]


class _Paged(_Wrapper):
    kind = "paged"


class _Ragged(_Wrapper):
    kind = "ragged"


class _Decode(_Wrapper):
    kind = "decode"


def _fake_merge_state(v_a, s_a, v_b, s_b):
    s = torch.logaddexp2(s_a, s_b)
    return v_a * torch.exp2(s_a - s)[..., None] + v_b * torch.exp2(s_b - s)[..., None], s


H, HK, D, LAYERS, UNITS = 4, 2, 8, 3, [[0], [1, 2]]


@pytest.fixture
def backend(monkeypatch):
    from sglang.srt import runtime_context
    from sglang_pask.srt.mem_cache.pools import PaskAllocator, PaskKVPool

    fi = types.ModuleType("flashinfer")
    fi.BatchDecodeWithPagedKVCacheWrapper = _Decode
    fi.BatchPrefillWithPagedKVCacheWrapper = _Paged
    fi.BatchPrefillWithRaggedKVCacheWrapper = _Ragged
    cascade = types.ModuleType("flashinfer.cascade")
    cascade.merge_state = _fake_merge_state
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    monkeypatch.setitem(sys.modules, "flashinfer.cascade", cascade)
    sgl_fi = types.ModuleType("sglang.srt.layers.attention.flashinfer_backend")  # skip its slow import
    sgl_fi.should_use_tensor_core = lambda **kwargs: False
    monkeypatch.setitem(sys.modules, sgl_fi.__name__, sgl_fi)
    monkeypatch.setattr(runtime_context, "get_parallel", lambda: NS(attn_tp_size=1, attn_dcp_size=1))
    monkeypatch.setattr(runtime_context, "get_buffer", lambda name, factory: torch.empty(8, dtype=torch.uint8))
    from sglang_pask.srt.attention.flashinfer_backend import PaskFlashInferAttnBackend

    pool = PaskKVPool(units=UNITS, full_size=64, unit_size=64, dtype=torch.float32, head_num=HK, head_dim=D,
                      v_head_dim=None, device="cpu", num_layers=LAYERS)
    alloc = PaskAllocator(64, pool, device="cpu", dtype=torch.float32)
    cfg = NS(get_max_num_attention_heads=lambda: H, num_attention_heads=H, get_num_kv_heads=lambda tp, dcp=1: HK,
             head_dim=D, is_encoder_decoder=False, is_multimodal=False)
    r2t = NS(size=4, req_to_token=torch.zeros((4, 32), dtype=torch.int32))
    runner = NS(token_to_kv_pool=pool, req_to_token_pool=r2t, model_config=cfg, sliding_window_size=None,
                kv_index_translator=None, device="cpu", dtype=torch.float32, kv_cache_dtype=torch.float32)
    return PaskFlashInferAttnBackend(runner), alloc


def _layer(i):
    return NS(layer_id=i, tp_q_head_num=H, tp_k_head_num=HK, tp_v_head_num=HK, head_dim=D, v_head_dim=D,
              scaling=D ** -0.5, logit_cap=0.0, is_cross_attention=False, sliding_window_size=-1, attn_type=None,
              k_scale=None, v_scale=None, k_scale_float=None, v_scale_float=None)


def _batch(mode, rows, prefix, ext, out_cache_loc):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    seq = [p + e for p, e in zip(prefix, ext)]
    return NS(forward_mode=getattr(ForwardMode, mode), spec_info=None, encoder_lens=None,
              req_pool_indices=torch.tensor(rows), seq_lens=torch.tensor(seq), seq_lens_sum=sum(seq),
              extend_seq_lens=torch.tensor(ext), extend_prefix_lens=torch.tensor(prefix), extend_prefix_lens_cpu=prefix,
              out_cache_loc=out_cache_loc, out_cache_loc_is_physical=False)


def _reference(pool, r2t, layer, q, rows, prefix, ext):
    """Per request: held keys of the layer's unit over the whole sequence, causal by position."""
    u = pool.unit_of[layer.layer_id]
    kb, vb = pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id)
    outs, start = [], 0
    for r, p, e in zip(rows, prefix, ext):
        slots, k_pos = held_slots(pool.mapping[u], r2t[r, :p + e])
        qi = q[start:start + e].view(e, H, D).movedim(0, 1)
        o = sparse_attention(qi, kb[slots].movedim(0, 1), vb[slots].movedim(0, 1),
                             torch.arange(p, p + e), k_pos, layer.scaling, True)
        outs.append(o.movedim(0, 1).reshape(e, H * D))
        start += e
    return torch.cat(outs)


def _plan(be, alloc, r2t, mode, rows, prefix, ext):
    """Allocate the new tokens into their rows and plan the forward; returns its batch."""
    loc = alloc.alloc(sum(ext))
    start = 0
    for r, p, e in zip(rows, prefix, ext):
        r2t[r, p:p + e] = loc[start:start + e].to(torch.int32)
        start += e
    fb = _batch(mode, rows, prefix, ext, loc)
    be.init_forward_metadata(fb)
    return fb


def _run(be, alloc, r2t, mode, rows, prefix, ext, g):
    """Allocate the new tokens, run every layer, compare with the reference."""
    n = sum(ext)
    fb = _plan(be, alloc, r2t, mode, rows, prefix, ext)
    for i in range(LAYERS):
        layer = _layer(i)
        q = torch.randn(n, H * D, generator=g)
        k, v = torch.randn(n, HK, D, generator=g), torch.randn(n, HK, D, generator=g)
        fwd = be.forward_decode if mode == "DECODE" else be.forward_extend
        out = fwd(q, k, v, layer, fb)
        torch.testing.assert_close(out, _reference(be.pool, r2t, layer, q, rows, prefix, ext), rtol=1e-4, atol=1e-4)
    return be.forward_metadata


def test_backend_glue_matches_the_torch_reference(backend):
    be, alloc = backend
    r2t = be.req_to_token_pool.req_to_token
    g = torch.Generator().manual_seed(0)
    # Prefill two requests (no prefix: ragged only, in every unit).
    meta = _run(be, alloc, r2t, "EXTEND", [2, 0], [0, 0], [6, 4], g)
    assert meta.has_prefix == [False, False]
    # Drop: unit 0 keeps a sparse prefix of row 2, unit 1 holds nothing of row 2's prefix but row 0's.
    alloc.drop(0, r2t[2, torch.tensor([1, 3, 4])].long())
    alloc.drop(1, r2t[2, :6].long())
    # Extend both (chunked prefill / MIXED: row 0 gets one token, row 2 three).
    meta = _run(be, alloc, r2t, "MIXED", [2, 0], [6, 4], [3, 1], g)
    assert meta.has_prefix == [True, True] and meta.unit_nnz == [3 + 4, 0 + 4]
    meta = _run(be, alloc, r2t, "EXTEND", [2], [9], [2], g)
    assert meta.has_prefix == [True, True]
    # A unit with no held prefix in the whole batch skips the paged part.
    alloc.drop(1, r2t[2, :11].long())
    meta = _run(be, alloc, r2t, "EXTEND", [2], [11], [1], g)
    assert meta.has_prefix == [True, False]
    # Decode both rows over the sparse held sets (the new token is always held).
    alloc.drop(0, r2t[0, torch.tensor([0, 2])].long())
    meta = _run(be, alloc, r2t, "DECODE", [2, 0], [12, 5], [1, 1], g)
    assert meta.decode and meta.unit_nnz == [13 - 3 + 6 - 2, 2 + 6]


@pytest.mark.parametrize("kind, w", [("window", 3), ("window_heads", 3), ("accumulated", 0)])
def test_backend_records_what_the_torch_backend_records(backend, kind, w):
    """The recording glue: over a prefill, an extend after drops and decode steps, the backend's
    recorder holds what a torch-path recorder fed each request's queries over its held keys (the
    torch backend's :meth:`~.attention.PaskTorchNativeAttnBackend._attend`) holds."""
    from sglang_pask.srt.attention.window_stats import Recorder

    be, alloc = backend
    be.recorder, ref = Recorder(kind, w, HK), Recorder(kind, w, HK)
    r2t = be.req_to_token_pool.req_to_token
    g = torch.Generator().manual_seed(3)

    def step(mode, rows, prefix, ext):
        fb = _plan(be, alloc, r2t, mode, rows, prefix, ext)
        for r, p, e in zip(rows, prefix, ext):
            ref.begin(r, p, p + e)
        for i in range(LAYERS):
            layer, n = _layer(i), sum(ext)
            q = torch.randn(n, H * D, generator=g)
            k, v = torch.randn(n, HK, D, generator=g), torch.randn(n, HK, D, generator=g)
            (be.forward_decode if mode == "DECODE" else be.forward_extend)(q, k, v, layer, fb)
            u, kb, start = be.pool.unit_of[i], be.pool.get_key_buffer(i), 0
            for r, p, e in zip(rows, prefix, ext):  # the torch backend's hand-over, after the write
                slots, k_pos = held_slots(be.pool.mapping[u], r2t[r, :p + e])
                ref.record(r, i, q[start:start + e].view(e, H, D).movedim(0, 1), kb[slots].movedim(0, 1),
                           torch.arange(p, p + e), k_pos, layer.scaling)
                start += e

    step("EXTEND", [2, 0], [0, 0], [6, 4])
    alloc.drop(0, r2t[2, torch.tensor([1, 3, 4])].long())
    step("EXTEND", [2], [6], [3])
    step("DECODE", [2, 0], [9, 4], [1, 1])
    step("DECODE", [2, 0], [10, 5], [1, 1])
    for r, n in ((2, 11), (0, 6)):
        held = [held_slots(be.pool.mapping[be.pool.unit_of[i]], r2t[r, :n])[1].numpy() for i in range(LAYERS)]
        got, want = be.recorder.stats(r, held), ref.stats(r, held)
        for field in ("window", "window_heads", "accumulated"):
            a, b = getattr(got, field), getattr(want, field)
            assert (a is None) == (b is None), field
            for x, y in zip(a or [], b or []):
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        assert any(np.any(x) for x in (got.window if kind != "accumulated" else got.accumulated))
