"""Expected Attention: keep, per KV head, what future queries are expected to attend to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sglang_pask.methods.base import CacheView, Selection
from sglang_pask.methods.scorer import KEEP, ScorerMethod, per_head_select, recency


@dataclass(frozen=True)
class ExpectedAttention(ScorerMethod):
    """Devoto et al. 2025, "Expected Attention: KV Cache Compression by Estimating Attention from
    Future Queries Distribution" (arXiv:2510.00636; code: kvpress ``ExpectedAttentionPress``, read
    at 8bb29b9, with its defaults). Rule: the queries seen so far (pre-RoPE, the first ``n_sink``
    positions left out) are fitted by a Gaussian per query head; its mean and covariance are
    rotated by RoPE averaged over the next ``n_future_positions`` positions; a key ``k`` is then
    expected to receive ``softmax_k(mu . k / sqrt(d) + k^T Sigma k / (2 d))`` (``use_covariance``;
    the mean term alone otherwise), averaged over the query heads of its KV group, times its
    value's norm ``(score + epsilon) * |v|`` (``use_vnorm``). The first ``n_sink`` positions are
    always kept. As kvpress's scorer presses, one kept set per KV head (``per_head``), each head
    keeping the layer's allocation.

    The engine computes the scores (:attr:`~.base.AttentionStats.expected_heads`, from its query
    statistics and keys; the reference runner in ``hf/expected.py``), reading this method's
    ``n_future_positions``, ``n_sink``, ``use_covariance``, ``use_vnorm`` and ``epsilon``; the
    method ranks them (sinks and the current step first; ties: the more recent)."""

    name = "expected_attention"
    needs_attention = "expected_heads"
    per_head: ClassVar[bool] = True

    n_future_positions: int = 512
    n_sink: int = 4
    use_covariance: bool = True
    use_vnorm: bool = True
    epsilon: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        self._check("n_future_positions", isinstance(self.n_future_positions, (int, np.integer))
                    and self.n_future_positions >= 1, "must be an integer >= 1")
        self._check("n_sink", isinstance(self.n_sink, (int, np.integer)) and self.n_sink >= 0,
                    "must be an integer >= 0")
        for flag in ("use_covariance", "use_vnorm"):
            self._check(flag, isinstance(getattr(self, flag), (bool, np.bool_)), "must be a bool")
        self._set("epsilon", float(self.epsilon))
        self._check("epsilon", self.epsilon >= 0.0, "must be >= 0")

    def votes(self, view: CacheView, held: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """float ``[m]``: the expected-attention ``scores`` of positions ``held``, the sinks (by
        absolute position, ``held + view.start < n_sink``) at the keep tier."""
        return np.where(held + view.start < self.n_sink, KEEP + recency(held), scores)

    def select(self, view: CacheView) -> Selection:
        return per_head_select(self.name, view, self.allocation(view), self.attention_stats(view),
                               lambda pos, scores: self.votes(view, pos, scores))
