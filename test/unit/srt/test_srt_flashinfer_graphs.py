"""The PASK FlashInfer backend's CUDA-graph bookkeeping on CPU (``srt/attention/flashinfer_graphs.py``
and the backend's capture/replay prep), against the recording stand-in wrappers of
``flashinfer_kit`` (FlashInfer's CUDA-graph contract: fixed buffers, fixed batch size). Nothing
here runs a CUDA graph or a FlashInfer kernel: "replay" below is what a replayed graph does --
the prep SGLang runs before ``graph.replay()``, then the kernels captured at capture time
(the wrapper objects each layer used) reading their buffers, and the K/V write into the padded
batch's slots.

What capture records (wrappers bound to the start-up buffers, every row a padding row), what
replay rewrites (the same tensors, contents equal to the eager build for the same batch, padding
rows reading slot 0), attention through the captured wrappers equal to the torch reference and
to the eager path, and the refusals (capacity overflow, prefill graphs, statistics, speculative
widths, the glue graph, an uncaptured batch size).
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch
from flashinfer_kit import HK, LAYERS, RUN_LOG, UNITS, D, H, allocate, batch, layer, make_backend, reference, run
from sglang_pask.srt.attention.flashinfer_backend import build_unit_indices
from sglang_pask.srt.attention.flashinfer_graphs import GraphIndexBuffers, capacities

MAX_BS = 4


@pytest.fixture
def backend(monkeypatch):
    RUN_LOG.clear()
    yield make_backend(monkeypatch)
    RUN_LOG.clear()


def _decode():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return ForwardMode.DECODE


def _capture_batch(bs):
    """SGLang's capture batch: every row request 0, length 1 (its index buffers reset), slot 0."""
    return NS(forward_mode=_decode(), spec_info=None, encoder_lens=None, batch_size=bs,
              req_pool_indices=torch.zeros(bs, dtype=torch.int64), seq_lens=torch.ones(bs, dtype=torch.int64),
              seq_lens_sum=bs, out_cache_loc=torch.zeros(bs, dtype=torch.int64), out_cache_loc_is_physical=False)


def _replay_view(rows, seqs, loc, bs):
    """SGLang's replay view (``build_replay_fb_view``): the real rows first, then padding rows
    (request 0, length 1, write slot 0); ``seq_lens_sum`` counts the padding's fill value 1."""
    pad = bs - len(rows)
    return NS(forward_mode=_decode(), spec_info=None, encoder_lens=None, batch_size=bs, num_padding=pad,
              req_pool_indices=torch.tensor(list(rows) + [0] * pad), seq_lens=torch.tensor(list(seqs) + [1] * pad),
              seq_lens_sum=sum(seqs) + pad, out_cache_loc=torch.cat([loc, torch.zeros(pad, dtype=loc.dtype)]),
              out_cache_loc_is_physical=False)


def _ids(t: torch.Tensor) -> tuple:
    return id(t), t.data_ptr()


def _snapshot(be):
    g = be.graph_buffers
    return [t.clone() for t in (*g.kv_indptr, *g.kv_indices)]


def _eager_streams(be, rows, seqs):
    return build_unit_indices(be.pool.mapping, be.req_to_token_pool.req_to_token, torch.tensor(rows),
                              torch.tensor(seqs))


def _assert_buffers_hold(be, rows, seqs, bs):
    """The index map of ``flashinfer_graphs``: real rows as the eager build, then padding rows of
    one key each, slot 0."""
    g, real = be.graph_buffers, len(rows)
    for u, (kv_indptr, kv_indices) in enumerate(_eager_streams(be, rows, seqs)):
        n = kv_indices.numel()
        assert torch.equal(g.kv_indptr[u][:real + 1], kv_indptr), u
        assert g.kv_indptr[u][real + 1:bs + 1].tolist() == list(range(n + 1, n + bs - real + 1)), u
        assert torch.equal(g.kv_indices[u][:n], kv_indices), u
        assert g.kv_indices[u][n:n + bs - real].tolist() == [0] * (bs - real), u
        assert be.forward_metadata.unit_nnz[u] == n + bs - real


# -- the buffers alone ---------------------------------------------------------------------------
def test_capacities_come_from_the_unit_pools():
    # no shared slots: the unit's live slots + one per padding row, never past the per-row bound
    assert capacities([10, 100], max_bs=4, max_context_len=32, shared=False) == [14, 104]
    assert capacities([1000], max_bs=4, max_context_len=32, shared=False) == [128]
    # shared segments: every row may read up to min(context, unit) slots
    assert capacities([10, 100], max_bs=4, max_context_len=32, shared=True) == [40, 128]


@pytest.mark.parametrize("padding", [0, 1, 3])
def test_fill_writes_the_index_map_in_place(padding):
    g = torch.Generator().manual_seed(padding)
    mapping = torch.zeros((2, 40), dtype=torch.int64)
    mapping[:, 1:33] = torch.stack([torch.randperm(32, generator=g) + 1 for _ in range(2)])
    mapping[0, torch.randperm(40, generator=g)[:12]] = 0  # drops in unit 0
    r2t = torch.arange(1, 33, dtype=torch.int32).view(4, 8)
    bufs = GraphIndexBuffers(capacities([32, 32], MAX_BS, 8, shared=False), MAX_BS, "cpu")
    before = [_ids(t) for t in (*bufs.kv_indptr, *bufs.kv_indices, bufs.last_page_len)]
    real = MAX_BS - padding
    units = build_unit_indices(mapping, r2t, torch.tensor([3, 0, 2, 1][:real]), torch.tensor([8, 5, 0, 7][:real]))
    nnz = bufs.fill(units, MAX_BS, padding)
    assert [_ids(t) for t in (*bufs.kv_indptr, *bufs.kv_indices, bufs.last_page_len)] == before
    for u, (kv_indptr, kv_indices) in enumerate(units):
        n = kv_indices.numel()
        assert nnz[u] == n + padding
        assert bufs.kv_indptr[u][:MAX_BS + 1].tolist() == kv_indptr.tolist() + list(range(n + 1, n + padding + 1))
        assert bufs.kv_indices[u][:n + padding].tolist() == kv_indices.tolist() + [0] * padding
    assert bufs.last_page_len.tolist() == [1] * MAX_BS


def test_fill_refuses_overflow_and_writes_nothing():
    bufs = GraphIndexBuffers([6, 100], MAX_BS, "cpu")
    bufs.kv_indices[0].fill_(7)
    units = [(torch.tensor([0, 3, 6], dtype=torch.int32), torch.arange(1, 7, dtype=torch.int32))] * 2
    with pytest.raises(RuntimeError, match=r"reads 7 keys in unit 0, more than the 6 .*--cuda-graph-backend-decode"):
        bufs.fill(units, 3, 1)  # 6 held keys + 1 padding row
    assert bufs.kv_indices[0].tolist() == [7] * 6 and bufs.kv_indptr[1].tolist() == [0] * (MAX_BS + 1)
    assert bufs.fill(units, 2, 0) == [6, 6]  # exactly full fits


# -- capture -------------------------------------------------------------------------------------
def test_capture_binds_wrappers_to_the_start_up_buffers(backend):
    be, _ = backend
    be.init_cuda_graph_state(MAX_BS, MAX_BS)
    g = be.graph_buffers
    bufs = [_ids(t) for t in (*g.kv_indptr, *g.kv_indices, g.last_page_len)]
    assert g.capacity == capacities(be.pool.unit_sizes, MAX_BS, 32, shared=True)
    for bs in (MAX_BS, 2, 1):  # SGLang captures the largest size first
        be.init_forward_metadata_out_graph(_capture_batch(bs), in_capture=True)
        wrappers = be.graph_wrappers[bs]
        assert be.forward_metadata.wrappers is wrappers and len(wrappers) == len(UNITS)
        assert be.forward_metadata.unit_nnz == [bs] * len(UNITS)  # every row a padding row: one key, slot 0
        for u, w in enumerate(wrappers):
            assert w.is_cuda_graph_enabled and w._fixed_batch_size == bs and w not in be.decode_wrappers
            assert w._paged_kv_indices_buf is g.kv_indices[u]
            assert w._paged_kv_indptr_buf.data_ptr() == g.kv_indptr[u].data_ptr()
            assert w._paged_kv_last_page_len_buf.data_ptr() == g.last_page_len.data_ptr()
            # one int workspace per unit, shared with the unit's eager decode wrapper
            assert w._int_workspace_buffer is be.decode_wrappers[u]._int_workspace_buffer
            assert w._pin_memory_int_workspace_buffer is be.decode_wrappers[u]._pin_memory_int_workspace_buffer
            (call,) = w.calls
            indptr, indices, last = call["args"][:3]
            assert indptr.tolist() == list(range(bs + 1)) and indices.tolist() == [0] * bs
            assert last.tolist() == [1] * bs and call["args"][3:7] == (H, HK, D, 1)
    assert [_ids(t) for t in (*g.kv_indptr, *g.kv_indices, g.last_page_len)] == bufs
    assert len({id(w) for ws in be.graph_wrappers.values() for w in ws}) == 3 * len(UNITS)
    again = list(be.graph_wrappers[2])  # another capture of a size (SGLang's variants) reuses its wrappers
    be.init_forward_metadata_out_graph(_capture_batch(2), in_capture=True)
    assert be.graph_wrappers[2] == again and all(len(w.calls) == 2 for w in again)


# -- replay --------------------------------------------------------------------------------------
def _serve(be, alloc, r2t, g):
    """Prefill rows 2, 0 and 1 eagerly, then drops (sparse held sets, unit by unit)."""
    run(be, alloc, r2t, "EXTEND", [2, 0, 1], [0, 0, 0], [6, 4, 5], g)
    alloc.drop(0, r2t[2, torch.tensor([1, 3, 4])].long())
    alloc.drop(1, r2t[2, :5].long())
    alloc.drop(0, r2t[1, torch.tensor([0, 2])].long())


def _capture(be, bs) -> list:
    """Capture one batch size: the prep, then one forward whose kernels a graph would record;
    returns the wrapper each layer ran (the captured kernels)."""
    fb = _capture_batch(bs)
    be.init_forward_metadata_out_graph(fb, in_capture=True)
    RUN_LOG.clear()
    for i in range(LAYERS):
        q, kv = torch.zeros(bs, H * D), torch.zeros(bs, HK, D)
        be.forward_decode(q, kv, kv, layer(i), fb)
    ran = list(RUN_LOG)
    assert ran == [be.graph_wrappers[bs][be.pool.unit_of[i]] for i in range(LAYERS)]
    return ran


def _replay_step(be, alloc, r2t, captured, bs, rows, prefix, g):
    """One decode step through the graph of size ``bs``: the replay prep, then the captured
    kernels (``captured[layer]``: the wrapper each layer ran at capture) reading their buffers
    after the K/V write into the padded batch's slots. Checks the output of every real row against
    the reference and the eager path."""
    ext = [1] * len(rows)
    loc = allocate(alloc, r2t, rows, prefix, ext)
    seqs = [p + 1 for p in prefix]
    view = _replay_view(rows, seqs, loc, bs)
    be.init_forward_metadata_out_graph(view)
    _assert_buffers_hold(be, rows, seqs, bs)
    qs = []
    for i in range(LAYERS):
        lay = layer(i)
        q = torch.randn(bs, H * D, generator=g)
        k, v = torch.randn(bs, HK, D, generator=g), torch.randn(bs, HK, D, generator=g)
        be._write(lay, view, k, v)  # the captured write: padding rows into slot 0
        o = captured[i].forward(q.view(bs, H, D), be.pool.get_kv_buffer(i), sm_scale=lay.scaling).view(bs, H * D)
        torch.testing.assert_close(o[:len(rows)], reference(be.pool, r2t, lay, q, rows, prefix, ext),
                                   rtol=1e-4, atol=1e-4)
        qs.append((q, o))
    # the eager path over the same (unpadded) batch gives the same rows
    fb = batch("DECODE", rows, prefix, ext, loc)
    be.init_forward_metadata(fb)
    for i, (q, o) in enumerate(qs):
        eager = be.forward_decode(q[:len(rows)], None, None, layer(i), fb)
        torch.testing.assert_close(o[:len(rows)], eager, rtol=0, atol=0)


@pytest.mark.parametrize("with_views", [False, True])
def test_replay_rewrites_the_captured_buffers_in_place(backend, monkeypatch, with_views):
    from sglang_pask.srt.state import state

    be, alloc = backend
    r2t = be.req_to_token_pool.req_to_token
    g = torch.Generator().manual_seed(1)
    be.init_cuda_graph_state(MAX_BS, MAX_BS)
    captured = {bs: _capture(be, bs) for bs in (MAX_BS, 2)}  # start-up, the largest size first
    gb = be.graph_buffers
    bufs = [_ids(t) for t in (*gb.kv_indptr, *gb.kv_indices, gb.last_page_len)]
    wrappers = {bs: list(ws) for bs, ws in be.graph_wrappers.items()}
    _serve(be, alloc, r2t, g)
    if with_views:  # the accurate radix mode's views: row 2 no longer reads segment positions it holds
        masks = [torch.tensor([False, True, True, True, True, False]), torch.tensor([True] * 5 + [False])]
        monkeypatch.setattr(state(), "views", {2: ("rid", 6, masks)})
        for u, hidden in ((0, [0, 5]), (1, [5])):
            assert all(int(be.pool.mapping[u, r2t[2, p]]) > 0 for p in hidden)  # held: the view hides them
    _replay_step(be, alloc, r2t, captured[MAX_BS], MAX_BS, [2, 0, 1], [6, 4, 5], g)  # 1 padding row
    alloc.drop(1, r2t[0, torch.tensor([1, 2])].long())
    _replay_step(be, alloc, r2t, captured[MAX_BS], MAX_BS, [0, 2], [5, 7], g)  # 2 padding rows, after a drop
    _replay_step(be, alloc, r2t, captured[2], 2, [1, 2], [6, 8], g)  # no padding, the other size
    _replay_step(be, alloc, r2t, captured[MAX_BS], MAX_BS, [2, 1, 0], [9, 7, 6], g)
    # nothing was replaced: the start-up buffers and the captured wrappers
    assert [_ids(t) for t in (*gb.kv_indptr, *gb.kv_indices, gb.last_page_len)] == bufs
    assert all(a is b for bs in wrappers for a, b in zip(wrappers[bs], be.graph_wrappers[bs]))
    # every replay planned each captured wrapper once more, on the buffers' own storage
    for bs, n in ((MAX_BS, 3), (2, 1)):
        for u, w in enumerate(wrappers[bs]):
            assert len(w.calls) == 1 + n
            for call in w.calls:
                assert call["args"][1].data_ptr() == gb.kv_indices[u].data_ptr()


def test_replay_of_an_idle_rank_reads_padding_only(backend):
    be, _ = backend
    be.init_cuda_graph_state(MAX_BS, MAX_BS)
    be.init_forward_metadata_out_graph(_capture_batch(2), in_capture=True)
    view = _replay_view([], [], torch.zeros(0, dtype=torch.int64), 2)  # DP attention: an idle rank pads all
    be.init_forward_metadata_out_graph(view)
    assert be.forward_metadata.unit_nnz == [2, 2]
    assert [t[:3].tolist() for t in be.graph_buffers.kv_indptr] == [[0, 1, 2]] * 2


def test_replay_refuses_a_batch_past_the_capacity(backend):
    """Without the radix cache no two rows share a slot, so a unit's buffer holds its pool plus
    one key per padding row; rows sharing slots anyway (an invariant broken) are refused in one
    line, before any buffer is written."""
    be, alloc = backend
    r2t = be.req_to_token_pool.req_to_token
    be.shared_slots = False
    be.init_cuda_graph_state(MAX_BS, MAX_BS)
    assert be.graph_buffers.capacity == [64 + MAX_BS] * 2
    be.init_forward_metadata_out_graph(_capture_batch(MAX_BS), in_capture=True)
    loc = allocate(alloc, r2t, [0], [0], [30])
    r2t[1:, :30] = r2t[0, :30]  # four rows reading the same 30 slots: 120 keys
    before = _snapshot(be)
    with pytest.raises(RuntimeError, match=r"reads 120 keys in unit 0, more than the 68"):
        be.init_forward_metadata_out_graph(_replay_view([0, 1, 2, 3], [30] * 4, loc[:4], MAX_BS))
    assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(be)))
    be.init_forward_metadata_out_graph(_replay_view([0, 1], [30, 30], loc[:2], MAX_BS))  # 62 keys fit


# -- what stays refused ----------------------------------------------------------------------------
def test_decode_graphs_refuse_what_they_cannot_replay(backend, monkeypatch):
    be, _ = backend
    with pytest.raises(RuntimeError, match="one token per request"):
        be.init_cuda_graph_state(MAX_BS, 2 * MAX_BS)  # speculative decoding's widths
    monkeypatch.setenv("SGLANG_ENABLE_METADATA_GLUE_GRAPH", "1")
    with pytest.raises(RuntimeError, match="SGLANG_ENABLE_METADATA_GLUE_GRAPH"):
        be.init_cuda_graph_state(MAX_BS, MAX_BS)
    monkeypatch.delenv("SGLANG_ENABLE_METADATA_GLUE_GRAPH")
    be.method_name, be.needs_attention = "snapkv", "window_heads"
    with pytest.raises(RuntimeError, match=r"snapkv reads attention statistics .*--cuda-graph-backend-decode disabled"):
        be.init_cuda_graph_state(MAX_BS, MAX_BS)
    assert be.graph_buffers is None
    be.needs_attention = None
    with pytest.raises(RuntimeError, match="after init_cuda_graph_state"):  # capture before the state
        be.init_forward_metadata_out_graph(_capture_batch(2), in_capture=True)
    be.init_cuda_graph_state(MAX_BS, MAX_BS)
    with pytest.raises(RuntimeError, match="batch of 3, which was not captured"):
        be.init_forward_metadata_out_graph(_replay_view([], [], torch.zeros(0, dtype=torch.int64), 3))
    prefill = batch("EXTEND", [0], [0], [2], torch.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="--cuda-graph-backend-prefill disabled"):
        be.init_forward_metadata_out_graph(prefill, in_capture=True)
    for call in (lambda: be.init_forward_metadata_for_breakable_cuda_graph_capture(prefill),
                 lambda: be.prepare_forward_metadata_for_breakable_cuda_graph_replay(None, prefill),
                 lambda: be.prepare_full_cuda_graph_chunked_prefix(prefill, in_capture=True)):
        with pytest.raises(RuntimeError, match="--cuda-graph-backend-prefill disabled"):
            call()
    assert be.get_cuda_graph_seq_len_fill_value() == 1


def test_prefill_graphs_are_refused_at_start_up(monkeypatch):
    from sglang_pask.srt.attention import flashinfer_backend

    monkeypatch.setattr(flashinfer_backend, "_prefill_graphs_requested", lambda: True)
    with pytest.raises(RuntimeError, match="decode only .*--cuda-graph-backend-prefill disabled"):
        make_backend(monkeypatch)


def test_without_graph_state_the_out_of_graph_prep_is_the_eager_plan(backend):
    be, alloc = backend
    r2t = be.req_to_token_pool.req_to_token
    loc = allocate(alloc, r2t, [1], [0], [3])
    be.init_forward_metadata_out_graph(batch("EXTEND", [1], [0], [3], loc))
    assert not be.forward_metadata.decode
    loc = allocate(alloc, r2t, [1], [3], [1])
    be.init_forward_metadata_out_graph(batch("DECODE", [1], [3], [1], loc))
    assert be.forward_metadata.wrappers is be.decode_wrappers and be.forward_metadata.unit_nnz == [4, 4]
