"""Views of a whole shared segment: the accurate radix mode's hits (issue 25).

With ``--pask-segment-prefill full`` and the radix cache on, the tree keeps a segment's (a tools
block's) full KV once, uncut, stamped ``<stamp>/full`` (:mod:`.radix_tags`), and a request that
matches it reuses it: a real radix hit, no recompute. The request prefills its own tokens
against the whole segment -- exactly what the reference runner's ``segment_prefill="full"``
computes -- and from then on reads, per unit, only the segment positions the rule keeps
(:func:`sglang_pask.methods.segment.segment_kept`, deterministic per segment) plus its own
tokens: its **view**. Nothing is freed for it; the shared slots stay whole for the next hit.

:func:`views` (the scheduler's :attr:`~..state.PaskState.views`) maps a request-pool row to
``(rid, S, masks)``: ``masks[u]`` bool ``[S]``, True where unit ``u`` keeps the position. Set once
the request's prompt is written and published (:func:`set_view`, from
:meth:`.radix_cache.PaskRadixCache.checkpoint`), cleared when its KV is released. Readers: the
attention backends (:func:`hide_`: a hidden position's slot reads as 0, not held), and the
compression's kept log (:func:`visible`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from sglang_pask.srt.state import state


def views() -> dict[int, tuple[str, int, list[torch.Tensor]]]:
    """request-pool row -> (rid, segment end S, per unit bool [S] masks): this scheduler's
    (:attr:`~..state.PaskState.views`)."""
    return state().views


def held_slots(mapping_u: torch.Tensor, full_ids: torch.Tensor, row: Optional[int] = None,
               unit: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(slots, positions)`` of the tokens a unit holds among ``full_ids`` (logical order).
    ``mapping_u``: int64 ``[full_size + 2]``; ``full_ids``: ``[seq_len]``. With ``row`` (the
    request-pool row) the segment positions its view hides (:func:`views`) are not held."""
    slots = mapping_u[full_ids.long()]
    if row is not None:
        slots = hide_(slots, row, unit)
    positions = torch.nonzero(slots > 0, as_tuple=False).flatten()
    return slots[positions], positions


def set_view(req, kept_units, demoted: bool = False, device="cpu") -> bool:
    """Give ``req`` (its prompt written, not finished) the view of its segment: ``kept_units``
    per unit, the sorted segment positions kept (:func:`..managers.segments.segment_kept_units`);
    ``demoted``: the block it read was already demoted (counted); ``device``: the pools' (the
    masks live there, so the attention backends read them without a copy). True if set."""
    from sglang_pask.srt.managers.request_tags import tags_of

    row = req.kv.req_pool_idx
    s = int(tags_of(req).segment_end)
    st = state()
    if row is None or s <= 0 or req.finished() or int(row) in st.views:
        return False
    masks = []
    for kept in kept_units:
        m = torch.zeros(s, dtype=torch.bool, device=device)
        m[torch.from_numpy(np.asarray(kept, dtype=np.int64)).to(device)] = True
        masks.append(m)
    st.views[int(row)] = (req.rid, s, masks)
    st.views_made["views"] += 1
    st.views_made["views_on_demoted"] += int(demoted)
    if demoted:
        st.demoted_rids.append(req.rid)
    return True


def clear(row) -> None:
    if row is not None:
        views().pop(int(row), None)


def hide_(slots: torch.Tensor, rows, unit: int) -> torch.Tensor:
    """Zero, in place, the slots of hidden segment positions: ``slots`` int64 ``[B, W]`` (row
    ``i`` = request-pool row ``rows[i]``, columns = logical positions from 0) or ``[W]`` with one
    row. Returns ``slots``."""
    held = views()
    if not held:
        return slots
    two_d = slots.dim() == 2
    for i, row in enumerate(rows if two_d else [rows]):
        view = held.get(int(row))
        if view is None:
            continue
        _, s, masks = view
        n = min(s, slots.shape[-1])
        target = slots[i] if two_d else slots
        target[:n].masked_fill_(~masks[unit][:n], 0)
    return slots


def visible(row, unit: int, positions: np.ndarray) -> np.ndarray:
    """``positions`` (int64, sorted) less the hidden segment positions of ``row`` in ``unit``."""
    view: Optional[tuple] = views().get(int(row)) if row is not None else None
    if view is None:
        return positions
    _, s, masks = view
    m = masks[unit].cpu().numpy()
    inside = positions < s
    keep = np.ones(positions.size, dtype=bool)
    keep[inside] = m[positions[inside]]
    return positions[keep]

