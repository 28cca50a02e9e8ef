"""Score-then-top-k, the shape most methods share (kvpress's ScorerPress, written afresh).

A :class:`ScorerMethod` subclass implements :meth:`~ScorerMethod.score` only: one float per
retained position of a layer, higher = keep. :meth:`~ScorerMethod.select` keeps, per layer,
the current step's tokens and then the ``allocation[layer] - tail`` best-scored others; ties go
to the more recent position, so selections are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from sglang_pask.methods.base import CacheView, KVMethod, Selection

#: Scores at or above this are "always keep" tiers (sinks, windows); tails rank above everything.
KEEP = 1e30


def top_n(held: np.ndarray, scores: np.ndarray, n: int, tail_start: int) -> np.ndarray:
    """Sorted positions: every ``held >= tail_start``, then the best-``scores`` others, ``n`` in
    all (``held``: int64 ``[m]`` sorted; ``scores``: float ``[m]``). Ties: more recent first."""
    if n >= held.size:
        return held.copy()
    s = np.where(held >= tail_start, np.inf, np.asarray(scores, dtype=np.float64))
    order = np.lexsort((-held, -s))  # primary: score desc; then position desc
    return np.sort(held[order[:n]])


def recency(held: np.ndarray) -> np.ndarray:
    """A score in [0, 1) that grows with position (tie-breaker / recent-first filler)."""
    return held / (held[-1] + 1.0) if held.size else held.astype(np.float64)


def max_pool(x: np.ndarray, kernel: int) -> np.ndarray:
    """1-D max pooling, stride 1, 'same' size (edges see a truncated window)."""
    if kernel <= 1 or x.size == 0:
        return x.copy()
    h = kernel // 2
    padded = np.concatenate([np.full(h, -np.inf), x, np.full(kernel - 1 - h, -np.inf)])
    return np.lib.stride_tricks.sliding_window_view(padded, kernel).max(axis=1)


def avg_pool(x: np.ndarray, kernel: int) -> np.ndarray:
    """1-D average pooling, stride 1, 'same' size (edges average the entries that exist)."""
    if kernel <= 1 or x.size == 0:
        return x.copy()
    h = kernel // 2
    c = np.concatenate([[0.0], np.cumsum(x)])
    i = np.arange(x.size)
    lo, hi = np.maximum(i - h, 0), np.minimum(i + kernel - h, x.size)
    return (c[hi] - c[lo]) / (hi - lo)


def per_head_select(name: str, view: CacheView, alloc: np.ndarray, stats: list[np.ndarray], votes) -> Selection:
    """One kept set per KV head, each the layer's allocation: per layer and head ``h``, the top
    ``alloc[layer]`` of the positions the head holds by ``votes(held_h, stats_h)`` (float
    ``[m]`` for int64 sorted positions ``held_h`` ``[m]`` and that head's statistics ``[m]``);
    ``kept`` is the union and :attr:`Selection.head_mask` says which head keeps what.
    ``stats[layer]``: float ``[kv_heads, n_l]`` aligned with ``view.retained[layer]``."""
    per_layer = []
    for layer, held in enumerate(view.retained):
        heads = view.head_held(layer, stats[layer].shape[0])  # [H, n_l]
        n = int(alloc[layer])
        per = []
        for h, own in enumerate(heads):
            pos = held[own]
            per.append(pos.copy() if n >= pos.size else
                       top_n(pos, votes(pos, stats[layer][h][own]), n, view.tail_start))
        per_layer.append(per)
    return union_selection(name, alloc, per_layer)


def adaptive_split(view: CacheView, pos: list[np.ndarray], votes: list[np.ndarray], n: int,
                   safe_n: int) -> list[np.ndarray]:
    """Head-wise budgets (AdaKV, KVzip): per head, sorted kept positions, ``H * n`` in all. Head
    ``h`` (holding int64 sorted ``pos[h]`` with scores ``votes[h]``) first keeps its own best
    ``max(safe_n, tail)`` (the current step always); the other head-slots go to the best scores
    over every head's remaining positions (ties: the more recent position, then the lower head)."""
    H = len(pos)
    safe = [top_n(p, v, min(max(safe_n, view.protected_tail), p.size), view.tail_start)
            for p, v in zip(pos, votes)]
    left = H * n - sum(s.size for s in safe)
    rest = [~np.isin(p, s) for p, s in zip(pos, safe)]
    cand_pos = np.concatenate([p[r] for p, r in zip(pos, rest)])
    cand_votes = np.concatenate([np.asarray(v, dtype=np.float64)[r] for v, r in zip(votes, rest)])
    cand_head = np.concatenate([np.full(int(r.sum()), h) for h, r in enumerate(rest)])
    order = np.lexsort((cand_head, -cand_pos, -cand_votes))[:max(left, 0)]  # score, recency, head
    return [np.sort(np.concatenate([s, cand_pos[order][cand_head[order] == h]])) for h, s in enumerate(safe)]


def union_selection(name: str, alloc: np.ndarray, per_layer: list[list[np.ndarray]]) -> Selection:
    """A per-head :class:`Selection` from per layer, per head sorted kept positions."""
    kept, masks = [], []
    for per in per_layer:
        union = np.unique(np.concatenate(per)).astype(np.int64)
        kept.append(union)
        masks.append(np.stack([np.isin(union, p) for p in per]))
    return Selection(kept, {"method": name, "allocation": alloc.tolist()}, head_mask=masks)


@dataclass(frozen=True)
class ScorerMethod(KVMethod):
    """A method defined by a per-position score; see the module docstring."""

    def score(self, view: CacheView, layer: int, n: int, stats: Optional[list[np.ndarray]]) -> np.ndarray:
        """float ``[len(view.retained[layer])]``: higher = keep. ``n``: the layer's allocation
        (some rules reserve part of it, e.g. H2O's recent half); ``stats``: the checked
        ``view.attention.<needs_attention>`` (float64 per layer, aligned with ``retained``), or
        None when the method needs none."""
        raise NotImplementedError

    def attention_stats(self, view: CacheView) -> Optional[list[np.ndarray]]:
        """The statistics :attr:`needs_attention` names, checked (ValueError if missing)."""
        if self.needs_attention is None:
            return None
        if view.attention is None:
            raise ValueError(f"{self.name} needs attention.{self.needs_attention}, "
                             "but the view has no attention stats")
        return view.attention.get(self.needs_attention, view)

    def select(self, view: CacheView) -> Selection:
        alloc = self.allocation(view)
        stats = self.attention_stats(view)
        kept = []
        for layer, held in enumerate(view.retained):
            n = int(alloc[layer])
            if n >= held.size:
                kept.append(held.copy())
            else:
                kept.append(top_n(held, self.score(view, layer, n, stats), n, view.tail_start))
        return Selection(kept, {"method": self.name, "allocation": alloc.tolist()})
