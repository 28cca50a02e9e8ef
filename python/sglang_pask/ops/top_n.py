"""``top_n_mask`` in torch on any device, O(T log T) per row: one stable sort of a composite key
over the padded rows (:func:`.reference.top_n_mask`'s contract, bit for bit: ``test_top_n.py``).

The key is an int64 whose signed order is the rank order of a position (larger ranks first):
a position not held is lowest, then a held NaN, then the held numbers by value (``-0.0`` equal to
``+0.0``; positions ``>= tail_start`` score ``+inf``). Ties go to the newer position: the row is
sorted reversed, and a stable sort keeps the reversed (newest-first) order among equal keys.
"""

from __future__ import annotations

import torch

__all__ = ["top_n_mask_torch", "order_keys"]

_LOW_BITS = (1 << 63) - 1  # the 63 bits below the sign
_NOT_HELD = -(1 << 63)  # int64 min
_NAN = _NOT_HELD + 1  # below every number: -inf's key is _NOT_HELD + 2**52 - 1


def order_keys(held: torch.Tensor, scores: torch.Tensor, tail_start: torch.Tensor) -> torch.Tensor:
    """int64 ``[R, T]``: each position's rank key (module docstring). ``held`` bool ``[R, T]``,
    ``scores`` float ``[R, T]`` (read as float64), ``tail_start`` int ``[R]``."""
    T = held.shape[-1]
    pos = torch.arange(T, device=held.device)
    s = torch.where(pos[None, :] >= tail_start.to(held.device, torch.int64)[:, None], torch.inf,
                    scores.to(held.device, torch.float64))
    s = torch.where(s == 0, 0.0, s)  # -0.0 -> +0.0
    bits = s.view(torch.int64)
    # IEEE doubles order as sign-magnitude integers: flipping a negative's 63 low bits makes the
    # signed int64 order the float order (-inf's key is int64 min + 2**52 - 1)
    key = torch.where(bits < 0, bits ^ _LOW_BITS, bits)
    key = torch.where(torch.isnan(s), torch.full_like(key, _NAN), key)
    return torch.where(held, key, torch.full_like(key, _NOT_HELD))


def top_n_mask_torch(held: torch.Tensor, scores: torch.Tensor, n: torch.Tensor,
                     tail_start: torch.Tensor) -> torch.Tensor:
    """bool ``[R, T]`` on ``held``'s device: per row the ``n[r]`` held positions of highest rank
    (:func:`.reference.top_n_mask`). ``held`` bool ``[R, T]``, ``scores`` float ``[R, T]``, ``n``
    and ``tail_start`` int ``[R]`` (moved to ``held``'s device)."""
    if held.dim() != 2 or scores.shape != held.shape or held.dtype != torch.bool:
        raise ValueError(f"top_n_mask: held must be bool [R, T] and scores the same shape, got "
                         f"{tuple(held.shape)} {held.dtype} and {tuple(scores.shape)}")
    R, T = held.shape
    if R == 0 or T == 0:
        return torch.zeros_like(held)
    key = order_keys(held, scores, tail_start).flip(-1)  # column j is position T - 1 - j
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices  # [R, T], best first
    rank_ok = torch.arange(T, device=held.device)[None, :] < n.to(held.device, torch.int64)[:, None]
    out = torch.zeros_like(held)
    out.scatter_(1, (T - 1) - order, rank_ok)
    return out & held
