"""The pure-torch / numpy reference of the compiled operators (csrc/): the fallback when the
extension is not built, and the oracle ``test_ops.py`` checks the compiled ones against.

Contracts (shapes as in :mod:`sglang_pask.methods.padded`):

* :func:`top_n_mask`: bool ``[R, T]`` -- per row what :func:`~sglang_pask.methods.scorer.top_n`
  keeps: every held position ``>= tail_start[r]`` ranks first (score +inf), then the held others
  by score descending; ties go to the more recent position; a NaN score ranks below every number;
  ``n[r]`` in all (all held when ``n[r]`` reaches the held count, none when ``n[r] <= 0``).
* :func:`take_slots`: int64 ``[M]`` -- a unit's held (``> 0``) slots of ``full_ids`` in their
  order, and those mapping entries set to 0 (a drop's lookup and mapping rewrite). ``full_ids``
  unique.
* :func:`decode_attention`: ``[B, H, Dv]`` -- one decode query per request over the KV rows
  ``slots[b, :counts[b]]`` of ``k_buf`` / ``v_buf``: ``softmax(scale q.k) v``, query head ``h``
  reading KV head ``h // (H / HK)`` (SDPA's ``enable_gqa``); ``1 <= counts[b] <= L``.

The torch versions of the Triton kernels (:mod:`.triton_kernels`):

* :func:`unit_indices`: per unit, FlashInfer's index stream of the batch's held slots, the
  accurate radix mode's views given as dense masks (:func:`dense_views`): what
  ``srt/attention/flashinfer_backend.build_unit_indices`` returns (it is this function over the
  segment views in force).
* :func:`learned_scores`: float32 ``[n, H]`` -- the learned scorer's predicted KVzip scores,
  ``exp(min(x @ W + b, 80))`` summed in float64 and rounded once
  (:meth:`sglang_pask.methods.learned.LearnedScorer.scores`, transposed).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

__all__ = ["top_n_mask", "take_slots", "decode_attention", "unit_indices", "dense_views", "learned_scores"]


def top_n_mask(held: np.ndarray, scores: np.ndarray, n: np.ndarray, tail_start: np.ndarray) -> np.ndarray:
    """See the module docstring. ``held`` bool ``[R, T]``, ``scores`` float ``[R, T]`` (ignored
    where not held), ``n`` / ``tail_start`` int ``[R]``."""
    R, T = held.shape
    pos = np.broadcast_to(np.arange(T, dtype=np.int64)[None, :], (R, T))
    s = np.where(pos >= np.asarray(tail_start)[:, None], np.inf, np.asarray(scores, dtype=np.float64))
    # primary: held first; then score desc (NaN last); then position desc (top_n's order among the held)
    order = np.lexsort((-pos, -s, ~held), axis=-1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(T)[None, :], (R, T)), axis=-1)
    return held & (rank < np.asarray(n, dtype=np.int64)[:, None])


def take_slots(mapping: torch.Tensor, unit: int, full_ids: torch.Tensor) -> torch.Tensor:
    """See the module docstring. ``mapping`` int64 ``[U, F]`` (changed in place)."""
    idx = full_ids.long()
    slots = mapping[unit, idx]
    held = slots > 0
    mapping[unit, idx[held]] = 0
    return slots[held]


def decode_attention(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                     counts: torch.Tensor, scale: float) -> torch.Tensor:
    """See the module docstring. ``q [B, H, D]``; ``k_buf [S, HK, D]``, ``v_buf [S, HK, Dv]``;
    ``slots`` int64 ``[B, L]``, ``counts`` int64 ``[B]``. Gathers the rows (index_select of the
    flat slots: several times faster than ``k_buf[slots]`` on CPU), then one SDPA call."""
    b, n = slots.shape
    flat = slots.reshape(-1)
    k = k_buf.index_select(0, flat).view(b, n, *k_buf.shape[1:]).movedim(1, 2).to(q.dtype)  # [B, HK, L, D]
    v = v_buf.index_select(0, flat).view(b, n, *v_buf.shape[1:]).movedim(1, 2).to(q.dtype)
    valid = torch.arange(n, device=slots.device)[None, :] < counts[:, None]  # [B, L]
    return torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, attn_mask=valid[:, None, None, :], enable_gqa=q.shape[1] != k_buf.shape[1],
        scale=scale).squeeze(2)


def unit_indices(mapping: torch.Tensor, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                 seq_lens: torch.Tensor, view_lens: Optional[torch.Tensor] = None,
                 view_keep: Optional[torch.Tensor] = None, *,
                 seq_lens_sum: Optional[int] = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``U`` pairs ``(kv_indptr int32 [bs + 1], kv_indices int32 [nnz_u])``: for unit ``u`` and
    request ``i`` (row ``r_i = req_pool_indices[i]``), the slots ``mapping[u, req_to_token[r_i,
    :seq_lens[i]]]`` that are ``> 0``, in position order, concatenated; a view hides position
    ``p < view_lens[i]`` where ``view_keep[u, i, p]`` is False (its slot reads 0). ``mapping`` int64
    ``[U, F]``, ``req_to_token`` int ``[P, M]``, ``req_pool_indices`` / ``seq_lens`` int ``[bs]``,
    ``view_lens`` int64 ``[bs]`` and ``view_keep`` bool ``[U, bs, W]`` (``W >= max(view_lens)``)
    or both None (:func:`dense_views` builds them); ``seq_lens_sum``: ``sum(seq_lens)`` when the caller
    knows it on the host (saves a sync). Results on ``mapping``'s device."""
    device = mapping.device
    U, bs = int(mapping.shape[0]), int(seq_lens.shape[0])
    lens = seq_lens.to(device, torch.int64)
    total = int(lens.sum()) if seq_lens_sum is None else int(seq_lens_sum)
    if bs == 0 or total == 0:
        return [(torch.zeros(bs + 1, dtype=torch.int32, device=device),
                 torch.zeros(0, dtype=torch.int32, device=device)) for _ in range(U)]
    rows = req_pool_indices.to(device, torch.int64)
    seg = torch.repeat_interleave(torch.arange(bs, device=device), lens, output_size=total)  # request of each token
    pos = torch.arange(total, device=device) - (torch.cumsum(lens, 0) - lens)[seg]  # its position
    full_ids = req_to_token[rows[seg], pos].to(torch.int64)
    out = []
    for u in range(U):
        slots = mapping[u].index_select(0, full_ids)
        if view_lens is not None and view_keep.shape[2] > 0:
            inside = pos < view_lens.to(device)[seg]
            hidden = inside & ~view_keep[u].to(device)[seg, pos.clamp(max=view_keep.shape[2] - 1)]
            slots = torch.where(hidden, torch.zeros_like(slots), slots)
        held = slots > 0
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=device)
        kv_indptr[1:] = torch.cumsum(torch.zeros(bs, dtype=torch.int64, device=device).index_add_(
            0, seg, held.to(torch.int64)), 0)
        out.append((kv_indptr, slots[held].to(torch.int32)))
    return out

def dense_views(views: dict, rows: torch.Tensor, num_units: int) -> tuple[Optional[torch.Tensor], ...]:
    """The accurate radix mode's views as the kernels read them: ``views`` maps a request-pool row
    to ``(rid, S, masks)`` (``srt/mem_cache/segment_views.views()``: ``masks[u]`` bool ``[S]``, True
    where unit ``u`` keeps the segment position). Returns ``(view_lens int64 [bs], view_keep bool
    [U, bs, max S])`` on the masks' device for the batch's ``rows`` (``[bs]``; S = 0 for a row without
    a view), or ``(None, None)`` when none of them has one."""
    hits = [(i, views[r]) for i, r in enumerate(rows.tolist()) if r in views]
    if not hits:
        return None, None
    device = hits[0][1][2][0].device
    width = max(int(s) for _, (_, s, _) in hits)
    view_lens = torch.zeros(len(rows), dtype=torch.int64, device=device)
    view_keep = torch.ones((num_units, len(rows), width), dtype=torch.bool, device=device)
    for i, (_, s, masks) in hits:
        view_lens[i] = int(s)
        for u in range(num_units):
            view_keep[u, i, :int(s)] = masks[u][:int(s)]
    return view_lens, view_keep


def learned_scores(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """See the module docstring. ``x [n, D]`` (any float dtype, read as float32 as the server
    does), ``weight`` ``[D, H]``, ``bias`` ``[H]``."""
    y = x.float().double() @ weight.to(x.device, torch.float64) + bias.to(x.device, torch.float64)
    return torch.exp(torch.clamp(y, max=80.0)).float()
