"""Triton kernels for two fused steps of the GPU path, each with the contract of the torch code it
would replace; the torch versions in :mod:`.reference` are the oracles ``test_triton_kernels.py``
checks them against (under Triton's interpreter on CPU, compiled on CUDA).

* :func:`unit_indices_into` / :func:`unit_indices`: FlashInfer's per-unit index streams
  (``srt/attention/flashinfer_backend.build_unit_indices``, the accurate radix mode's views folded
  in as dense masks: :func:`.reference.dense_views`). Two launches over a ``(requests, units)`` grid -- count
  each request's held slots, then write them at the prefix sums -- and one ``cumsum`` between, so
  no host sync and fixed-capacity outputs (what a CUDA graph replays), where the torch code builds
  one flat stream and compacts it per unit with a boolean index (a sync per unit).
* :func:`learned_scores_into`: the learned scorer's projection (``x @ W[l] + b[l]``), ``exp``
  and per-head store in one pass: each token's ``kv_heads`` scores go straight into the score table
  at its full id (``srt/attention/learned_scores.py`` copies the hidden states to the host, scores
  them in numpy and scatters them back). Summed in float64 in a fixed order per row, rounded once
  to float32, so row-stable as :meth:`~sglang_pask.methods.learned.LearnedScorer.scores`.

Modes. On CUDA tensors a kernel runs compiled; under ``TRITON_INTERPRET=1`` it runs in Triton's
interpreter (numpy underneath, tensors of any device: the CPU tests). Triton 3.7.1 picks the mode
when ``triton.jit`` wraps a function (it reads ``triton.knobs.runtime.interpret`` then): these
kernels are wrapped on first use, once per mode (:func:`_kernels`), but ``triton.language``'s own
helpers (``tl.sum``, ``tl.cumsum``) when triton is first imported -- so an interpreted run needs
the variable set before anything imports triton (SGLang does), and the tests start a child process
for it. :func:`unit_indices` and :func:`learned_scores_into` run the torch reference where no
kernel can run (no triton; CPU tensors without the interpreter).
UNTESTED on a GPU: only the interpreter has run these kernels; ``make csrc-check`` compiles each
variant the wrappers launch to an sm_90 cubin (``bench/triton_compile_check.py``), which runs nothing.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from sglang_pask.ops import reference

try:  # optional: without triton the wrappers run the torch reference
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton ships with CUDA torch and in this repository's venv
    triton = tl = None

__all__ = ["available", "runs_triton", "unit_indices", "unit_indices_into", "learned_scores_into"]

_BLOCK_POS = 128  # positions per step of the index kernels
_SCORER_BLOCKS = (16, 64)  # (tokens, hidden features) per step of the scorer kernel


def available() -> bool:
    """Whether triton is importable."""
    return triton is not None


def runs_triton(device: torch.device) -> bool:
    """Whether a kernel can run on tensors of ``device``: compiled on CUDA, or interpreted."""
    return triton is not None and (device.type == "cuda" or bool(triton.knobs.runtime.interpret))


# -- kernels (plain functions, wrapped by triton.jit in _jit; the annotations stay strings) -------
def _held_count(mapping, r2t, rows, lens, view_lens, view_keep, counts, bs, stride_map, stride_r2t,
                stride_vu, stride_vb, HAS_VIEWS: tl.constexpr, BLOCK: tl.constexpr):
    """counts[u, i] = how many of request i's first lens[i] positions unit u holds (a view's
    hidden segment positions not held)."""
    i = tl.program_id(0)
    u = tl.program_id(1).to(tl.int64)
    row = tl.load(rows + i).to(tl.int64)
    n = tl.load(lens + i).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(0, n, BLOCK):
        pos = start + tl.arange(0, BLOCK)
        inb = pos < n
        fid = tl.load(r2t + row * stride_r2t + pos, mask=inb, other=0).to(tl.int64)
        slot = tl.load(mapping + u * stride_map + fid, mask=inb, other=0)
        if HAS_VIEWS:
            seg = inb & (pos < tl.load(view_lens + i))
            keep = tl.load(view_keep + u * stride_vu + i * stride_vb + pos, mask=seg, other=1)
            slot = tl.where(seg & (keep == 0), 0, slot)
        acc += (slot > 0).to(tl.int32)
    tl.store(counts + u * bs + i, tl.sum(acc, axis=0))


def _held_write(mapping, r2t, rows, lens, view_lens, view_keep, kv_indptr, kv_indices, stride_map, stride_r2t,
                stride_vu, stride_vb, stride_ptr, stride_idx, HAS_VIEWS: tl.constexpr, BLOCK: tl.constexpr):
    """kv_indices[u, kv_indptr[u, i] + k] = the k-th held slot of request i in unit u (logical order)."""
    i = tl.program_id(0)
    u = tl.program_id(1).to(tl.int64)
    row = tl.load(rows + i).to(tl.int64)
    n = tl.load(lens + i).to(tl.int64)
    base = tl.load(kv_indptr + u * stride_ptr + i).to(tl.int64)
    for start in range(0, n, BLOCK):
        pos = start + tl.arange(0, BLOCK)
        inb = pos < n
        fid = tl.load(r2t + row * stride_r2t + pos, mask=inb, other=0).to(tl.int64)
        slot = tl.load(mapping + u * stride_map + fid, mask=inb, other=0)
        if HAS_VIEWS:
            seg = inb & (pos < tl.load(view_lens + i))
            keep = tl.load(view_keep + u * stride_vu + i * stride_vb + pos, mask=seg, other=1)
            slot = tl.where(seg & (keep == 0), 0, slot)
        held = slot > 0
        rank = tl.cumsum(held.to(tl.int64), axis=0) - 1  # place among this step's held slots
        tl.store(kv_indices + u * stride_idx + base + rank, slot.to(tl.int32), mask=held)
        base += tl.sum(held.to(tl.int64), axis=0)


def _learned_scores(x, w, b, loc, out, n, D, H, stride_x, stride_out, HAS_LOC: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr):
    """out[loc[j], h] = exp(min(x[j] . w[:, h] + b[h], 80)) for tokens j of this block, in float64."""
    tok = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    tmask = tok < n
    hs = tl.arange(0, BLOCK_H)
    hmask = hs < H
    acc = tl.zeros([BLOCK_N, BLOCK_H], dtype=tl.float64)
    for d0 in range(0, D, BLOCK_D):
        ds = d0 + tl.arange(0, BLOCK_D)
        dmask = ds < D
        xt = tl.load(x + tok[:, None].to(tl.int64) * stride_x + ds[None, :], mask=tmask[:, None] & dmask[None, :],
                     other=0.0).to(tl.float32).to(tl.float64)
        wt = tl.load(w + ds[:, None] * H + hs[None, :], mask=dmask[:, None] & hmask[None, :], other=0.0)
        acc += tl.sum(xt[:, :, None] * wt.to(tl.float64)[None, :, :], axis=1)  # one order per row
    y = acc + tl.load(b + hs, mask=hmask, other=0.0).to(tl.float64)[None, :]
    y = tl.exp(tl.minimum(y, 80.0))
    dest = tl.load(loc + tok, mask=tmask, other=0).to(tl.int64) if HAS_LOC else tok.to(tl.int64)
    tl.store(out + dest[:, None] * stride_out + hs[None, :], y.to(tl.float32), mask=tmask[:, None] & hmask[None, :])


@functools.lru_cache(maxsize=None)
def _jit(interpret: bool) -> dict:
    """The kernels wrapped by ``triton.jit`` in one mode: ``interpret`` is the mode Triton reads
    while wrapping (the cache key keeps the two apart)."""
    return {fn.__name__: triton.jit(fn) for fn in (_held_count, _held_write, _learned_scores)}


def _kernels() -> dict:
    return _jit(bool(triton.knobs.runtime.interpret))


# -- index streams --------------------------------------------------------------------------------


def unit_indices_into(mapping: torch.Tensor, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                      seq_lens: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                      view_lens: Optional[torch.Tensor] = None, view_keep: Optional[torch.Tensor] = None) -> None:
    """Every unit's index stream written into fixed buffers, with no host sync (Triton).

    ``mapping`` int64 ``[U, F]``, ``req_to_token`` int ``[P, M]``, ``req_pool_indices`` int ``[bs]``,
    ``seq_lens`` int ``[bs]``, optional ``view_lens`` / ``view_keep`` (:func:`.reference.dense_views`), as
    :func:`.reference.unit_indices`. Writes ``kv_indptr`` int32 ``[U, bs + 1]`` (row ``u`` is unit
    ``u``'s ``kv_indptr``) and ``kv_indices[u, :kv_indptr[u, bs]]`` (int32 ``[U, C]``, ``C`` at least
    the largest unit's count: ``sum(seq_lens)`` always is); entries past that are left as they were.
    Both buffers contiguous in the last dim, on ``mapping``'s device."""
    if not runs_triton(mapping.device):
        raise RuntimeError(f"unit_indices_into: no Triton kernel runs on {mapping.device} (triton "
                           f"{'present' if available() else 'missing'}; CPU tensors need TRITON_INTERPRET=1)")
    U, bs = int(mapping.shape[0]), int(req_pool_indices.shape[0])
    if kv_indptr.shape != (U, bs + 1) or kv_indptr.dtype != torch.int32 or kv_indices.dim() != 2 \
            or kv_indices.shape[0] != U or kv_indices.dtype != torch.int32:
        raise ValueError(f"unit_indices_into: kv_indptr must be int32 [{U}, {bs + 1}] and kv_indices int32 "
                         f"[{U}, C], got {tuple(kv_indptr.shape)} {kv_indptr.dtype}, "
                         f"{tuple(kv_indices.shape)} {kv_indices.dtype}")
    kv_indptr[:, 0] = 0
    if bs == 0:
        return
    k = _kernels()
    has_views = view_lens is not None
    vl = view_lens if has_views else seq_lens  # placeholders: never read without views
    vk = view_keep.to(torch.uint8) if has_views else kv_indptr
    stride_vu, stride_vb = (vk.stride(0), vk.stride(1)) if has_views else (0, 0)
    counts = torch.empty((U, bs), dtype=torch.int32, device=mapping.device)
    common = (mapping, req_to_token, req_pool_indices, seq_lens, vl, vk)
    k["_held_count"][(bs, U)](*common, counts, bs, mapping.stride(0), req_to_token.stride(0), stride_vu, stride_vb,
                              HAS_VIEWS=has_views, BLOCK=_BLOCK_POS)
    kv_indptr[:, 1:] = torch.cumsum(counts, dim=1)
    k["_held_write"][(bs, U)](*common, kv_indptr, kv_indices, mapping.stride(0), req_to_token.stride(0), stride_vu,
                              stride_vb, kv_indptr.stride(0), kv_indices.stride(0), HAS_VIEWS=has_views,
                              BLOCK=_BLOCK_POS)


def unit_indices(mapping: torch.Tensor, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                 seq_lens: torch.Tensor, *, seq_lens_sum: Optional[int] = None,
                 view_lens: Optional[torch.Tensor] = None,
                 view_keep: Optional[torch.Tensor] = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``U`` pairs ``(kv_indptr int32 [bs + 1], kv_indices int32 [nnz_u])``: exactly
    ``build_unit_indices``' result (:func:`.reference.unit_indices`), through :func:`unit_indices_into`
    where a kernel runs (one host sync in all, for the counts), else the torch reference."""
    if not runs_triton(mapping.device):
        return reference.unit_indices(mapping, req_to_token, req_pool_indices, seq_lens, view_lens, view_keep)
    device = mapping.device
    U, bs = int(mapping.shape[0]), int(seq_lens.shape[0])
    total = int(seq_lens.sum()) if seq_lens_sum is None else int(seq_lens_sum)
    kv_indptr = torch.zeros((U, bs + 1), dtype=torch.int32, device=device)
    kv_indices = torch.empty((U, total), dtype=torch.int32, device=device)
    if bs and total:
        unit_indices_into(mapping, req_to_token, req_pool_indices.to(device), seq_lens.to(device), kv_indptr,
                          kv_indices, view_lens, view_keep)
    nnz = kv_indptr[:, -1].tolist()
    return [(kv_indptr[u], kv_indices[u, :nnz[u]]) for u in range(U)]


# -- the learned scorer -----------------------------------------------------------------------------
def learned_scores_into(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor,
                        loc: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Store the predicted KVzip scores of hidden states ``x`` ``[n, D]`` (any float dtype) per
    KV head: ``out[loc[j], h] = exp(min(x[j] @ weight[:, h] + bias[h], 80))`` (float64 sums,
    rounded once: :func:`.reference.learned_scores`). ``weight`` float32 ``[D, H]``, ``bias``
    float32 ``[H]``, ``out`` float32 ``[F, H]`` (a layer of the score table; rows not in ``loc``
    are left as they were), ``loc`` int ``[n]`` full ids (None: rows ``0..n-1``). Returns ``out``.
    Triton where a kernel runs, else the torch reference."""
    n, D = x.shape
    H = int(weight.shape[1])
    if weight.shape != (D, H) or bias.shape != (H,) or out.dim() != 2 or out.shape[1] != H \
            or out.dtype != torch.float32 or (loc is not None and loc.shape != (n,)):
        raise ValueError(f"learned_scores_into: x [n, D], weight [D, H], bias [H], out float32 [F, H], loc [n]; "
                         f"got {tuple(x.shape)}, {tuple(weight.shape)}, {tuple(bias.shape)}, "
                         f"{tuple(out.shape)} {out.dtype}, {None if loc is None else tuple(loc.shape)}")
    if not runs_triton(x.device):
        rows = torch.arange(n, device=out.device) if loc is None else loc.to(out.device, torch.int64)
        out[rows] = reference.learned_scores(x, weight, bias).to(out.device)
        return out
    if n == 0:
        return out
    x = x if x.stride(1) == 1 else x.contiguous()
    block_n, block_d = _SCORER_BLOCKS
    _kernels()["_learned_scores"][(triton.cdiv(n, block_n),)](
        x, weight.contiguous().float(), bias.contiguous().float(), x if loc is None else loc, out, n, D, H,
        x.stride(0), out.stride(0), HAS_LOC=loc is not None, BLOCK_N=block_n, BLOCK_D=block_d,
        BLOCK_H=triton.next_power_of_2(H))
    return out
