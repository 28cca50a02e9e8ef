"""AdaKV: SnapKV's votes, with each layer's budget split among its KV heads by those votes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from sglang_pask.methods.base import CacheView, Selection
from sglang_pask.methods.scorer import ScorerMethod, adaptive_split, union_selection
from sglang_pask.methods.snapkv import POOLINGS, SnapKV


@dataclass(frozen=True)
class AdaKV(ScorerMethod):
    """Feng et al. 2024, "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget Allocation for
    Efficient LLM Inference" (arXiv:2407.11550; code: github.com/FFY0/AdaKV, Ada-SnapKV; kvpress
    ``AdaKVPress`` wrapping ``SnapKVPress``, read at 002ac9d). Rule: a layer's budget is not split
    evenly among its KV heads; the heads' scores compete in one top-k over the layer, so a head
    whose attention is concentrated keeps few positions and a diffuse one many. A safeguard keeps
    every head's own top ``alpha_safeguard`` share of the even split first (kvpress and the
    authors: 0.2). Scores: SnapKV's per-head votes (:meth:`SnapKV.votes`: the observation window
    at the keep tier, the prefix pooled; same defaults as :class:`SnapKV`), comparable across heads
    because each head's row of attention sums to one per query.

    Per layer with allocation ``n`` and ``H`` heads (each head ``h`` holding ``c_h`` positions,
    ``H * n <= sum c_h``): head ``h`` first keeps ``max(int(alpha * n), tail)`` of its positions by
    its own votes (the current step always), then the other ``H * n - sum(those)`` head-slots go
    to the best votes over all heads' remaining positions (ties: the more recent position, then
    the lower head). ``kept`` is the union; :attr:`Selection.head_mask` says which head keeps what.
    Needs ``attention.window_heads`` and ``attention.window_size``."""

    name = "adakv"
    needs_attention = "window_heads"
    per_head: ClassVar[bool] = True
    adaptive_heads: ClassVar[bool] = True

    window: int = 32
    kernel_size: int = 7
    pooling: str = "max"
    alpha_safeguard: float = 0.2

    def __post_init__(self):
        super().__post_init__()
        self._check("window", self.window >= 1, "must be >= 1")
        self._check("kernel_size", self.kernel_size >= 1, "must be >= 1")
        self._check("pooling", self.pooling in POOLINGS, f"must be one of {', '.join(POOLINGS)}")
        self._set("alpha_safeguard", float(self.alpha_safeguard))
        self._check("alpha_safeguard", 0.0 <= self.alpha_safeguard <= 1.0, "must be in [0, 1]")

    def scorer(self) -> SnapKV:
        return SnapKV(self.budget, window=self.window, kernel_size=self.kernel_size, pooling=self.pooling,
                      per_head=True)

    def select(self, view: CacheView) -> Selection:
        alloc = self.allocation(view)
        stats = self.attention_stats(view)
        snap = self.scorer()
        per_layer = []
        for layer, held in enumerate(view.retained):
            heads = view.head_held(layer, stats[layer].shape[0])  # bool [H, n_l]
            pos = [held[own] for own in heads]
            votes = [snap.votes(view, p, stats[layer][h][own]) for h, (p, own) in enumerate(zip(pos, heads))]
            n = int(alloc[layer])
            per_layer.append(adaptive_split(view, pos, votes, n, int(self.alpha_safeguard * n)))
        return union_selection(self.name, alloc, per_layer)
