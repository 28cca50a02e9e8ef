"""Random eviction: the sanity floor every method must beat."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.scorer import ScorerMethod


@dataclass(frozen=True)
class Random(ScorerMethod):
    """No paper: keeps the current step plus uniformly random others. Deterministic: the
    generator is seeded from ``seed`` and a digest of the view (length, classes, retained sets),
    so the same view gives the same selection in any process."""

    name = "random"

    seed: int = 0

    def score(self, view: CacheView, layer: int, n: int, stats) -> np.ndarray:
        h = hashlib.sha256(f"{self.seed}/{view.seq_len}/{view.protected_tail}/{layer}".encode())
        h.update(view.classes.astype("<i8").tobytes())
        h.update(view.retained[layer].astype("<i8").tobytes())
        rng = np.random.default_rng(int.from_bytes(h.digest()[:8], "little"))
        return rng.random(view.retained[layer].size)
