"""KVzip: query-agnostic scores from reconstructing the context; budgets across layers and heads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sglang_pask.methods.base import CacheView, Selection, split_slots
from sglang_pask.methods.scorer import KEEP, ScorerMethod, adaptive_split, recency, union_selection


@dataclass(frozen=True)
class KVzip(ScorerMethod):
    """Kim et al. 2025, "KVzip: Query-Agnostic KV Cache Compression with Context Reconstruction"
    (arXiv:2505.23416; code: github.com/snu-mllab/KVzip; kvpress ``KVzipPress``, read at 8bb29b9,
    with its defaults). Rule: after the prefill the model is asked to repeat its context
    ("Repeat the previous context exactly.", the context teacher-forced, in chunks of
    ``chunk_size`` tokens, each chunk seeing the ``n_sink`` first positions, itself and the
    repeat); a KV pair's score is the most attention any reconstruction query of its KV group pays
    it. The first ``n_sink`` positions are always kept. ``layerwise=False`` (the default): one
    ranking over every layer and KV head decides how many head-slots each layer keeps, and each
    layer's heads then share them by score (no safeguard); ``layerwise=True``: every layer keeps
    the same share, split among its heads by score.

    The engine computes the scores (:attr:`~.base.AttentionStats.kvzip_heads`; the reference
    runner in ``hf/kvzip.py``: one extra forward of the whole context, about the prefill's cost
    again). Our budget counts whole positions per layer, so a layer's head-slots from the global
    ranking are rounded to a multiple of its KV heads (largest remainder; the total is exact).
    kvpress's ``kvzip_plus_normalization`` (KVzip+) is not offered."""

    name = "kvzip"
    needs_attention = "kvzip_heads"
    per_head: ClassVar[bool] = True
    adaptive_heads: ClassVar[bool] = True

    layerwise: bool = False
    n_sink: int = 4
    chunk_size: int = 2048

    def __post_init__(self):
        super().__post_init__()
        self._check("layerwise", isinstance(self.layerwise, (bool, np.bool_)), "must be a bool")
        self._check("n_sink", isinstance(self.n_sink, (int, np.integer)) and self.n_sink >= 0,
                    "must be an integer >= 0")
        self._check("chunk_size", isinstance(self.chunk_size, (int, np.integer)) and self.chunk_size >= 1,
                    "must be an integer >= 1")

    def allocation(self, view: CacheView) -> np.ndarray:
        base = super().allocation(view)  # uniform; also the b >= 1 and tails-only cases
        if self.layerwise:
            return base
        return ranked_allocation(view, base, self.budget, self.attention_stats, self.n_sink)

    def select(self, view: CacheView) -> Selection:
        return select_heads(self.name, view, self.allocation(view), self.attention_stats(view), self.n_sink)


def head_votes(view: CacheView, layer: int, stats, n_sink: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per KV head of ``layer``: (positions it holds, their scores ``stats[layer][h]`` with the
    first ``n_sink`` positions at the keep tier)."""
    held = view.retained[layer]
    heads = view.head_held(layer, stats[layer].shape[0])
    pos = [held[own] for own in heads]
    votes = [np.where(p + view.start < n_sink, KEEP + recency(p), stats[layer][h][own])
             for h, (p, own) in enumerate(zip(pos, heads))]
    return pos, votes


def ranked_allocation(view: CacheView, base: np.ndarray, budget: float, get_stats, n_sink: int) -> np.ndarray:
    """KVzip's layer budgets (``layerwise=False``): one ranking of every (layer, KV head, position)
    outside the tails by score decides how many head-slots each layer keeps, rounded to whole
    positions per layer (largest remainder; the total ``sum(base)`` is exact). ``base``: the
    uniform allocation (returned as is at ``b >= 1`` or when the tails use the budget);
    ``get_stats(view)``: the per-head scores, read only when a ranking is needed."""
    held = view.held()
    tail = np.array([view.tail_count(i) for i in range(view.num_layers)], dtype=np.int64)
    if budget >= 1.0 or int(base.sum()) == int(tail.sum()):
        return base
    stats = get_stats(view)
    left = int(base.sum() - tail.sum())  # positions beyond the tails, all layers
    H = stats[0].shape[0]
    scores, layers = [], []
    for layer in range(view.num_layers):
        pos, votes = head_votes(view, layer, stats, n_sink)
        for p, v in zip(pos, votes):
            keep = p < view.tail_start
            scores.append(v[keep])
            layers.append(np.full(int(keep.sum()), layer))
    scores, layers = np.concatenate(scores), np.concatenate(layers)
    top = np.argsort(-scores, kind="stable")[:H * left]
    counts = np.bincount(layers[top], minlength=view.num_layers).astype(np.float64)
    return tail + split_slots(left, counts, held - tail)


def select_heads(name: str, view: CacheView, alloc: np.ndarray, stats, n_sink: int) -> Selection:
    """Per layer, its ``H * alloc[layer]`` head-slots shared among the heads by score
    (:func:`~.scorer.adaptive_split`, no safeguard), sinks first."""
    per_layer = []
    for layer in range(view.num_layers):
        pos, votes = head_votes(view, layer, stats, n_sink)
        per_layer.append(adaptive_split(view, pos, votes, int(alloc[layer]), 0))
    return union_selection(name, alloc, per_layer)
