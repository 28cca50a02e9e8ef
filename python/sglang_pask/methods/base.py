"""The KV-method contract: which cached positions each layer keeps, under one total budget.

Engine-agnostic: this subpackage imports neither transformers nor SGLang; engines (the reference
runner in ``hf/``, the SGLang plugin in ``srt/``) build a :class:`CacheView` at a compression
point, call :meth:`KVMethod.select`, and physically drop everything not kept.

Budget (DESIGN.md §2): with ``L`` layers and ``T`` logical tokens so far, a method may retain at
most ``S = floor(b * L * T)`` token-layer slots in total. Methods are compared at the same ``b``.

When to compress (:meth:`KVMethod.due`): at prefill end, and during decoding every ``interval``
steps whenever the cache holds more than ``S`` slots. Each layer's view is what it *currently*
holds, so after a first compression layers may differ (pyramid budgets, per-layer scores).

Invariants every method satisfies (tested by looping over the registry, test/test_methods_*):

* ``select`` returns, per layer, a sorted, duplicate-free subset of that layer's currently
  retained positions, of exactly ``allocation(view)[layer]`` elements;
* the current step's tokens (positions ``>= view.seq_len - view.protected_tail``) are always kept;
* ``sum(allocation) == min(S, slots held)`` -- the budget is used, never exceeded -- unless the
  protected tail alone exceeds ``S``, in which case each layer keeps exactly its protected tail
  (``per_group`` methods allocate whole per-layer units per group, so up to
  ``max group size - 1`` slots of ``S`` may stay unused);
* at ``b == 1.0`` nothing is dropped (bit-for-bit Full KV);
* deterministic: the same view gives the same selection (no global RNG; ``random`` seeds itself
  from the view).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Sequence

import numpy as np


@dataclass
class AttentionStats:
    """Attention statistics an engine supplies when a method asks for them
    (:attr:`KVMethod.needs_attention` names the field; the others may stay None).

    ``accumulated[l]``: float ``[len(view.retained[l])]``, attention mass each retained
    position of layer ``l`` has received so far, summed over heads and over all queries seen
    (H2O). ``window[l]``: float ``[len(view.retained[l])]``, attention from the last
    ``window_size`` queries (positions ``seq_len - window_size ..``), summed over heads and those
    queries (SnapKV, PyramidKV); methods pool it themselves. Entries are aligned with
    ``view.retained[l]``, finite and >= 0.
    """

    accumulated: Optional[list[np.ndarray]] = None
    window: Optional[list[np.ndarray]] = None
    window_size: int = 0

    def get(self, name: str, view: "CacheView") -> list[np.ndarray]:
        """The ``name`` field, checked against ``view`` (raises ValueError naming the problem)."""
        stats = getattr(self, name)
        if stats is None:
            raise ValueError(f"attention.{name} is required but missing")
        if len(stats) != view.num_layers:
            raise ValueError(f"attention.{name} has {len(stats)} layers, expected {view.num_layers}")
        out = []
        for layer, (s, held) in enumerate(zip(stats, view.retained)):
            s = np.asarray(s, dtype=np.float64)
            if s.shape != held.shape:
                raise ValueError(f"attention.{name}[{layer}] has shape {s.shape}, expected {held.shape}")
            if not np.all(np.isfinite(s)):
                raise ValueError(f"attention.{name}[{layer}] holds non-finite values")
            out.append(s)
        return out


@dataclass
class CacheView:
    """What a method sees at one compression point.

    ``classes``: int ``[seq_len]``, the StructClass of every logical position (prompt, then
    output). ``retained[l]``: int64 sorted ``[n_l]``, logical positions layer ``l`` still holds.
    ``groups``: consecutive layer indices sharing one decision (a partition of ``range(L)``).
    ``protected_tail``: how many of the newest positions belong to the current step; every layer
    must hold them. ``prompt_len``: informational (methods here do not read it).
    """

    num_layers: int
    groups: Sequence[Sequence[int]]
    seq_len: int
    classes: np.ndarray
    retained: Sequence[np.ndarray]
    protected_tail: int = 1
    attention: Optional[AttentionStats] = None
    prompt_len: int = 0

    def __post_init__(self):
        if len(self.retained) != self.num_layers:
            raise ValueError(f"retained has {len(self.retained)} layers, expected {self.num_layers}")
        if sorted(i for g in self.groups for i in g) != list(range(self.num_layers)):
            raise ValueError("groups must partition range(num_layers)")
        if len(self.classes) != self.seq_len:
            raise ValueError(f"classes has {len(self.classes)} entries, expected seq_len={self.seq_len}")
        if not 0 <= self.protected_tail <= self.seq_len:
            raise ValueError(f"protected_tail={self.protected_tail} outside [0, seq_len={self.seq_len}]")
        self.classes = np.asarray(self.classes, dtype=np.int64)
        self.retained = [np.asarray(r, dtype=np.int64) for r in self.retained]
        for layer, r in enumerate(self.retained):
            if r.size and (r[0] < 0 or r[-1] >= self.seq_len or np.any(np.diff(r) <= 0)):
                raise ValueError(f"retained[{layer}] must be sorted unique positions in [0, {self.seq_len})")
            if self.tail_count(layer) != self.protected_tail:
                raise ValueError(f"retained[{layer}] lacks some of the current step's "
                                 f"{self.protected_tail} positions")

    @property
    def tail_start(self) -> int:
        """First position of the current step (kept by every method)."""
        return self.seq_len - self.protected_tail

    def tail_count(self, layer: int) -> int:
        r = self.retained[layer]
        return int(r.size - np.searchsorted(r, self.tail_start))

    def held(self) -> np.ndarray:
        """int64 ``[L]``: how many positions each layer holds now."""
        return np.array([r.size for r in self.retained], dtype=np.int64)

    def budget_slots(self, budget: float) -> int:
        """``floor(b * L * T)``: the total token-layer slots a method may retain."""
        return int(np.floor(budget * self.num_layers * self.seq_len + 1e-9))

    def group_of(self, layer: int) -> int:
        return next(g for g, layers in enumerate(self.groups) if layer in layers)


@dataclass
class Selection:
    """Kept positions per layer (int64, sorted, unique), aligned with ``CacheView.retained``."""

    kept: list[np.ndarray]
    info: dict = field(default_factory=dict)

    def per_group(self, view: CacheView) -> dict[int, np.ndarray]:
        """The kept set of each group's first layer (group-level methods keep one set per group)."""
        return {g: self.kept[layers[0]] for g, layers in enumerate(view.groups)}


def split_slots(total: int, weights: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """int64 ``a`` with ``0 <= a <= cap`` and ``sum(a) == min(total, sum(cap))``, by water-filling
    in proportion to ``weights`` (>= 0): an entry whose share reaches its cap is filled and the
    rest re-split among the others; shares are rounded by largest remainder (ties: lower index),
    so uncapped entries are within 1 of their exact share. What positive-weight entries cannot
    hold goes evenly to zero-weight entries."""
    cap = np.asarray(cap, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    a = np.zeros_like(cap)
    left = int(min(max(total, 0), int(cap.sum())))
    for mask, ww in ((w > 0, w), (~(w > 0), np.ones_like(w))):  # positive weights, then the rest
        free = mask & (cap > 0)
        while left > 0 and free.any():
            ideal = np.where(free, left * ww / ww[free].sum(), 0.0)
            over = free & (ideal >= cap - a)
            if over.any():  # these fill up; re-split what is left among the others
                left -= int((cap - a)[over].sum())
                a[over] = cap[over]
                free &= ~over
                continue
            fl = np.floor(ideal).astype(np.int64)
            a += fl
            left -= int(fl.sum())
            order = np.lexsort((np.arange(a.size), -(ideal - fl)))
            for i in order:  # largest remainders; a guard against float round-off too
                if left == 0:
                    break
                if free[i] and a[i] < cap[i]:
                    a[i] += 1
                    left -= 1
            free &= a < cap
    return a


class KVMethod(ABC):
    """A KV selection rule. Subclasses set ``name`` and implement :meth:`select` (and, when the
    per-layer budget split is not uniform, :meth:`layer_weights` or :meth:`allocation`).

    ``sinks``: first positions always kept by methods with attention sinks (streaming; pask
    reads its policy's); ``window``: the observation window whose attention the engine records
    for snapkv / pyramidkv (``attention.window_size`` is what they use), pask's recent window
    (read from its policy); ``interval``: during decoding, compress every ``interval`` steps
    when over budget (:meth:`due`).
    """

    name: ClassVar[str] = ""
    #: which :class:`AttentionStats` field the engine must fill (None: none needed)
    needs_attention: ClassVar[Optional[str]] = None
    #: True: one decision per layer group (every layer of a group keeps the same set; the layers
    #: of a group must hold the same positions). False: per-layer decisions.
    per_group: ClassVar[bool] = False

    def __init__(self, budget: float, sinks: int = 4, window: int = 16, interval: int = 1):
        if not 0.0 < budget <= 1.0:
            raise ValueError(f"budget must be in (0, 1], got {budget}")
        if sinks < 0 or window < 0 or interval < 1:
            raise ValueError(f"need sinks >= 0, window >= 0, interval >= 1; got {sinks}, {window}, {interval}")
        self.budget = float(budget)
        self.sinks = int(sinks)
        self.window = int(window)
        self.interval = int(interval)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(budget={self.budget:g})"

    def due(self, decode_step: int, slots_held: int, seq_len: int, num_layers: int) -> bool:
        """Whether the engine should call :meth:`select` now. ``decode_step`` 0 is prefill end;
        then every ``interval``-th step; only when the cache holds more than ``floor(b*L*T)``."""
        if decode_step % self.interval:
            return False
        return slots_held > int(np.floor(self.budget * num_layers * seq_len + 1e-9))

    def layer_weights(self, view: CacheView) -> np.ndarray:
        """float ``[L]``: relative share of the budget per layer (uniform here)."""
        return np.ones(view.num_layers)

    def allocation(self, view: CacheView) -> np.ndarray:
        """int64 ``[L]``: how many positions each layer keeps. Default: every layer keeps its
        protected tail, and the rest of ``floor(b*L*T)`` is split by :meth:`layer_weights`, never
        more than a layer holds (what one layer cannot take goes to the others)."""
        held = view.held()
        tail = np.array([view.tail_count(i) for i in range(view.num_layers)], dtype=np.int64)
        total = view.budget_slots(self.budget)
        if self.budget >= 1.0:
            return held
        if tail.sum() >= total:
            return tail
        return tail + split_slots(total - int(tail.sum()), self.layer_weights(view), held - tail)

    @abstractmethod
    def select(self, view: CacheView) -> Selection:
        """Choose the kept positions of every layer. Must not mutate ``view``."""
