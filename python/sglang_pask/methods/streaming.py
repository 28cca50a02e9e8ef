"""StreamingLLM: attention sinks plus a window of the most recent tokens."""

from __future__ import annotations

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.scorer import KEEP, ScorerMethod, recency


class Streaming(ScorerMethod):
    """Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks"
    (arXiv:2309.17453). Rule: keep the first ``sinks`` tokens (the attention sinks: initial
    tokens that absorb attention mass whatever their content) and a rolling window of the most
    recent tokens; the window is whatever the layer's allocation leaves after the sinks."""

    name = "streaming"

    def score(self, view: CacheView, layer: int, n: int, stats) -> np.ndarray:
        held = view.retained[layer]
        return np.where(held < self.sinks, KEEP, 0.0) + recency(held)
