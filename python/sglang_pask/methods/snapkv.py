"""SnapKV: the observation window votes for prefix positions; pooled; top-k plus the window."""

from __future__ import annotations

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.scorer import KEEP, ScorerMethod, avg_pool, max_pool, recency


class SnapKV(ScorerMethod):
    """Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation"
    (arXiv:2404.14469). Rule: the last ``w`` queries (the observation window) vote for earlier
    positions with the attention they pay them, summed over the window; a 1-D pooling of the
    votes (``kernel_size``, stride 1) keeps the neighbours of an important token with it
    (clustering); the cache keeps the top-voted positions plus the whole observation window.

    Needs ``attention.window`` (per retained position, summed over heads and the window's
    queries) and ``attention.window_size`` = ``w`` (the engine records the last
    :attr:`window_size` queries; constructor ``window``, default 16). Pooling runs over the layer's retained
    positions in order (after an earlier compression, neighbours in the cache). One kept set per
    layer (the paper selects per head)."""

    name = "snapkv"
    needs_attention = "window"

    def __init__(self, budget: float, kernel_size: int = 7, pooling: str = "max", **kwargs):
        super().__init__(budget, **kwargs)
        if kernel_size < 1 or pooling not in ("max", "avg"):
            raise ValueError(f"need kernel_size >= 1 and pooling in (max, avg); got {kernel_size}, {pooling!r}")
        self.kernel_size = int(kernel_size)
        self.pooling = pooling

    @property
    def window_size(self) -> int:
        """How many of the latest queries the engine should record (``window``, default 16)."""
        return self.window

    def score(self, view: CacheView, layer: int, n: int, stats) -> np.ndarray:
        held = view.retained[layer]
        pool = max_pool if self.pooling == "max" else avg_pool
        votes = pool(stats[layer], self.kernel_size)
        observed = held >= view.seq_len - view.attention.window_size
        return np.where(observed, KEEP + recency(held), votes)
