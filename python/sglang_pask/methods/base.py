"""The KV-method contract: which cached positions each layer keeps, under one total budget.

Engine-agnostic: this subpackage imports neither transformers nor SGLang; engines (the reference
runner in ``hf/``, the SGLang plugin in ``srt/``) build a :class:`CacheView` at a compression
point, call :meth:`KVMethod.select`, and physically drop everything not kept.

Budget (DESIGN.md §2): with ``L`` layers and ``T`` logical tokens so far, a method may retain at
most ``S = floor(b * L * T)`` token-layer slots in total. Methods are compared at the same ``b``.

When to compress (:meth:`KVMethod.due`, DESIGN.md §4 "Schedules"; field ``schedule``):

* ``continuous``: at prefill end, and during decoding every ``interval`` steps whenever the cache
  holds more than ``S`` slots (``b`` is the fraction of all tokens);
* ``prefill``: once, at prefill end (``T = P``, the prompt length, so ``S = floor(b * L * P)``),
  and every output token is kept afterwards (``b`` is the fraction of the prompt), as the SnapKV
  and PyramidKV papers do.

Each layer's view is what it *currently* holds, so after a first compression layers may differ
(pyramid budgets, per-layer scores). Per-KV-head methods (``per_head``) keep, per layer, one set
per KV head: the layer physically holds their union and masks within it (:attr:`CacheView.head_mask`,
:attr:`Selection.head_mask`); budgets count per head: a layer's allocation ``n`` is what each head
keeps, or, for methods with :attr:`KVMethod.adaptive_heads` (AdaKV), what its ``H`` heads keep on
average (``H * n`` head-slots in all, split among the heads by score). :meth:`CacheView.held` is
a layer's head-slots divided by ``H`` (a whole number: every head gains each new token).

Invariants every method satisfies (tested by looping over the registry, test/unit/methods/test_methods_*):

* ``select`` returns, per layer, a sorted, duplicate-free subset of that layer's currently
  retained positions, of exactly ``allocation(view)[layer]`` elements (per-head methods: each
  head keeps exactly that many of the positions it holds -- with ``adaptive_heads``, the heads
  keep ``H`` times that many in all; ``kept`` is their union);
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
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from sglang_pask.policy.operating_point import SCHEDULES  # one definition (the policy file names it)


@dataclass
class AttentionStats:
    """Attention statistics an engine supplies when a method asks for them
    (:attr:`KVMethod.needs_attention` names the field; the others may stay None).

    ``accumulated[l]``: float ``[len(view.retained[l])]``, attention mass each retained
    position of layer ``l`` has received so far, summed over heads and over all queries seen
    (H2O). ``window[l]``: float ``[len(view.retained[l])]``, attention from the last
    ``window_size`` queries (positions ``seq_len - window_size ..``), summed over heads and those
    queries (SnapKV, PyramidKV); methods pool it themselves. ``window_heads[l]``: float
    ``[kv_heads, len(view.retained[l])]``, the same per KV head (summed over the query heads of
    each KV group; 0 where a head no longer holds the position), for per-head selection.
    ``expected_heads[l]``: float ``[kv_heads, len(view.retained[l])]``, the attention each
    position is expected to receive from future queries (Expected Attention: a Gaussian fit of
    the queries seen so far, rotated to the next positions, as kvpress computes it; the engine
    computes it for the method that asks, :class:`~.expected.ExpectedAttention`; 0 where a head no
    longer holds the position). ``kvzip_heads[l]``: float ``[kv_heads, len(view.retained[l])]``,
    the most attention each position receives from any query of its KV group while the model
    repeats the context (KVzip, :class:`~.kvzip.KVzip`; 0 where a head no longer holds it).
    ``learned_heads[l]``: float ``[kv_heads, len(view.retained[l])]``, KVzip's score as the
    learned scorer predicts it (:class:`~.learned.LearnedScorer`: ``exp`` of a linear map of the
    position's attention input, captured during the forwards that wrote it; no extra forward), in
    the units of ``kvzip_heads`` (KVzap, :class:`~.kvzap.KVzap`; 0 where a head no longer holds it).
    Entries are aligned with ``view.retained[l]``, finite and >= 0.
    """

    accumulated: Optional[list[np.ndarray]] = None
    window: Optional[list[np.ndarray]] = None
    window_size: int = 0
    window_heads: Optional[list[np.ndarray]] = None
    expected_heads: Optional[list[np.ndarray]] = None
    kvzip_heads: Optional[list[np.ndarray]] = None
    learned_heads: Optional[list[np.ndarray]] = None

    def get(self, name: str, view: "CacheView") -> list[np.ndarray]:
        """The ``name`` field, checked against ``view`` (raises ValueError naming the problem)."""
        stats = getattr(self, name)
        if stats is None:
            raise ValueError(f"attention.{name} is required but missing")
        if len(stats) != view.num_layers:
            raise ValueError(f"attention.{name} has {len(stats)} layers, expected {view.num_layers}")
        out = []
        heads = name.endswith("_heads")  # [kv_heads, n_l] per layer, else [n_l]
        for layer, (s, held) in enumerate(zip(stats, view.retained)):
            s = np.asarray(s, dtype=np.float64)
            ok = s.shape == held.shape if not heads else (
                s.ndim == 2 and s.shape[1] == held.size and s.shape[0] >= 1)
            if not ok:
                want = held.shape if not heads else ("kv_heads", held.size)
                raise ValueError(f"attention.{name}[{layer}] has shape {s.shape}, expected {want}")
            if not np.all(np.isfinite(s)):
                raise ValueError(f"attention.{name}[{layer}] holds non-finite values")
            out.append(s)
        return out


def window_size(method: "KVMethod") -> int:
    """How many of the newest queries a ``window`` statistic covers for ``method``: its
    ``attention_window`` where it has one (attention-informed PASK), else its ``window`` (SnapKV,
    PyramidKV). Both engines record by this rule."""
    w = getattr(method, "attention_window", None) or getattr(method, "window", 0)
    if not w:
        raise ValueError(f"{method.name} needs window attention but has no window field")
    return int(w)


@dataclass
class CacheView:
    """What a method sees at one compression point.

    ``classes``: int ``[seq_len]``, the StructClass of every logical position (prompt, then
    output). ``retained[l]``: int64 sorted ``[n_l]``, logical positions layer ``l`` still holds.
    ``groups``: consecutive layer indices sharing one decision (a partition of ``range(L)``).
    ``protected_tail``: how many of the newest positions belong to the current step; every layer
    must hold them. ``prompt_len``: informational (methods here do not read it).
    ``head_mask[l]``: None (every KV head holds all of ``retained[l]``) or bool
    ``[kv_heads, n_l]``: which retained positions each KV head still holds (after a per-head
    selection); the heads hold a multiple of ``kv_heads`` in all (the same number each, except
    after an ``adaptive_heads`` selection), every head the current step, and every retained
    position is held by some head.
    ``start``: the absolute sequence position of view position 0 (0 for a whole sequence; ``S``
    for a request's own span after a shared segment ``[0, S)``, :func:`~.segment.own_view`).
    Anchors defined by absolute position -- the attention sinks, the first tokens of the
    sequence -- use ``position + start``: a view with ``start >= sinks`` holds no sink.
    """

    num_layers: int
    groups: Sequence[Sequence[int]]
    seq_len: int
    classes: np.ndarray
    retained: Sequence[np.ndarray]
    protected_tail: int = 1
    attention: Optional[AttentionStats] = None
    prompt_len: int = 0
    head_mask: Optional[Sequence[Optional[np.ndarray]]] = None
    start: int = 0

    def __post_init__(self):
        if self.start < 0:
            raise ValueError(f"start={self.start} must be >= 0")
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
        if self.head_mask is not None:
            if len(self.head_mask) != self.num_layers:
                raise ValueError(f"head_mask has {len(self.head_mask)} layers, expected {self.num_layers}")
            self.head_mask = [None if m is None else np.asarray(m, dtype=bool) for m in self.head_mask]
            for layer, (m, r) in enumerate(zip(self.head_mask, self.retained)):
                if m is None:
                    continue
                if m.ndim != 2 or m.shape[1] != r.size or int(m.sum()) % m.shape[0]:
                    raise ValueError(f"head_mask[{layer}] must be [kv_heads, {r.size}] holding a "
                                     "multiple of kv_heads in all")
                if not m.any(axis=0).all() or not m[:, r >= self.tail_start].all():
                    raise ValueError(f"head_mask[{layer}]: every position must be held by some "
                                     "head, the current step by all")

    @property
    def tail_start(self) -> int:
        """First position of the current step (kept by every method)."""
        return self.seq_len - self.protected_tail

    def tail_count(self, layer: int) -> int:
        r = self.retained[layer]
        return int(r.size - np.searchsorted(r, self.tail_start))

    def held(self) -> np.ndarray:
        """int64 ``[L]``: how many positions each layer holds now (per KV head, when
        :attr:`head_mask` restricts heads: the layer's head-slots / ``kv_heads``)."""
        masks = self.head_mask or [None] * self.num_layers
        return np.array([r.size if m is None else int(m.sum()) // m.shape[0]
                         for r, m in zip(self.retained, masks)], dtype=np.int64)

    def head_held(self, layer: int, kv_heads: int) -> np.ndarray:
        """bool ``[kv_heads, n_l]``: which retained positions of ``layer`` each KV head holds."""
        m = None if self.head_mask is None else self.head_mask[layer]
        if m is None:
            return np.ones((kv_heads, self.retained[layer].size), dtype=bool)
        if m.shape[0] != kv_heads:
            raise ValueError(f"head_mask[{layer}] has {m.shape[0]} heads, the statistics {kv_heads}")
        return m

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
    #: per-head methods: per layer bool ``[kv_heads, len(kept[l])]``, which kept positions each
    #: KV head keeps (engines mask the others within the layer); None: every head keeps all
    head_mask: Optional[list[np.ndarray]] = None

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


#: When a method compresses (:meth:`KVMethod.due`); DESIGN.md §4 "Schedules".


def _plain(v: Any) -> Any:
    """A JSON-serialisable copy of a field value (numpy scalars and tuples made plain)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@dataclass(frozen=True)
class KVMethod(ABC):
    """A KV selection rule, as a frozen dataclass whose fields are all its options (kvpress
    style: ``repr`` shows them, :meth:`record` writes them). Subclasses set ``name``, add their
    options as fields with their authors' defaults, validate them in ``__post_init__`` (calling
    ``super().__post_init__()``; errors name the field) and implement :meth:`select` (and, when the
    per-layer budget split is not uniform, :meth:`layer_weights` or :meth:`allocation`).

    ``budget``: the fraction ``b`` of Full KV kept (module docstring). ``schedule``: one of
    :data:`SCHEDULES` -- ``continuous`` (prefill end, then every ``interval`` decode steps when
    over budget) or ``prefill`` (prefill end only; outputs kept). ``interval``: decode steps
    between budget checks under ``continuous`` (ignored under ``prefill``).
    """

    name: ClassVar[str] = ""
    #: which :class:`AttentionStats` field the engine must fill (None: none needed)
    needs_attention: ClassVar[Optional[str]] = None
    #: True: one decision per layer group (every layer of a group keeps the same set; the layers
    #: of a group must hold the same positions). False: per-layer decisions.
    per_group: ClassVar[bool] = False
    #: per-head methods only. True: a layer's heads keep ``kv_heads * allocation`` head-slots in
    #: all, each head as many as its scores win (AdaKV); False: each head keeps the allocation.
    adaptive_heads: ClassVar[bool] = False
    #: fields :meth:`record` leaves out while they hold the given value: an option added after
    #: runs were recorded keeps those runs' records (and resume keys) as they were.
    record_omits: ClassVar[dict] = {}

    budget: float
    schedule: str = "continuous"
    interval: int = 1

    def __post_init__(self):
        self._set("budget", float(self.budget))
        self._check("budget", 0.0 < self.budget <= 1.0, "must be in (0, 1]")
        self._check("schedule", self.schedule in SCHEDULES, f"must be one of {', '.join(SCHEDULES)}")
        self._check("interval", isinstance(self.interval, (int, np.integer)) and self.interval >= 1,
                    "must be an integer >= 1")
        self._set("interval", int(self.interval))

    # ---- helpers for subclasses' __post_init__ (the dataclass is frozen) ----

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _check(self, name: str, ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(f"{self.name or type(self).__name__}: {name} {what}, got {getattr(self, name)!r}")

    # ---- configuration record ----

    def record(self) -> dict:
        """JSON-serialisable ``{"name": ..., <every field>: value}``; ``make_method(**record)``
        rebuilds an equal method (pask: pass the policy object back as ``policy``). A field in
        :attr:`record_omits` is left out while it holds the value named there."""
        out = {"name": self.name}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.init and not (f.name in self.record_omits and value == self.record_omits[f.name]):
                out[f.name] = _plain(value)
        return out

    # ---- the contract ----

    def due(self, decode_step: int, slots_held: int, seq_len: int, num_layers: int) -> bool:
        """Whether the engine should call :meth:`select` now. ``decode_step`` 0 is prefill end
        (``seq_len`` = the prompt length); under ``continuous`` also every ``interval``-th
        decode step, under ``prefill`` never again; and only when the cache holds more than
        ``floor(b*L*T)`` slots (``slots_held``: per KV head, as :meth:`CacheView.held`)."""
        return self.checks_at(decode_step) and \
            slots_held > int(np.floor(self.budget * num_layers * seq_len + 1e-9))

    def checks_at(self, decode_step: int) -> bool:
        """The schedule half of :meth:`due`: whether the budget is checked at ``decode_step`` at all
        (``prefill``: only at 0; ``continuous``: every ``interval``-th step)."""
        return decode_step == 0 if self.schedule == "prefill" else decode_step % self.interval == 0

    def layer_weights(self, view: CacheView) -> np.ndarray:
        """float ``[L]``: relative share of the budget per layer (uniform here)."""
        return np.ones(view.num_layers)

    def allocation(self, view: CacheView) -> np.ndarray:
        """int64 ``[L]``: how many positions each layer keeps (per KV head for per-head
        methods). Default: every layer keeps its protected tail, and the rest of
        ``floor(b*L*T)`` is split by :meth:`layer_weights`, never more than a layer holds (what
        one layer cannot take goes to the others)."""
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

    def select_padded(self, batch) -> np.ndarray:
        """bool ``[L, R, T]``: what :meth:`select` keeps for each request of ``batch``
        (:class:`~sglang_pask.methods.padded.PaddedBatch`), every layer. This default calls
        :meth:`select` per request; a method may override it with array operations over the whole
        batch, which must give the same kept sets bit for bit. A row with its own budget
        (``batch.budgets``) is selected by this method at that budget."""
        out = np.zeros_like(batch.held)
        budgets = batch.budgets_for(self.budget)
        for r in range(batch.size):
            method = self if budgets[r] == self.budget else replace(self, budget=float(budgets[r]))
            batch.mask_of(method.select(batch.view(r)).kept, r, out)
        return out
