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
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["top_n_mask", "take_slots", "decode_attention"]


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
