"""Many requests' cache views at once, as padded arrays: what the server's batched compression
hands a method (:meth:`~sglang_pask.methods.base.KVMethod.select_padded`).

Shapes (``R`` requests, ``T = max(seq_lens)``, ``L`` layers): ``seq_lens`` int64 ``[R]``;
``prompt_lens`` int64 ``[R]``; ``classes`` int64 ``[R, T]`` (entries at ``t >= seq_lens[r]`` are
padding, value irrelevant); ``held`` bool ``[L, R, T]`` (False at padding). Request ``r`` is exactly
the :class:`~sglang_pask.methods.base.CacheView` :meth:`PaddedBatch.view` builds (no attention
statistics, no per-head masks), and a method's padded selection must equal its
:meth:`~sglang_pask.methods.base.KVMethod.select` on those views, at the request's budget, bit for
bit (``test_methods_padded.py`` checks every registered method).

One optional field carries an attention statistic for a method whose residual reads one (PASK's
learned scorer, group-wide): ``stats`` float ``[L, H, R, T]``, request ``r``'s
``AttentionStats.<field>[l]`` spread over its columns (0 where not held); :meth:`PaddedBatch.view`
then gives it to the row's view under ``stats_field``.

Two optional per-request fields make a row a request's own span after a shared segment
(:func:`~sglang_pask.methods.segment.own_view`, shifted to start at column 0): ``starts`` int64
``[R]``, the absolute position of column 0 (the view's ``start``; None: 0, whole sequences), and
``budgets`` float ``[R]``, the budget the row is selected at (:func:`~sglang_pask.methods.segment.own_budget`
of its own allocation; None: the method's own budget for every row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from sglang_pask.methods.base import CacheView

__all__ = ["PaddedBatch", "top_n_mask"]


@dataclass
class PaddedBatch:
    num_layers: int
    groups: Sequence[Sequence[int]]
    seq_lens: np.ndarray
    classes: np.ndarray
    held: np.ndarray
    prompt_lens: np.ndarray
    protected_tail: int = 1
    starts: Optional[np.ndarray] = None
    budgets: Optional[np.ndarray] = None
    stats: Optional[np.ndarray] = None
    stats_field: Optional[str] = None

    def __post_init__(self):
        self.seq_lens = np.asarray(self.seq_lens, dtype=np.int64)
        self.prompt_lens = np.asarray(self.prompt_lens, dtype=np.int64)
        self.classes = np.asarray(self.classes, dtype=np.int64)
        self.held = np.asarray(self.held, dtype=bool)
        R = self.seq_lens.size
        T = int(self.seq_lens.max()) if R else 0
        if self.held.shape != (self.num_layers, R, T) or self.classes.shape != (R, T):
            raise ValueError(f"held {self.held.shape} / classes {self.classes.shape} do not match "
                             f"[{self.num_layers}, {R}, {T}] / [{R}, {T}]")
        if (self.held & ~self.valid[None]).any():
            raise ValueError("held marks a position at or past its request's seq_len")
        self.starts = np.zeros(R, np.int64) if self.starts is None else np.asarray(self.starts, dtype=np.int64)
        if self.starts.shape != (R,) or (self.starts < 0).any():
            raise ValueError(f"starts {self.starts.tolist()} must be [{R}] positions >= 0")
        if self.stats is not None and (self.stats.ndim != 4 or self.stats.shape[0] != self.num_layers
                                       or self.stats.shape[2:] != (R, T) or not self.stats_field):
            raise ValueError(f"stats {self.stats.shape} must be [{self.num_layers}, heads, {R}, {T}] and name "
                             "their AttentionStats field (stats_field)")
        if self.budgets is not None:
            self.budgets = np.asarray(self.budgets, dtype=np.float64)
            if self.budgets.shape != (R,) or not ((self.budgets > 0) & (self.budgets <= 1.0)).all():
                raise ValueError(f"budgets {self.budgets.tolist()} must be [{R}] values in (0, 1]")

    def budgets_for(self, budget: float) -> np.ndarray:
        """float ``[R]``: each row's budget for a method at ``budget``."""
        return np.full(self.size, float(budget)) if self.budgets is None else self.budgets

    @property
    def size(self) -> int:
        return int(self.seq_lens.size)

    @property
    def positions(self) -> np.ndarray:
        """int64 ``[1, T]``: the position of each column."""
        return np.arange(self.classes.shape[1], dtype=np.int64)[None, :]

    @property
    def valid(self) -> np.ndarray:
        """bool ``[R, T]``: column ``t`` is inside request ``r``'s sequence."""
        return self.positions < self.seq_lens[:, None]

    @property
    def tail_start(self) -> np.ndarray:
        """int64 ``[R]``: the first position of each request's current step."""
        return self.seq_lens - self.protected_tail

    @classmethod
    def from_view(cls, view: CacheView) -> "PaddedBatch":
        """``view`` as a one-row batch (its positions, classes and start; no attention statistics,
        no per-head masks: the layers' retained positions are what a row holds)."""
        held = np.zeros((view.num_layers, 1, view.seq_len), dtype=bool)
        for layer, r in enumerate(view.retained):
            held[layer, 0, r] = True
        return cls(num_layers=view.num_layers, groups=view.groups, seq_lens=np.array([view.seq_len]),
                   classes=view.classes[None], held=held, prompt_lens=np.array([view.prompt_len]),
                   protected_tail=view.protected_tail, starts=np.array([view.start]))

    def view(self, r: int):
        """Request ``r`` as a :class:`~sglang_pask.methods.base.CacheView` (the reference)."""
        from sglang_pask.methods.base import AttentionStats

        n = int(self.seq_lens[r])
        retained = [np.flatnonzero(h[r, :n]) for h in self.held]
        attention = None
        if self.stats is not None:
            attention = AttentionStats(**{self.stats_field: [self.stats[layer][:, r, pos]
                                                             for layer, pos in enumerate(retained)]})
        return CacheView(num_layers=self.num_layers, groups=self.groups, seq_len=n,
                         classes=self.classes[r, :n], retained=retained,
                         protected_tail=self.protected_tail, prompt_len=int(self.prompt_lens[r]),
                         start=int(self.starts[r]), attention=attention)

    def mask_of(self, kept: Sequence[np.ndarray], r: int, out: np.ndarray) -> None:
        """Write one request's per-layer kept positions into ``out[:, r]`` (``out``: bool ``[L, R, T]``)."""
        for layer, k in enumerate(kept):
            out[layer, r, np.asarray(k, dtype=np.int64)] = True


def top_n_mask(held: np.ndarray, scores: np.ndarray, n: np.ndarray, tail_start: np.ndarray) -> np.ndarray:
    """bool ``[R, T]``: per row what :func:`~sglang_pask.methods.scorer.top_n` keeps -- every held
    position ``>= tail_start[r]``, then the best-scored held others, ``n[r]`` in all (all held when
    ``n[r]`` reaches the held count); ties go to the more recent position. ``held`` bool ``[R, T]``,
    ``scores`` float ``[R, T]`` (ignored where not held), ``n`` / ``tail_start`` int ``[R]``. The
    compiled operator when built (:mod:`sglang_pask.ops`), else its reference."""
    from sglang_pask import ops

    return ops.top_n_mask(held, scores, n, tail_start)
