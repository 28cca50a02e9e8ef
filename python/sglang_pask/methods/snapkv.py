"""SnapKV: the observation window votes for prefix positions; pooled; top-k plus the window."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sglang_pask.methods.base import CacheView, Selection
from sglang_pask.methods.scorer import KEEP, ScorerMethod, avg_pool, max_pool, per_head_select, recency

POOLINGS = ("max", "avg")


def observation_votes(view: CacheView, held: np.ndarray, stats: np.ndarray, kernel: int, pool=max_pool
                      ) -> tuple[np.ndarray, np.ndarray]:
    """SnapKV's votes before ranking: (pooled float ``[m]``, observed bool ``[m]``) for positions
    ``held`` (int64 sorted ``[m]``) with window attention ``stats`` ``[m]``: the observation window
    (the last ``view.attention.window_size`` positions) is ``observed`` (0 in ``pooled``); the
    prefix before it is pooled (``pool``, ``kernel``). :class:`SnapKV` and PASK's residual scorer
    (:mod:`.residual`) both read the window this way."""
    observed = held >= view.seq_len - view.attention.window_size
    out = np.zeros(held.size)
    out[~observed] = pool(stats[~observed], kernel)
    return out, observed


@dataclass(frozen=True)
class SnapKV(ScorerMethod):
    """Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation"
    (arXiv:2404.14469; code: github.com/FasterDecoding/SnapKV, whose LongBench configs use
    ``window_size=32, kernel_size=7, pooling=maxpool``; KVCache-Factory ``SnapKVCluster``; kvpress
    8bb29b9 ``SnapKVPress``). Rule: the last ``window`` queries (the observation window) vote for
    the earlier positions with the attention they pay them, summed over the window; a 1-D pooling
    of the votes (``kernel_size``, stride 1, ``pooling`` max or avg) over the **prefix only** (the
    positions before the window) keeps the neighbours of an important token with it; the cache
    keeps the whole observation window plus the top-voted prefix positions. The papers compress
    once, at prefill end: ``schedule="prefill"``.

    Needs ``attention.window`` (per retained position, summed over heads and the window's queries)
    and ``attention.window_size`` (the engine records the last ``window`` queries). Pooling runs
    over the layer's retained prefix positions in order (after an earlier compression, neighbours
    in the cache). ``per_head=True`` (the default): as the authors run it, one set per KV head
    (votes ``attention.window_heads``: summed over the query heads of each KV group, then pooled;
    the originals pool per query head and average the group), each head keeping the layer's
    allocation; the layer's ``kept`` is the union and :attr:`Selection.head_mask` says which head
    keeps what. The reference code selects per head: SnapKV's ``SnapKVCluster.update_kv`` takes
    ``topk`` over ``[bsz, heads, prefix]`` and gathers per head; kvpress 8bb29b9 ``ScorerPress``
    (``SnapKVPress`` scores ``[bsz, kv_heads, q_len]``) keeps each KV head's top ``n_kept``.
    ``per_head=False``: one kept set per layer, votes summed over all heads (what this project
    ran as SnapKV before; tables name the option)."""

    name = "snapkv"

    window: int = 32
    kernel_size: int = 7
    pooling: str = "max"
    per_head: bool = True

    def __post_init__(self):
        super().__post_init__()
        self._check("window", self.window >= 1, "must be >= 1")
        self._check("kernel_size", self.kernel_size >= 1, "must be >= 1")
        self._check("pooling", self.pooling in POOLINGS, f"must be one of {', '.join(POOLINGS)}")
        self._check("per_head", isinstance(self.per_head, (bool, np.bool_)), "must be a bool")

    @property
    def needs_attention(self) -> str:  # type: ignore[override]
        return "window_heads" if self.per_head else "window"

    def votes(self, view: CacheView, held: np.ndarray, stats: np.ndarray) -> np.ndarray:
        """float ``[m]`` scores for positions ``held`` (int64 sorted) with window attention
        ``stats`` ``[m]``: the window itself at KEEP (newest first), the prefix pooled."""
        pooled, observed = observation_votes(view, held, stats, self.kernel_size,
                                             max_pool if self.pooling == "max" else avg_pool)
        return np.where(observed, KEEP + recency(held), pooled)

    def score(self, view: CacheView, layer: int, n: int, stats) -> np.ndarray:
        return self.votes(view, view.retained[layer], stats[layer])

    def select(self, view: CacheView) -> Selection:
        if not self.per_head:
            return super().select(view)
        return per_head_select(self.name, view, self.allocation(view), self.attention_stats(view),
                               lambda pos, stats: self.votes(view, pos, stats))
