"""H2O: heavy hitters (largest accumulated attention) plus recent tokens."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.scorer import KEEP, ScorerMethod, recency


@dataclass(frozen=True)
class H2O(ScorerMethod):
    """Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large
    Language Models" (arXiv:2306.14048; code: github.com/FMInference/H2O). Rule: a token's
    importance is the attention it has accumulated, summed over all queries so far; the cache
    keeps the ``recent_ratio`` share of its budget as the most recent tokens and fills the rest
    with the highest-accumulated ("heavy-hitter") tokens. The paper's balanced setting splits the
    budget half and half (``recent_ratio=0.5``, the default).

    ``normalize=True``: kvpress's form (8bb29b9 ``ObservedAttentionPress``): the accumulated
    attention of position ``p`` is divided by the number of queries that could see it,
    ``seq_len - p`` (queries ``p .. seq_len-1``; a retained position was held all along), so
    early tokens are not favoured merely for having been seen more often. kvpress scores only
    (no recent share): ``normalize=True, recent_ratio=0.0`` is that press exactly.

    Needs ``attention.accumulated`` (per retained position, summed over heads and queries). One
    kept set per layer: all KV heads of a layer share it (the paper evicts per head)."""

    name = "h2o"
    needs_attention = "accumulated"

    recent_ratio: float = 0.5
    normalize: bool = False

    def __post_init__(self):
        super().__post_init__()
        self._set("recent_ratio", float(self.recent_ratio))
        self._check("recent_ratio", 0.0 <= self.recent_ratio <= 1.0, "must be in [0, 1]")
        self._check("normalize", isinstance(self.normalize, (bool, np.bool_)), "must be a bool")

    def score(self, view: CacheView, layer: int, n: int, stats) -> np.ndarray:
        held = view.retained[layer]
        recent = int(round(self.recent_ratio * n))
        is_recent = np.arange(held.size) >= held.size - recent
        heavy = stats[layer] / (view.seq_len - held) if self.normalize else stats[layer]
        # heavy hitters by (normalised) accumulated mass (exact ties: the more recent, in top_n)
        return np.where(is_recent, KEEP + recency(held), heavy)
