"""PyramidKV: SnapKV's selection under per-layer budgets that shrink with depth."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.snapkv import SnapKV

EPS = 1e-9


@dataclass(frozen=True)
class PyramidKV(SnapKV):
    """Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
    Funneling" (arXiv:2406.02069; code: KVCache-Factory ``PyramidKVCluster``, github.com/Zefan-Cai/
    KVCache-Factory; the layer rule as kvpress 8bb29b9 ``PyramidKVPress.get_layer_budget``).
    Rule: attention funnels from broad in lower layers to focused in higher ones, so layer
    budgets form an arithmetic sequence over depth; within a layer, SnapKV's pooled
    observation-window votes choose (same fields and ``attention.window`` input; ``beta`` 20 as
    the authors').

    Layer budgets (:meth:`targets`), with ``T`` the logical length (at prefill end every layer
    holds ``T``), mean per-layer budget ``k = floor(b*L*T) / L`` and window ``w``: ``min = k /
    beta``, ``max = 2k - min``; if ``max >= T - w`` then ``max = T - w`` and ``min = 2k - max``;
    layer ``i`` of ``L`` gets ``max - i * (max - min) / (L - 1)`` (bottom ``max``, top ``min``;
    the window is inside each layer's count, as in kvpress). Unless ``T >= max >= min >= w``
    (e.g. a small budget, where the top layer could not hold its own window) every layer gets
    the uniform SnapKV budget ``k``. Rounding (ours; kvpress rounds each layer, so its total can
    drift): the targets minus each layer's protected tail are split by largest remainder, so the
    total is exactly ``min(floor(b*L*T), slots held)`` and each layer is within 1 of its target
    (a layer that holds less than its target passes the rest on, :func:`~.base.split_slots`)."""

    name = "pyramidkv"

    beta: float = 20.0

    def __post_init__(self):
        super().__post_init__()
        self._set("beta", float(self.beta))
        self._check("beta", self.beta >= 1.0, "must be >= 1")

    def targets(self, view: CacheView) -> np.ndarray:
        """float ``[L]``: the layer budgets of the class docstring (sum ``floor(b*L*T)``)."""
        L, T, w = view.num_layers, view.seq_len, self.window
        k = view.budget_slots(self.budget) / L
        uniform = np.full(L, k)
        if L == 1:
            return uniform
        lo = k / self.beta
        hi = 2 * k - lo
        if hi >= T - w:
            hi = T - w
            lo = 2 * k - hi
        if not (T + EPS >= hi and hi + EPS >= lo and lo + EPS >= w):
            return uniform  # kvpress / KVCache-Factory: fall back to SnapKV
        return hi - (hi - lo) * np.arange(L) / (L - 1)

    def layer_weights(self, view: CacheView) -> np.ndarray:
        tail = np.array([view.tail_count(i) for i in range(view.num_layers)], dtype=np.float64)
        return np.maximum(self.targets(view) - tail, 0.0)
