"""The PASK FlashInfer backend with FlashInfer's own kernels on a CUDA GPU (skipped without a GPU or
without flashinfer; ``bench/gpu_check.sh`` runs this file where both are present). What
``test_srt_flashinfer_indices.py`` and ``test_srt_flashinfer_graphs.py`` check on CPU against the
torch stand-in, here against the real wrappers, at Qwen3-4B's attention shape (32 query heads,
8 KV heads, head_dim 128) in float16 and bfloat16:

1. **Eager**: a prefill (ragged), drops that leave sparse held sets per unit, an extend over them
   (paged prefix merged with the ragged new tokens) and decode steps: every layer's output equals
   SDPA over the same kept positions (``flashinfer_kit.reference``: float32 SDPA over
   ``held_slots``), within the dtype's tolerance.
2. **CUDA graphs**: a decode step of every layer captured in a ``torch.cuda.CUDAGraph`` at two batch
   sizes after the backend's capture prep (``init_cuda_graph_state``,
   ``init_forward_metadata_out_graph(in_capture=True)``), then replayed after further drops, as
   SGLang replays: the batch's write locations copied into the captured buffer, the replay prep
   (index streams written into the captured buffers, wrappers re-planned), ``graph.replay()``.
   Each real row equals SDPA over its kept positions and the eager path over the same batch.

UNTESTED: no GPU has run this file yet (no device was lent since it was written); on CPU it is
collected and skipped.
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace as NS

import pytest
import torch
from flashinfer_kit import LAYERS, allocate, batch, layer, make_backend, reference

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("flashinfer") is None,
    reason="needs a CUDA GPU and flashinfer (bench/gpu_check.sh runs it there)")

#: Qwen3-4B's attention: query heads, KV heads, head_dim
SHAPE = (32, 8, 128)
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
MAX_BS = 4


@pytest.fixture(params=[torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def gpu_backend(request, monkeypatch):
    be, alloc = make_backend(monkeypatch, real=True, device="cuda", dtype=request.param, shape=SHAPE)
    return be, alloc, request.param


def _qkv(n, dtype, g):
    h, hk, d = SHAPE
    return (torch.randn(n, h * d, generator=g, device="cuda").to(dtype),
            torch.randn(n, hk, d, generator=g, device="cuda").to(dtype),
            torch.randn(n, hk, d, generator=g, device="cuda").to(dtype))


def _step(be, alloc, mode, rows, prefix, ext, dtype, g):
    """Allocate, plan eagerly, run every layer; each layer's output against the reference."""
    r2t = be.req_to_token_pool.req_to_token
    fb = batch(mode, rows, prefix, ext, allocate(alloc, r2t, rows, prefix, ext))
    be.init_forward_metadata(fb)
    for i in range(LAYERS):
        lay = layer(i, SHAPE)
        q, k, v = _qkv(sum(ext), dtype, g)
        out = (be.forward_decode if mode == "DECODE" else be.forward_extend)(q, k, v, lay, fb)
        torch.testing.assert_close(out.float(), reference(be.pool, r2t, lay, q, rows, prefix, ext).float(),
                                   rtol=TOL[dtype], atol=TOL[dtype])
    return be.forward_metadata


def _drops(be, alloc):
    """Sparse held sets: unit 0 keeps a sparse prefix of row 2, unit 1 drops row 2's first 5."""
    r2t = be.req_to_token_pool.req_to_token
    alloc.drop(0, r2t[2, torch.tensor([1, 3, 4], device="cuda")].long())
    alloc.drop(1, r2t[2, :5].long())
    alloc.drop(0, r2t[1, torch.tensor([0, 2], device="cuda")].long())


def test_eager_attention_over_kept_positions_equals_sdpa(gpu_backend):
    be, alloc, dtype = gpu_backend
    g = torch.Generator(device="cuda").manual_seed(0)
    meta = _step(be, alloc, "EXTEND", [2, 0, 1], [0, 0, 0], [6, 4, 5], dtype, g)
    assert meta.has_prefix == [False, False]
    _drops(be, alloc)
    meta = _step(be, alloc, "EXTEND", [2, 0], [6, 4], [3, 2], dtype, g)  # held prefix + new tokens
    assert meta.has_prefix == [True, True]
    meta = _step(be, alloc, "DECODE", [2, 0, 1], [9, 6, 5], [1, 1, 1], dtype, g)
    assert meta.decode and meta.unit_nnz == [(10 - 3) + 7 + (6 - 2), (10 - 5) + 7 + 6]


def _capture(be, bs, dtype):
    """SGLang's capture: the prep with every row a padding row, a warm-up forward on a side
    stream, then every layer's decode step recorded in one graph over static buffers."""
    h, hk, d = SHAPE
    static = NS(q=[torch.zeros(bs, h * d, dtype=dtype, device="cuda") for _ in range(LAYERS)],
                k=[torch.zeros(bs, hk, d, dtype=dtype, device="cuda") for _ in range(LAYERS)],
                v=[torch.zeros(bs, hk, d, dtype=dtype, device="cuda") for _ in range(LAYERS)],
                loc=torch.zeros(bs, dtype=torch.int64, device="cuda"), out=[None] * LAYERS)
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    fb = NS(forward_mode=ForwardMode.DECODE, spec_info=None, encoder_lens=None, batch_size=bs,
            req_pool_indices=torch.zeros(bs, dtype=torch.int64, device="cuda"),
            seq_lens=torch.ones(bs, dtype=torch.int64, device="cuda"), seq_lens_sum=bs,
            out_cache_loc=static.loc, out_cache_loc_is_physical=False)
    be.init_forward_metadata_out_graph(fb, in_capture=True)

    def forward():
        for i in range(LAYERS):
            static.out[i] = be.forward_decode(static.q[i], static.k[i], static.v[i], layer(i, SHAPE), fb)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    return graph, static


def _replay(be, alloc, captured, bs, rows, prefix, dtype, g):
    """One decode step through the graph of size ``bs`` (real rows first, then padding rows)."""
    graph, static = captured
    r2t = be.req_to_token_pool.req_to_token
    ext, pad = [1] * len(rows), bs - len(rows)
    loc = allocate(alloc, r2t, rows, prefix, ext)
    static.loc.zero_()
    static.loc[:len(rows)] = loc
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    seqs = [p + 1 for p in prefix]
    view = NS(forward_mode=ForwardMode.DECODE, spec_info=None, encoder_lens=None, batch_size=bs, num_padding=pad,
              req_pool_indices=torch.tensor(list(rows) + [0] * pad, device="cuda"),
              seq_lens=torch.tensor(seqs + [1] * pad, device="cuda"), seq_lens_sum=sum(seqs) + pad,
              out_cache_loc=static.loc, out_cache_loc_is_physical=False)
    be.init_forward_metadata_out_graph(view)
    qs = []
    for i in range(LAYERS):
        q, k, v = _qkv(bs, dtype, g)
        static.q[i].copy_(q)
        static.k[i].copy_(k)
        static.v[i].copy_(v)
        qs.append(q)
    graph.replay()
    torch.cuda.synchronize()
    outs = [o.clone() for o in static.out]
    for i in range(LAYERS):
        lay = layer(i, SHAPE)
        want = reference(be.pool, r2t, lay, qs[i], rows, prefix, ext)
        torch.testing.assert_close(outs[i][:len(rows)].float(), want.float(), rtol=TOL[dtype], atol=TOL[dtype])
    # the eager path over the same (unpadded) batch, K/V already written
    fb = batch("DECODE", rows, prefix, ext, loc)
    be.init_forward_metadata(fb)
    for i in range(LAYERS):
        eager = be.forward_decode(qs[i][:len(rows)], None, None, layer(i, SHAPE), fb)
        torch.testing.assert_close(outs[i][:len(rows)].float(), eager.float(), rtol=TOL[dtype], atol=TOL[dtype])


def test_captured_decode_replays_over_the_kept_positions(gpu_backend):
    be, alloc, dtype = gpu_backend
    g = torch.Generator(device="cuda").manual_seed(1)
    be.init_cuda_graph_state(MAX_BS, MAX_BS)
    captured = {bs: _capture(be, bs, dtype) for bs in (MAX_BS, 2)}  # start-up, the largest size first
    _step(be, alloc, "EXTEND", [2, 0, 1], [0, 0, 0], [6, 4, 5], dtype, g)
    _drops(be, alloc)
    r2t = be.req_to_token_pool.req_to_token
    _replay(be, alloc, captured[MAX_BS], MAX_BS, [2, 0, 1], [6, 4, 5], dtype, g)  # 1 padding row
    alloc.drop(1, r2t[0, torch.tensor([1, 2], device="cuda")].long())
    _replay(be, alloc, captured[MAX_BS], MAX_BS, [0, 2], [5, 7], dtype, g)  # 2 padding rows, after a drop
    _replay(be, alloc, captured[2], 2, [1, 2], [6, 8], dtype, g)  # no padding, the other size
