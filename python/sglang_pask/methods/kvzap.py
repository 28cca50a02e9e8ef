"""KVzap: KVzip's scores as a learned scorer predicts them from the hidden states, no extra forward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sglang_pask.methods.base import CacheView, Selection
from sglang_pask.methods.kvzip import ranked_allocation, select_heads
from sglang_pask.methods.learned import check_scorer_option
from sglang_pask.methods.scorer import ScorerMethod


@dataclass(frozen=True)
class KVzap(ScorerMethod):
    """KVzap (arXiv:2601.07891; NVIDIA kvpress ``KVzapPress`` and its ``kvzap/README.md``): per layer,
    a small model maps the attention input's hidden state at each position to one score per KV
    head, fitted to KVzip's scores (here :class:`~.learned.LearnedScorer`, linear, on this project's
    KVzip scores -- not KVzip+, see there).
    This method is only the scorer: the engine supplies its predictions
    (:attr:`~.base.AttentionStats.learned_heads`, in KVzip's units).

    Selection as its authors use it at a fixed budget: they pair the scorer with kvpress's
    ``ThresholdPress`` (one threshold on the predicted log score across every layer and KV head;
    its sliding window belongs to that wrapper, not to the scorer); a fixed budget ``b`` is the
    threshold that keeps exactly ``b`` of the KV, i.e. one global ranking over (layer, head,
    position) -- the same layer and head allocation as :class:`~.kvzip.KVzip` (``layerwise=False``),
    so the two differ only in where the scores come from. The first ``n_sink`` positions are kept
    (the scorer is not fitted on them). ``scorer``: the scorer file, which an engine needs (the
    tiny model's: ``policies/pask-tiny-fc.kvzap.safetensors``); ``scorer_sha256``: its pin (empty:
    unpinned; the reference runner fills it in, so every run records which scorer it read)."""

    name = "kvzap"
    needs_attention = "learned_heads"
    per_head: ClassVar[bool] = True
    adaptive_heads: ClassVar[bool] = True

    scorer: str = ""
    scorer_sha256: str = ""
    n_sink: int = 4

    def __post_init__(self):
        super().__post_init__()
        check_scorer_option(self)
        self._check("n_sink", isinstance(self.n_sink, (int, np.integer)) and self.n_sink >= 0,
                    "must be an integer >= 0")

    def allocation(self, view: CacheView) -> np.ndarray:
        return ranked_allocation(view, super().allocation(view), self.budget, self.attention_stats, self.n_sink)

    def select(self, view: CacheView) -> Selection:
        return select_heads(self.name, view, self.allocation(view), self.attention_stats(view), self.n_sink)
