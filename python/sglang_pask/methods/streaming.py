"""StreamingLLM: attention sinks plus a window of the most recent tokens."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.scorer import KEEP, ScorerMethod, recency


@dataclass(frozen=True)
class Streaming(ScorerMethod):
    """Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks"
    (arXiv:2309.17453; code: github.com/mit-han-lab/streaming-llm; kvpress 8bb29b9
    ``StreamingLLMPress``, ``n_sink=4``). Rule: keep the first ``sinks`` tokens (the attention
    sinks: initial tokens that absorb attention mass whatever their content; the paper's and
    kvpress's default is 4) and a rolling window of the most recent tokens; the window is
    whatever the layer's allocation leaves after the sinks. Like kvpress (without its
    ``KeyRerotationPress``), survivors keep their original positions (no re-rotation)."""

    name = "streaming"

    sinks: int = 4

    def __post_init__(self):
        super().__post_init__()
        self._check("sinks", self.sinks >= 0, "must be >= 0")

    def score(self, view: CacheView, layer: int, n: int, stats) -> np.ndarray:
        held = view.retained[layer]
        return np.where(held + view.start < self.sinks, KEEP, 0.0) + recency(held)  # sinks: absolute
