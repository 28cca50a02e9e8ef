"""PASK: per-layer-group persistence from a policy table (DESIGN.md §1, §4). No attention needed.

Budget arithmetic, per compression point (``S = floor(b*L*T)``, ``L`` layers, group ``g`` of
``n_g`` layers, all of which hold the same positions; counts below are per layer of the group):

1. **Anchors**: the current step, the first ``sinks`` positions, the last ``recent_window``.
2. **Protected mass**: for each class ``c``, ``ceil(floor[g][c] * N_gc)`` of the ``N_gc``
   class-``c`` tokens the group holds must stay (anchors of class ``c`` count towards it; the
   rest are its most recent non-anchor tokens).
3. **Mandatory** ``m_g = min(anchors + protected, S // L)``: what does not fit the group's even
   share is **scaled down in priority order**: the current step, sinks, the recent window (newest
   first), then protected classes in descending sensitivity (``policy.priority[g]``), so the
   least sensitive classes lose their floors first.
4. **Residual** ``R = S - sum_g n_g m_g`` is split across groups by ``residual_share`` (water-
   filling: a group that cannot use its share passes it on), in whole per-layer units, so at
   most ``max n_g - 1`` slots of ``S`` go unused.
5. **Within a group** the residual is filled, in order, by floor mass step 3 scaled down (same
   order), span delimiters -- ``SCHEMA_PUNCT`` / ``OUT_DELIM`` tokens right next to a granted
   protected token (the quotes, colons and commas of a protected name: research/tiny_spike.md
   found isolated structure tokens corrupt the JSON; ``span_delimiters=False`` turns this off)
   -- then by class priority, then recency. With a residual scorer (field ``residual``,
   :class:`~.residual.ResidualScorer`, blend ``beta > 0``) the residual's score inside its tier
   is ``C * ((1 - beta) * p + beta * v)``: ``p = (C - 1 - rank + recency) / C`` in [0, 1) (the
   lookup's order), ``v`` in [0, 1] SnapKV's vote -- the observation window's attention (last
   :data:`~.residual.OBSERVATION` queries) summed over the group's layers, max-pooled over the
   prefix (kernel :data:`~.residual.KERNEL`) and divided by its maximum; the window's own
   positions vote 1. ``beta = 1`` is SnapKV's order among the residual, ``beta = 0``
   the lookup. ``stat = "kvzip"`` takes ``v`` from KVzip's context-reconstruction scores instead
   (:attr:`~.base.AttentionStats.kvzip_heads`: the most attention a position receives while the
   model repeats the context; query-agnostic), summed over the group's layers, the most over the
   KV heads, divided by its maximum, no pooling.
6. **Head split** (the scorer's ``per_head``): each KV head of a group keeps its own set of the
   group's allocation -- the same anchors, floors and delimiters (their tiers are above the
   residual's), the residual ranked by that head's votes (its own ``window_heads`` or
   ``kvzip_heads`` row, pooled and scaled as above) -- and the layer holds the union (AdaKV's and
   SnapKV's per-head form; budgets count per head, :mod:`.base`).

7. **Ranked split** (the scorer's ``split = "scores"``): the residual is split across
   groups not by ``residual_share`` but by one ranking of every group's (every KV head's, with
   ``per_head``) residual candidates -- the held positions outside the granted mandatory set, by
   their tiered scores with the votes scaled by the **largest over all groups and heads** (not
   each set's own), each group's statistic the **mean** over its layers -- so a group whose
   attention is concentrated keeps few positions and a diffuse one many (KVzip's one ranking over
   layers and heads; AdaKV's over heads). Each candidate costs its group's layer count; the top
   ones within ``R`` (per KV head: ``H * R``) give each group's weight, and step 4 water-fills
   ``R`` by those weights instead of the shares (all zero: the shares). With ``per_head`` a
   group's heads then share ``H`` times its allocation by the same scores (AdaKV's split: each
   head first keeps its mandatory set, the rest go to the best scores over the group's heads), so
   heads keep different counts (:attr:`~.base.KVMethod.adaptive_heads`).

Every layer of a group keeps the same set (one decision per group; per head with ``per_head``).

One implementation serves one request and many: :meth:`Pask.select` runs the batched lookup
(:meth:`Pask._lookup`, array operations over :class:`~.padded.PaddedBatch` rows) on its view as a
one-row batch, then the residual scorer and the per-request split; :meth:`Pask.select_padded` runs
the same lookup over every request (no scorer: a batch carries no attention statistics).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Optional

import numpy as np

from sglang_pask.methods.base import CacheView, KVMethod, Selection, split_slots
from sglang_pask.methods.learned import check_scorer_option
from sglang_pask.methods.padded import PaddedBatch, top_n_mask
from sglang_pask.methods.residual import OBSERVATION, ResidualScorer
from sglang_pask.methods.scorer import adaptive_split, top_n, union_selection
from sglang_pask.policy.digest import policy_hash
from sglang_pask.policy.residual import LEGACY
from sglang_pask.structure.classes import StructClass

if TYPE_CHECKING:
    from sglang_pask.policy import Policy

C = len(StructClass)
DELIMITERS = np.array([StructClass.SCHEMA_PUNCT, StructClass.OUT_DELIM])
# Score tiers (higher kept first; + recency in [0, 1) inside a tier; the current step is +inf).
SINK, WINDOW = 3 * C + 10, 3 * C + 9
PROTECTED = 2 * C + 5  # + (C - 1 - rank): [2C+5, 3C+4]
DELIMITER = 2 * C + 4
RESIDUAL = C + 2  # + (C - 1 - rank): [C+2, 2C+1]; blended: + [0, C], still below DELIMITER
#: the old keywords a pask takes for its residual scorer (:meth:`Pask.with_options`; its record writes them)
OLD_OPTIONS = tuple(LEGACY.values())


NO_POLICY = "pask needs a policy: pass --policy FILE (or policy=... in Python)"


class Lookup(NamedTuple):
    """The lookup's tiers over a batch's rows, per group ``g``: ``held[g]``, ``score[g]`` (the tiers
    with span delimiters promoted), ``order[g]`` (``C - 1 - rank + recency``, the class order the
    residual's blend reads), each ``[R, T]``; ``demand`` and ``mand`` int64 ``[G, R]`` (step 3)."""

    held: list
    score: list
    order: list
    demand: np.ndarray
    mand: np.ndarray


@dataclass(frozen=True)
class Pask(KVMethod):
    """Parser-aware, structure-conditioned persistence (this project; no paper yet): the policy's
    floors per (layer group, class), residual by ``residual_share``, class priority then
    recency, sinks and a recent window (module docstring: the exact arithmetic), composed with an
    optional residual scorer that re-ranks the residual by attention votes.

    Fields: ``budget`` (None: the policy's), ``schedule`` and ``interval`` (None: the policy's
    operating point, :attr:`~sglang_pask.policy.Policy.point`; a format-1 policy: ``continuous``,
    1), ``policy`` (required; compared, hashed and recorded by
    :func:`~sglang_pask.policy.digest.policy_hash`, shown in ``repr`` by its name only),
    ``span_delimiters``, ``residual`` (a :class:`~.residual.ResidualScorer`; None: the policy's
    ``residual`` block, none for the pure lookup; one whose blend is 0 switches a policy's scorer
    off). Sinks and the recent window are the policy's (:attr:`sinks`, :attr:`window`).

    :meth:`record` writes the scorer as the four old keywords (``attention_blend``,
    ``attention_stat``, ``head_split``, ``residual_split``, each left out at its default), as
    records did before the scorer was a part; :func:`~sglang_pask.methods.make_method` takes them
    (:meth:`with_options`)."""

    name = "pask"
    per_group = True
    #: the scorer records as its old keywords (:meth:`record`); none: as before it existed
    record_omits = {"residual": None, "scorer": "", "scorer_sha256": ""}
    #: KVzip's defaults for the ``kvzip`` statistic's reconstruction (the engine reads them as it
    #: reads :class:`~.kvzip.KVzip`'s): chunk length, and the first positions every chunk sees
    chunk_size: ClassVar[int] = 2048
    n_sink: ClassVar[int] = 4

    budget: Optional[float] = None
    schedule: Optional[str] = None
    interval: Optional[int] = None
    policy: Optional["Policy"] = field(default=None, compare=False, repr=False)
    span_delimiters: bool = True
    residual: Optional[ResidualScorer] = None
    #: the learned scorer's file and its pin, read by a residual whose statistic is ``learned``
    #: (the engines load it as they load :class:`~.kvzap.KVzap`'s; empty otherwise). Empty with a
    #: policy that pins one: the policy's (:attr:`~sglang_pask.policy.Policy.scorer_path`)
    scorer: str = ""
    scorer_sha256: str = ""
    policy_name: Optional[str] = field(init=False, default=None)
    policy_sha256: str = field(init=False, default="", repr=False)

    @classmethod
    def with_options(cls, budget: Optional[float], policy: "Policy", **options) -> "Pask":
        """A pask from keyword options, the old residual keywords (:data:`OLD_OPTIONS`; None: not
        given) read over the policy's scorer."""
        old = {k: options.pop(k) for k in OLD_OPTIONS if k in options}
        if any(v is not None for v in old.values()):
            if options.get("residual") is not None:
                raise ValueError(f"pask: {', '.join(old)} and residual name the residual scorer twice")
            base = ResidualScorer.from_block(policy.residual) if policy is not None else None
            options["residual"] = ResidualScorer.from_legacy(old, base)
        return cls(budget, policy=policy, **options)

    def __post_init__(self):
        if self.policy is None:
            raise ValueError(NO_POLICY)
        self._set("budget", self.policy.budget if self.budget is None else self.budget)
        point = self.policy.point
        if self.schedule is None:
            self._set("schedule", point.schedule if point is not None else "continuous")
        if self.interval is None:
            self._set("interval", point.interval if point is not None else 1)
        super().__post_init__()
        self._check("span_delimiters", isinstance(self.span_delimiters, (bool, np.bool_)), "must be a bool")
        residual = ResidualScorer.from_block(self.policy.residual) if self.residual is None else self.residual
        self._check("residual", residual is None or isinstance(residual, ResidualScorer),
                    "must be a ResidualScorer or None")
        if residual == ResidualScorer(0.0):  # switched off with nothing else to record: the lookup
            residual = None
        self._set("residual", residual)
        # instance attributes over the class's: the registry's pask needs no statistics and keeps
        # one set per group; one with a scorer needs its statistic (the engines ask the instance),
        # and with per_head keeps one set per KV head
        scorer = self.residual_scorer
        if not self.scorer and scorer is not None and scorer.stat == "learned" and self.policy.scorer_path:
            # the policy's own scorer (its residual pins the file beside it), named as the policy's
            # folder was (an engine given an absolute policy path records it from the working
            # folder, so that records agree across machines)
            path = self.policy.scorer_path
            if os.path.isabs(path) and not (rel := os.path.relpath(path)).startswith(".."):
                path = rel
            self._set("scorer", path)
            self._set("scorer_sha256", self.policy.residual.scorer_sha256)
        check_scorer_option(self)
        self._check("scorer", not self.scorer or (scorer is not None and scorer.stat == "learned"),
                    "is read only by a residual whose statistic is 'learned'")
        self._set("needs_attention", scorer.needs_attention if scorer else None)
        self._set("per_head", bool(scorer and scorer.per_head))
        self._set("adaptive_heads", bool(scorer and scorer.per_head and scorer.ranked))
        self._set("policy_name", self.policy.name)
        self._set("policy_sha256", policy_hash(self.policy))

    def record(self) -> dict:
        out = super().record()
        out.pop("residual", None)
        if self.residual is not None:  # the old keywords, each left out at its default
            defaults = ResidualScorer(0.0).legacy()
            out.update({k: v for k, v in self.residual.legacy().items() if v != defaults[k]})
        out["policy"] = {"name": self.policy.name, "sha256": self.policy_sha256}
        if "attention_blend" not in out and self.policy.residual is not None and self.policy.residual.blend:
            # 0 over a blending policy
            out["attention_blend"] = 0.0
        return out

    @property
    def residual_scorer(self) -> Optional[ResidualScorer]:
        """The residual scorer when it is on (blend > 0), else None (the pure lookup)."""
        return self.residual if self.residual is not None and self.residual.active else None

    @property
    def sinks(self) -> int:
        return int(self.policy.sinks)

    @property
    def window(self) -> int:
        return int(self.policy.recent_window)

    @property
    def attention_window(self) -> int:
        """Queries the window statistic covers (the engines record that many)."""
        return OBSERVATION

    @cached_property
    def floors(self) -> np.ndarray:
        return self.policy.floor_table()  # [G, C]

    @cached_property
    def ranks(self) -> np.ndarray:
        return self.policy.rank_table()  # [G, C], 0 = most sensitive

    @cached_property
    def shares(self) -> np.ndarray:
        return np.asarray(self.policy.residual_share, dtype=np.float64)

    # ---- the lookup, over the rows of a batch (one request: a one-row batch) ----

    def _check_layout(self, what: str, num_layers: int, groups, held) -> None:
        """``held[layer]``: what layer ``layer`` holds (any form ``np.array_equal`` compares)."""
        groups = [list(g) for g in groups]
        if num_layers != self.policy.model.num_layers or groups != self.policy.groups:
            raise ValueError(f"pask: the {what}'s {num_layers} layers in groups {groups} do not "
                             f"match the policy's {self.policy.model.num_layers} in {self.policy.groups}")
        for g, layers in enumerate(groups):
            for layer in layers[1:]:
                if not np.array_equal(held[layer], held[layers[0]]):
                    raise ValueError(f"pask keeps one set per group, but layers {layers[0]} and "
                                     f"{layer} of group {g} hold different positions")

    def _tiers(self, batch: PaddedBatch, g: int):
        """Steps 1-2 and the tiers for group ``g`` of every row: (held, scores without delimiter
        promotion, mandatory mask (anchors + protected), protected mask, recency, class order),
        each ``[R, T]``."""
        held = batch.held[batch.groups[g][0]]
        pos = batch.positions
        cls = batch.classes
        rank = self.ranks[g][cls]
        last = np.where(held, pos, -1).max(axis=1, initial=-1)  # held[-1] per request
        rec = pos / (last[:, None] + 1.0)  # recency(held) at the held positions, bit for bit
        sink = pos + batch.starts[:, None] < self.sinks  # sinks are the sequence's first tokens
        window = pos >= (batch.seq_lens - self.window)[:, None]
        anchor = sink | window | (pos >= batch.tail_start[:, None])
        protected = np.zeros_like(held)
        for c in np.flatnonzero(self.floors[g] > 0.0):
            of_c = held & (cls == c)
            count = of_c.sum(axis=1)
            if not count.any():
                continue
            need = np.ceil(self.floors[g, c] * count - 1e-9).astype(np.int64) - (of_c & anchor).sum(axis=1)
            cand = of_c & ~anchor
            from_end = np.cumsum(cand[:, ::-1], axis=1)[:, ::-1]  # candidates at or after t
            protected |= cand & (from_end <= need[:, None])  # the newest ``need``
        score = RESIDUAL + (C - 1 - rank) + rec
        score = np.where(protected, PROTECTED + (C - 1 - rank) + rec, score)
        score = np.where(window, WINDOW + rec, score)
        score = np.where(sink, SINK + rec, score)
        return held, score, held & (anchor | protected), protected, rec, C - 1 - rank + rec

    def _lookup(self, batch: PaddedBatch, total: np.ndarray) -> Lookup:
        """Steps 1-3 and 5's delimiters for every row of ``batch`` at ``total`` slots (int64
        ``[R]``): the tiers, the mandatory counts, and the span delimiters next to the granted
        protected tokens promoted to their tier."""
        tail = batch.protected_tail
        tiers = [self._tiers(batch, g) for g in range(len(batch.groups))]
        demand = np.stack([t[2].sum(axis=1) for t in tiers])  # [G, R]
        mand = self._mandatory(total[None, :], batch.num_layers, tail, demand)
        scores = []
        for g, (held, score, mandatory, protected, rec, _) in enumerate(tiers):
            if self.span_delimiters and protected.any():
                granted = top_n_mask(held, np.where(mandatory, score, -np.inf), mand[g], batch.tail_start) & protected
                near = np.zeros_like(granted)
                near[:, 1:] |= granted[:, :-1]  # position + 1 of a granted one
                near[:, :-1] |= granted[:, 1:]  # position - 1
                delim = held & near & np.isin(batch.classes, DELIMITERS) & ~mandatory
                score = np.where(delim, DELIMITER + rec, score)
            scores.append(score)
        return Lookup([t[0] for t in tiers], scores, [t[5] for t in tiers], demand, mand)

    # ---- one request ----

    def _plan(self, view: CacheView):
        """(allocation [L], per group its units as (positions, scores) or None, info)."""
        self._check_layout("view", view.num_layers, view.groups, view.retained)
        held = view.held()
        total = view.budget_slots(self.budget)
        tail = view.protected_tail
        if self.budget >= 1.0 or view.num_layers * tail >= total:
            alloc = held if self.budget >= 1.0 else np.full(view.num_layers, tail, dtype=np.int64)
            return alloc, None, {}
        size = np.array([len(g) for g in view.groups], dtype=np.int64)
        gheld = np.array([held[g[0]] for g in view.groups], dtype=np.int64)
        lookup = self._lookup(PaddedBatch.from_view(view), np.array([total]))
        demand, mand = lookup.demand[:, 0], lookup.mand[:, 0]
        units = []  # per group, its units (the group, or each KV head) as (positions, scores)
        votes = self.residual_scorer.votes(view) if self.residual_scorer else None
        for g, layers in enumerate(view.groups):
            hp = view.retained[layers[0]]
            score = lookup.score[g][0, hp]
            if votes is None:
                units.append([(hp, score)])
                continue
            order = lookup.order[g][0, hp]
            # the group's unit blends from the class order, a KV head's from its tier score (two
            # float forms of one value, each kept bit for bit)
            units.append([(hp, self._blend(score, order, v)) if own is None else
                          (hp[own], self._blend(score[own], score[own] - RESIDUAL, v)) for own, v in votes[g]])
        shares, ranked = self.shares, {}
        if self.residual_scorer and self.residual_scorer.ranked:
            counts = self._ranked_shares(view, units, mand, size, total)
            shares = counts if counts.sum() > 0 else shares
            ranked = {"ranked_shares": [round(float(x), 6) for x in shares]}
        mand, keep, per_layer = self._split(total, view.num_layers, tail, size, gheld, demand, shares)
        alloc = np.empty(view.num_layers, dtype=np.int64)
        for g, layers in enumerate(view.groups):
            alloc[list(layers)] = keep[g]
        info = {"demand": demand.tolist(), "mandatory": mand.tolist(), "residual": per_layer.tolist(), **ranked}
        return alloc, units, info

    def _blend(self, score: np.ndarray, order: np.ndarray, votes: np.ndarray) -> np.ndarray:
        """``score`` with its residual tier re-ranked by ``votes`` (step 5): ``RESIDUAL + C * ((1 -
        beta) * p + beta * v)``, ``p = order / C`` the lookup's order in [0, 1); the other tiers
        unchanged."""
        b = self.residual_scorer.blend
        return np.where(score < DELIMITER, RESIDUAL + C * ((1.0 - b) * order / C + b * votes), score)

    def _ranked_shares(self, view: CacheView, units: list, mand: np.ndarray, size: np.ndarray,
                       total: int) -> np.ndarray:
        """Step 7: float ``[G]``, each group's slots among the best residual candidates of every
        group and unit (head) within the residual ``R`` (per head: ``H * R``); each costs its
        group's layer count. Ties: the more recent position, then the lower group and unit."""
        rest = total - int((size * mand).sum())
        cand, pos, grp, unit = [], [], [], []
        for g, per in enumerate(units):  # per group, its units
            for u, (p, sc) in enumerate(per):
                granted = top_n(p, sc, min(int(mand[g]), p.size), view.tail_start)
                free = (p < view.tail_start) & ~np.isin(p, granted)
                cand.append(sc[free])
                pos.append(p[free])
                grp.append(np.full(int(free.sum()), g))
                unit.append(np.full(int(free.sum()), u))
        cand, pos, grp, unit = map(np.concatenate, (cand, pos, grp, unit))
        order = np.lexsort((unit, grp, -pos, -cand))
        cost = size[grp[order]]
        taken = order[np.cumsum(cost) <= len(units[0]) * rest]
        return np.bincount(grp[taken], weights=size[grp[taken]], minlength=len(view.groups)).astype(np.float64)

    @staticmethod
    def _mandatory(total, num_layers: int, tail: int, demand: np.ndarray) -> np.ndarray:
        """Step 3: per group, the mandatory count within the even share (the tail at least)."""
        return np.maximum(tail, np.minimum(demand, total // num_layers))

    def _split(self, total: int, num_layers: int, tail: int, size: np.ndarray, gheld: np.ndarray,
               demand: np.ndarray, shares: Optional[np.ndarray] = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Steps 3-4 of the module docstring for one request: per group (int64 ``[G]``) the
        mandatory count, the kept count and the residual per layer, from the total budget
        ``total``, the groups' sizes, what each holds and its mandatory demand; the residual by
        ``shares`` (None: the policy's ``residual_share``)."""
        shares = self.shares if shares is None else shares
        mand = self._mandatory(total, num_layers, tail, demand)
        rest = total - int((size * mand).sum())
        room = gheld - mand
        per_layer = split_slots(rest, shares, room * size) // size
        left = rest - int((size * per_layer).sum())
        for g in np.lexsort((np.arange(len(size)), -shares)):  # whole units that still fit
            extra = min(left // size[g], room[g] - per_layer[g])
            per_layer[g] += extra
            left -= extra * size[g]
        return mand, mand + per_layer, per_layer

    def allocation(self, view: CacheView) -> np.ndarray:
        return self._plan(view)[0]

    def select(self, view: CacheView) -> Selection:
        """Steps 1-7 for one request; with ``per_head`` one set per KV head (step 6: each the top
        ``alloc`` of the positions it holds; with the ranked split (step 7) the group's heads share
        ``H * alloc`` by their scores, each first keeping its mandatory set)."""
        alloc, units, info = self._plan(view)
        per_layer: list = [None] * view.num_layers
        for g, layers in enumerate(view.groups):
            held = view.retained[layers[0]]
            n = int(alloc[layers[0]])
            if units is None:  # only the protected tails fit, or b = 1 (_plan's early return)
                owned = view.head_held(layers[0], self._heads(view)) if self.per_head else [None]
                parts = [held if own is None else held[own] for own in owned]
                sets = [top_n(p, np.zeros(p.size), n, view.tail_start) for p in parts]
            elif self.adaptive_heads:
                sets = adaptive_split(view, [p for p, _ in units[g]], [s for _, s in units[g]], n,
                                      int(info["mandatory"][g]))
            else:
                sets = [top_n(p, s, n, view.tail_start) for p, s in units[g]]
            for layer in layers:
                per_layer[layer] = [k.copy() for k in sets]
        if not self.per_head:
            return Selection([sets[0] for sets in per_layer],
                             {"method": self.name, "allocation": alloc.tolist(), **info})
        sel = union_selection(self.name, alloc, per_layer)
        sel.info.update(info)
        return sel

    def _heads(self, view: CacheView) -> int:
        """The KV heads of the scorer's statistic (checked as :meth:`.residual.ResidualScorer.votes` checks it)."""
        return self.residual_scorer.stats(view)[0].shape[0]

    # ---- many requests at once (the server's batched compression) ----

    def select_padded(self, batch) -> np.ndarray:
        """:meth:`select` for every request of ``batch`` (:class:`~.padded.PaddedBatch`): the same
        lookup (:meth:`_lookup`) over all rows at once; per request only the O(groups) budget
        arithmetic of :meth:`_split` runs in Python. Equal to :meth:`select` request by request. A
        residual scorer that ranks within each group by a statistic read group-wide
        (:attr:`~.residual.ResidualScorer.batched`: the learned scorer's policies of ``--equal-pools``)
        blends its votes from ``batch.stats`` (:meth:`~.residual.ResidualScorer.padded_votes`)."""
        scorer = self.residual_scorer
        if scorer and not (scorer.batched and batch is not None and batch.stats is not None
                           and batch.stats_field == scorer.needs_attention):
            raise ValueError("pask: the batched selection has no attention statistics for this residual "
                             f"(blend {scorer.blend:g}, {scorer.stat}, per_head={scorer.per_head}, "
                             f"split={scorer.split}); use select per request")
        L, G = batch.num_layers, len(batch.groups)
        self._check_layout("batch", L, batch.groups, batch.held)
        tail = batch.protected_tail
        size = np.array([len(g) for g in batch.groups], dtype=np.int64)
        budgets = batch.budgets_for(self.budget)  # [R]
        total = np.floor(budgets * L * batch.seq_lens + 1e-9).astype(np.int64)  # budget_slots
        lookup = self._lookup(batch, total)
        gheld = np.stack([h.sum(axis=1) for h in lookup.held])  # [G, R]
        keep = np.empty((G, batch.size), dtype=np.int64)
        flat = (budgets >= 1.0) | (L * tail >= total)  # the early return of _plan: no scores
        for r in range(batch.size):  # O(G) arithmetic per request, as _plan
            if flat[r]:
                keep[:, r] = gheld[:, r] if budgets[r] >= 1.0 else tail
                continue
            keep[:, r] = self._split(int(total[r]), L, tail, size, gheld[:, r], lookup.demand[:, r])[1]
        out = np.zeros_like(batch.held)
        for g, (held, score) in enumerate(zip(lookup.held, lookup.score)):
            if scorer:  # as _plan: the residual tier re-ranked by the group's votes
                score = self._blend(score, lookup.order[g], scorer.padded_votes(batch.stats, held, batch.groups[g]))
            chosen = top_n_mask(held, np.where(flat[:, None], 0.0, score), keep[g], batch.tail_start)
            out[list(batch.groups[g])] = chosen[None]
        return out
