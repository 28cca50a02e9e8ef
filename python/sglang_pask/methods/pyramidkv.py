"""PyramidKV: SnapKV's selection under per-layer budgets that shrink with depth."""

from __future__ import annotations

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.snapkv import SnapKV


class PyramidKV(SnapKV):
    """Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
    Funneling" (arXiv:2406.02069). Rule: attention funnels from broad in lower layers to
    focused in higher ones, so layer budgets form an arithmetic sequence over depth with the
    same total as a uniform split: with mean ``k`` per layer, the top layer gets ``k / beta``,
    the bottom ``2k - k / beta``, linearly in between; within a layer, SnapKV's pooled
    observation-window votes choose (same ``attention.window`` input)."""

    name = "pyramidkv"

    def __init__(self, budget: float, beta: float = 20.0, **kwargs):
        super().__init__(budget, **kwargs)
        if beta < 1.0:
            raise ValueError(f"beta must be >= 1, got {beta}")
        self.beta = float(beta)

    def layer_weights(self, view: CacheView) -> np.ndarray:
        L = view.num_layers
        if L == 1:
            return np.ones(1)
        top, bottom = 1.0 / self.beta, 2.0 - 1.0 / self.beta  # relative to the mean k
        return bottom - (bottom - top) * np.arange(L) / (L - 1)
