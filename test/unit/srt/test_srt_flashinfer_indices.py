"""The PASK FlashInfer backend on CPU: its per-unit index streams (:func:`build_unit_indices`) against
the torch reference :func:`held_slots`, its LSE merge, that the module imports without flashinfer,
and its eager planning/dispatch glue run against the torch stand-in for flashinfer of
``flashinfer_kit`` (the real kernels need a GPU and are not exercised here; the CUDA-graph
bookkeeping: ``test_srt_flashinfer_graphs.py``)."""

from __future__ import annotations

import importlib
import math
import sys
from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch
from flashinfer_kit import HK, LAYERS, D, H, layer, make_backend, plan, run
from sglang_pask.srt.attention.flashinfer_backend import build_unit_indices, merge_lse_states
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
    # a fresh import of the module; at teardown monkeypatch puts back both places the loaded one
    # lives (sys.modules and the package's attribute, which the import rebinds), so the tests after
    # this one patch the module they run
    loaded = importlib.import_module(MOD)
    package = importlib.import_module(MOD.rpartition(".")[0])
    monkeypatch.setattr(package, MOD.rpartition(".")[2], loaded)
    monkeypatch.delitem(sys.modules, MOD)
    mod = importlib.import_module(MOD)
    assert mod is not loaded and callable(mod.build_unit_indices)
    with pytest.raises(RuntimeError, match="flashinfer"):
        mod.PaskFlashInferAttnBackend(NS())


# -- the backend's glue against a torch stand-in for flashinfer (flashinfer_kit) ---------------------
@pytest.fixture
def backend(monkeypatch):
    return make_backend(monkeypatch)


def test_backend_glue_matches_the_torch_reference(backend):
    be, alloc = backend
    r2t = be.req_to_token_pool.req_to_token
    g = torch.Generator().manual_seed(0)
    # Prefill two requests (no prefix: ragged only, in every unit).
    meta = run(be, alloc, r2t, "EXTEND", [2, 0], [0, 0], [6, 4], g)
    assert meta.has_prefix == [False, False]
    # Drop: unit 0 keeps a sparse prefix of row 2, unit 1 holds nothing of row 2's prefix but row 0's.
    alloc.drop(0, r2t[2, torch.tensor([1, 3, 4])].long())
    alloc.drop(1, r2t[2, :6].long())
    # Extend both (chunked prefill / MIXED: row 0 gets one token, row 2 three).
    meta = run(be, alloc, r2t, "MIXED", [2, 0], [6, 4], [3, 1], g)
    assert meta.has_prefix == [True, True] and meta.unit_nnz == [3 + 4, 0 + 4]
    meta = run(be, alloc, r2t, "EXTEND", [2], [9], [2], g)
    assert meta.has_prefix == [True, True]
    # A unit with no held prefix in the whole batch skips the paged part.
    alloc.drop(1, r2t[2, :11].long())
    meta = run(be, alloc, r2t, "EXTEND", [2], [11], [1], g)
    assert meta.has_prefix == [True, False]
    # Decode both rows over the sparse held sets (the new token is always held).
    alloc.drop(0, r2t[0, torch.tensor([0, 2])].long())
    meta = run(be, alloc, r2t, "DECODE", [2, 0], [12, 5], [1, 1], g)
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
        fb = plan(be, alloc, r2t, mode, rows, prefix, ext)
        for r, p, e in zip(rows, prefix, ext):
            ref.begin(r, p, p + e)
        for i in range(LAYERS):
            lay, n = layer(i), sum(ext)
            q = torch.randn(n, H * D, generator=g)
            k, v = torch.randn(n, HK, D, generator=g), torch.randn(n, HK, D, generator=g)
            (be.forward_decode if mode == "DECODE" else be.forward_extend)(q, k, v, lay, fb)
            u, kb, start = be.pool.unit_of[i], be.pool.get_key_buffer(i), 0
            for r, p, e in zip(rows, prefix, ext):  # the torch backend's hand-over, after the write
                slots, k_pos = held_slots(be.pool.mapping[u], r2t[r, :p + e])
                ref.record(r, i, q[start:start + e].view(e, H, D).movedim(0, 1), kb[slots].movedim(0, 1),
                           torch.arange(p, p + e), k_pos, lay.scaling)
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
