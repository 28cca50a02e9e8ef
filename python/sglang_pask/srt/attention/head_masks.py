"""Per-KV-head selections in the server: which of a request's held positions each KV head still
reads, after a method that selects per KV head compressed it (SnapKV and PyramidKV with
``per_head``, AdaKV, PASK whose residual scorer is ``per_head``: :attr:`~sglang_pask.methods.base.Selection.head_mask`).

A unit's pool slot holds every KV head's K and V, so a unit holds the union of its heads' sets;
each head reads only its own, as the reference runner's ``head_mask`` (``hf/cache.py``): query
head ``i`` reads KV head ``i // (heads / kv_heads)``. State per request-pool row and unit:
``(positions, mask)``, int64 ``[n]`` the logical positions the selection kept (sorted) and bool
``[kv_heads, n]`` which heads keep each. Positions written after the selection (decoded tokens)
are read by every head; positions dropped since are simply no longer held.

Invariants: a row's state belongs to the request in it -- a fresh prefill of the row (an extend
from position 0: a new request; selections run only after prefill, and per-head methods run
without the radix cache, so a new request never starts past 0) and the release of its KV clear it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from sglang_pask.srt.state import state


def masks() -> dict[int, dict[int, tuple[torch.Tensor, torch.Tensor]]]:
    """request-pool row -> unit -> (positions int64 [n], mask bool [kv_heads, n]): this scheduler's
    (:attr:`~..state.PaskState.head_masks`)."""
    return state().head_masks


def store(row: int, unit: int, positions: np.ndarray, mask: np.ndarray) -> None:
    """After a selection: unit ``unit`` of row ``row`` keeps ``positions`` (int64 sorted ``[n]``),
    head ``h`` those where ``mask[h]`` (bool ``[kv_heads, n]``). A mask that hides nothing clears
    the unit's state."""
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (mask.shape[0], len(positions)):
        raise ValueError(f"head mask of shape {mask.shape} for {len(positions)} kept positions")
    units = masks().setdefault(int(row), {})
    if mask.all():
        units.pop(int(unit), None)
    else:
        units[int(unit)] = (torch.from_numpy(np.asarray(positions, dtype=np.int64)), torch.from_numpy(mask))


def masked(rows) -> bool:
    """Whether any of ``rows`` has a head hiding a position."""
    held = masks()
    return any(held.get(int(r)) for r in rows)


def allow(row: int, unit: int, k_pos: torch.Tensor) -> Optional[torch.Tensor]:
    """bool ``[kv_heads, nk]``: which of the held positions ``k_pos`` (int64 sorted ``[nk]``)
    each KV head reads; None: every head reads every one."""
    entry = masks().get(int(row), {}).get(int(unit))
    if entry is None:
        return None
    pos, mask = entry
    k_pos = k_pos.to(pos.device, torch.int64)
    idx = torch.searchsorted(pos, k_pos).clamp_(max=max(len(pos) - 1, 0))
    found = pos[idx] == k_pos if len(pos) else torch.zeros_like(k_pos, dtype=torch.bool)
    out = torch.ones(mask.shape[0], len(k_pos), dtype=torch.bool)
    out[:, found] = mask[:, idx[found]]
    return out


def view_mask(row: int, unit: int, retained: np.ndarray) -> Optional[np.ndarray]:
    """bool ``[kv_heads, n]`` for :attr:`~sglang_pask.methods.base.CacheView.head_mask` (the
    positions ``retained`` each head still holds); None: every head holds them all."""
    a = allow(row, unit, torch.from_numpy(np.asarray(retained, dtype=np.int64)))
    return None if a is None else a.numpy()


def forget(row: Optional[int]) -> None:
    """The row's request is gone (released) or a new one starts in it."""
    if row is not None:
        masks().pop(int(row), None)
