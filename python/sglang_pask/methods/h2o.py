"""H2O: heavy hitters (largest accumulated attention) plus recent tokens."""

from __future__ import annotations

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.scorer import KEEP, ScorerMethod, recency


class H2O(ScorerMethod):
    """Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large
    Language Models" (arXiv:2306.14048). Rule: a token's importance is the attention it has
    accumulated, summed over all queries so far; the cache keeps the ``recent_ratio`` share of
    its budget as the most recent tokens and fills the rest with the highest-accumulated
    ("heavy-hitter") tokens. The paper's balanced setting splits the budget half and half.

    Needs ``attention.accumulated`` (per retained position, summed over heads and queries). One
    kept set per layer: all KV heads of a layer share it (the paper evicts per head)."""

    name = "h2o"
    needs_attention = "accumulated"

    def __init__(self, budget: float, recent_ratio: float = 0.5, **kwargs):
        super().__init__(budget, **kwargs)
        if not 0.0 <= recent_ratio <= 1.0:
            raise ValueError(f"recent_ratio must be in [0, 1], got {recent_ratio}")
        self.recent_ratio = float(recent_ratio)

    def score(self, view: CacheView, layer: int, n: int, stats) -> np.ndarray:
        held = view.retained[layer]
        recent = int(round(self.recent_ratio * n))
        is_recent = np.arange(held.size) >= held.size - recent
        # heavy hitters by accumulated mass (exact ties: the more recent, in top_n)
        return np.where(is_recent, KEEP + recency(held), stats[layer])
