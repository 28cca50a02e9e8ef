"""The PASK FlashInfer backend on CPU, against a torch stand-in for flashinfer (the real kernels
need a GPU): recording wrappers that compute what FlashInfer's paged/ragged/decode wrappers
compute (page size 1, base-2 LSE), a backend over a tiny PASK pool, and the torch reference its
output is checked against. Used by ``unit/srt/test_srt_flashinfer_indices.py`` (eager path) and
``unit/srt/test_srt_flashinfer_graphs.py`` (CUDA-graph bookkeeping).

The stand-in decode wrapper follows FlashInfer's CUDA-graph contract: constructed with
``use_cuda_graph=True`` it keeps the indptr / indices / last-page buffers it was given, refuses a
plan of another batch size or of more indices than its buffer holds, copies a plan's streams into
those buffers, and its ``forward`` reads them when it runs -- as a replayed kernel does. Every
``begin_forward`` is logged in ``wrapper.calls``, every ``forward`` in :data:`RUN_LOG`.
"""

from __future__ import annotations

import math
import sys
import types
from types import SimpleNamespace as NS

import torch
from sglang_pask.srt.attention.torch_native_backend import sparse_attention
from sglang_pask.srt.mem_cache.segment_views import held_slots

H, HK, D, LAYERS, UNITS = 4, 2, 8, 3, [[0], [1, 2]]
#: every stand-in wrapper whose ``forward`` ran, in order (a test clears it before it reads it)
RUN_LOG: list = []


class _Wrapper:
    """Torch stand-in for FlashInfer's paged/ragged/decode wrappers (page size 1, base-2 LSE)."""

    kind = ""

    def __init__(self, workspace=None, layout="NHD", *, use_cuda_graph=False, paged_kv_indptr_buffer=None,
                 paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None, **kwargs):
        self.plan = None
        self.calls: list[dict] = []
        self.is_cuda_graph_enabled = use_cuda_graph
        self._int_workspace_buffer = torch.zeros(8, dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.zeros(8, dtype=torch.uint8)
        if use_cuda_graph:
            assert self.kind == "decode", "the backend captures decode wrappers only"
            assert len(paged_kv_indptr_buffer) == len(paged_kv_last_page_len_buffer) + 1
            self._fixed_batch_size = len(paged_kv_last_page_len_buffer)
            self._paged_kv_indptr_buf = paged_kv_indptr_buffer
            self._paged_kv_indices_buf = paged_kv_indices_buffer
            self._paged_kv_last_page_len_buf = paged_kv_last_page_len_buffer

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer):
        self._int_workspace_buffer = int_workspace_buffer
        self._pin_memory_int_workspace_buffer = torch.zeros_like(int_workspace_buffer)

    def begin_forward(self, *args, causal=False, **kwargs):
        self.calls.append({"args": args, "causal": causal, **kwargs})
        if self.kind == "ragged":
            qo, kv = args[:2]
            self.plan = (qo, kv, None, causal)
        elif self.kind == "paged":
            qo, kv, idx = args[:3]
            self.plan = (qo, kv, idx, causal)
        elif self.is_cuda_graph_enabled:  # FlashInfer's plan() in CUDA-graph mode
            kv, idx, last = args[:3]
            if kv.numel() - 1 != self._fixed_batch_size:
                raise ValueError("The batch size should be fixed in cudagraph mode")
            if len(idx) > len(self._paged_kv_indices_buf):
                raise ValueError("The size of indices should be less than or equal to the allocated buffer")
            self._paged_kv_indptr_buf.copy_(kv)
            self._paged_kv_last_page_len_buf.copy_(last)
            self._paged_kv_indices_buf[:len(idx)].copy_(idx)
            bs = self._fixed_batch_size
            self.plan = (torch.arange(bs + 1, dtype=torch.int32), self._paged_kv_indptr_buf,
                         self._paged_kv_indices_buf, False)
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
        RUN_LOG.append(self)
        k_all, v_all = kv if len(kv) == 2 else kv[0]
        return self._run(q, k_all, v_all, causal, sm_scale)

    def forward(self, q, *kv, causal=False, sm_scale=None, **kwargs):
        return self.forward_return_lse(q, *kv, causal=causal, sm_scale=sm_scale)[0]  # logged there


class Paged(_Wrapper):
    kind = "paged"


class Ragged(_Wrapper):
    kind = "ragged"


class Decode(_Wrapper):
    kind = "decode"


def _fake_merge_state(v_a, s_a, v_b, s_b):
    s = torch.logaddexp2(s_a, s_b)
    return v_a * torch.exp2(s_a - s)[..., None] + v_b * torch.exp2(s_b - s)[..., None], s


def make_backend(monkeypatch, unit_size: int = 64, *, real: bool = False, device: str = "cpu",
                 dtype: torch.dtype = torch.float32, shape: tuple = (H, HK, D)):
    """``(backend, allocator)``: the PASK FlashInfer backend over a pool of 64 full ids and
    ``unit_size`` slots per unit (units :data:`UNITS`), 4 request rows of 32 tokens, flashinfer
    replaced by the stand-in wrappers -- or, with ``real``, FlashInfer's own (a CUDA ``device``, a
    128 MB workspace). ``shape``: (query heads, KV heads, head_dim)."""
    from sglang.srt import runtime_context
    from sglang_pask.srt.mem_cache.pools import PaskAllocator, PaskKVPool

    h, hk, d = shape
    if not real:
        fi = types.ModuleType("flashinfer")
        fi.BatchDecodeWithPagedKVCacheWrapper = Decode
        fi.BatchPrefillWithPagedKVCacheWrapper = Paged
        fi.BatchPrefillWithRaggedKVCacheWrapper = Ragged
        cascade = types.ModuleType("flashinfer.cascade")
        cascade.merge_state = _fake_merge_state
        monkeypatch.setitem(sys.modules, "flashinfer", fi)
        monkeypatch.setitem(sys.modules, "flashinfer.cascade", cascade)
    sgl_fi = types.ModuleType("sglang.srt.layers.attention.flashinfer_backend")  # skip its slow import
    sgl_fi.should_use_tensor_core = lambda **kwargs: False
    monkeypatch.setitem(sys.modules, sgl_fi.__name__, sgl_fi)
    monkeypatch.setattr(runtime_context, "get_parallel", lambda: NS(attn_tp_size=1, attn_dcp_size=1))
    workspace = torch.empty(128 << 20 if real else 8, dtype=torch.uint8, device=device)
    monkeypatch.setattr(runtime_context, "get_buffer", lambda name, factory: workspace)
    from sglang_pask.srt.attention.flashinfer_backend import PaskFlashInferAttnBackend

    pool = PaskKVPool(units=UNITS, full_size=64, unit_size=unit_size, dtype=dtype, head_num=hk, head_dim=d,
                      v_head_dim=None, device=device, num_layers=LAYERS)
    alloc = PaskAllocator(64, pool, device=device, dtype=dtype)
    cfg = NS(get_max_num_attention_heads=lambda: h, num_attention_heads=h, get_num_kv_heads=lambda tp, dcp=1: hk,
             head_dim=d, is_encoder_decoder=False, is_multimodal=False)
    r2t = NS(size=4, req_to_token=torch.zeros((4, 32), dtype=torch.int32, device=device))
    runner = NS(token_to_kv_pool=pool, req_to_token_pool=r2t, model_config=cfg, sliding_window_size=None,
                kv_index_translator=None, device=device, dtype=dtype, kv_cache_dtype=dtype)
    return PaskFlashInferAttnBackend(runner), alloc


def layer(i, shape: tuple = (H, HK, D)):
    h, hk, d = shape
    return NS(layer_id=i, tp_q_head_num=h, tp_k_head_num=hk, tp_v_head_num=hk, head_dim=d, v_head_dim=d,
              scaling=d ** -0.5, logit_cap=0.0, is_cross_attention=False, sliding_window_size=-1, attn_type=None,
              k_scale=None, v_scale=None, k_scale_float=None, v_scale_float=None)


def batch(mode, rows, prefix, ext, out_cache_loc):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    seq = [p + e for p, e in zip(prefix, ext)]
    dev = out_cache_loc.device  # the batch's tensors live where the pool does
    return NS(forward_mode=getattr(ForwardMode, mode), spec_info=None, encoder_lens=None, batch_size=len(rows),
              req_pool_indices=torch.tensor(rows, device=dev), seq_lens=torch.tensor(seq, device=dev),
              seq_lens_sum=sum(seq), extend_seq_lens=torch.tensor(ext, device=dev),
              extend_prefix_lens=torch.tensor(prefix, device=dev), extend_prefix_lens_cpu=prefix,
              out_cache_loc=out_cache_loc, out_cache_loc_is_physical=False)


def reference(pool, r2t, lay, q, rows, prefix, ext):
    """Per request: held keys of the layer's unit over the whole sequence (less what the row's
    segment view hides), causal by position; computed in float32 (SDPA), returned in ``q``'s dtype."""
    u = pool.unit_of[lay.layer_id]
    h, d = lay.tp_q_head_num, lay.head_dim
    kb, vb = pool.get_key_buffer(lay.layer_id).float(), pool.get_value_buffer(lay.layer_id).float()
    outs, start = [], 0
    for r, p, e in zip(rows, prefix, ext):
        slots, k_pos = held_slots(pool.mapping[u], r2t[r, :p + e], r, u)
        qi = q[start:start + e].float().view(e, h, d).movedim(0, 1)
        o = sparse_attention(qi, kb[slots].movedim(0, 1), vb[slots].movedim(0, 1),
                             torch.arange(p, p + e, device=q.device), k_pos, lay.scaling, True)
        outs.append(o.movedim(0, 1).reshape(e, h * d).to(q.dtype))
        start += e
    return torch.cat(outs)


def allocate(alloc, r2t, rows, prefix, ext) -> torch.Tensor:
    """Allocate the new tokens into their rows; returns their full ids (``out_cache_loc``)."""
    loc = alloc.alloc(sum(ext))
    start = 0
    for r, p, e in zip(rows, prefix, ext):
        r2t[r, p:p + e] = loc[start:start + e].to(torch.int32)
        start += e
    return loc


def plan(be, alloc, r2t, mode, rows, prefix, ext):
    """Allocate the new tokens into their rows and plan the forward (eager); returns its batch."""
    fb = batch(mode, rows, prefix, ext, allocate(alloc, r2t, rows, prefix, ext))
    be.init_forward_metadata(fb)
    return fb


def run(be, alloc, r2t, mode, rows, prefix, ext, g):
    """Allocate the new tokens, run every layer (eager), compare with the reference."""
    n = sum(ext)
    fb = plan(be, alloc, r2t, mode, rows, prefix, ext)
    for i in range(LAYERS):
        lay = layer(i)
        q = torch.randn(n, H * D, generator=g)
        k, v = torch.randn(n, HK, D, generator=g), torch.randn(n, HK, D, generator=g)
        fwd = be.forward_decode if mode == "DECODE" else be.forward_extend
        out = fwd(q, k, v, lay, fb)
        torch.testing.assert_close(out, reference(be.pool, r2t, lay, q, rows, prefix, ext), rtol=1e-4, atol=1e-4)
    return be.forward_metadata
