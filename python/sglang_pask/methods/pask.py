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
   -- then by class priority, then recency. With ``attention_blend = beta > 0`` the residual's
   score inside its tier is ``C * ((1 - beta) * p + beta * v)``: ``p = (C - 1 - rank + recency)
   / C`` in [0, 1) (the lookup's order), ``v`` in [0, 1] SnapKV's vote -- the observation
   window's attention (last :data:`OBSERVATION` queries) summed over the group's layers, max-
   pooled over the prefix (kernel :data:`KERNEL`) and divided by its maximum; the window's own
   positions vote 1. ``beta = 1`` is SnapKV's order among the residual, ``beta = 0`` the lookup.
   ``attention_stat = "kvzip"`` takes ``v`` from KVzip's context-reconstruction scores instead
   (:attr:`~.base.AttentionStats.kvzip_heads`: the most attention a position receives while the
   model repeats the context; query-agnostic), summed over the group's layers, the most over the
   KV heads, divided by its maximum, no pooling.
6. **Head split** (``head_split``, with a blend): each KV head of a group keeps its own set of the
   group's allocation -- the same anchors, floors and delimiters (their tiers are above the
   residual's), the residual ranked by that head's votes (its own ``window_heads`` or
   ``kvzip_heads`` row, pooled and scaled as above) -- and the layer holds the union (AdaKV's and
   SnapKV's per-head form; budgets count per head, :mod:`.base`).

7. **Ranked split** (``residual_split = "scores"``, with a blend): the residual is split across
   groups not by ``residual_share`` but by one ranking of every group's (every KV head's, with
   ``head_split``) residual candidates -- the held positions outside the granted mandatory set, by
   their tiered scores with the votes scaled by the **largest over all groups and heads** (not
   each set's own), each group's statistic the **mean** over its layers -- so a group whose
   attention is concentrated keeps few positions and a diffuse one many (KVzip's one ranking over
   layers and heads; AdaKV's over heads). Each candidate costs its group's layer count; the top
   ones within ``R`` (per KV head: ``H * R``) give each group's weight, and step 4 water-fills
   ``R`` by those weights instead of the shares (all zero: the shares). With ``head_split`` a
   group's heads then share ``H`` times its allocation by the same scores (AdaKV's split: each
   head first keeps its mandatory set, the rest go to the best scores over the group's heads), so
   heads keep different counts (:attr:`~.base.KVMethod.adaptive_heads`).

Every layer of a group keeps the same set (one decision per group; per head with ``head_split``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar, Optional

import numpy as np

from sglang_pask.methods.base import CacheView, KVMethod, Selection, split_slots
from sglang_pask.methods.scorer import adaptive_split, max_pool, recency, top_n, union_selection
from sglang_pask.policy.digest import policy_hash
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
#: the attention-informed residual's observation window and pooling kernel (SnapKV's defaults)
OBSERVATION, KERNEL = 32, 7
#: the statistics the residual may be blended with, and the engine's field for each (group-wide,
#: per KV head)
STATS = {"window": ("window", "window_heads"), "kvzip": ("kvzip_heads", "kvzip_heads")}
#: how the residual is split across groups (module docstring steps 4 and 7)
SPLITS = ("share", "scores")


NO_POLICY = "pask needs a policy: pass --policy FILE (or policy=... in Python)"


@dataclass(frozen=True)
class Pask(KVMethod):
    """Parser-aware, structure-conditioned persistence (this project; no paper yet): the policy's
    floors per (layer group, class), residual by ``residual_share``, class priority then
    recency, sinks and a recent window (module docstring: the exact arithmetic). Needs no
    attention statistics.

    Fields: ``budget`` (None: the policy's), ``schedule`` and ``interval`` (None: the policy's
    operating point, :attr:`~sglang_pask.policy.Policy.point`; a format-1 policy: ``continuous``,
    1), ``policy`` (required; compared, hashed and recorded by
    :func:`~sglang_pask.policy.digest.policy_hash`, shown in ``repr`` by its name only),
    ``span_delimiters``, ``attention_blend`` (None: the policy's; > 0 ranks the residual partly by
    attention votes and then needs attention statistics), ``attention_stat`` (None: the policy's;
    ``window``: SnapKV's observation-window votes, ``kvzip``: KVzip's reconstruction scores) and
    ``head_split`` (None: the policy's; True: one set per KV head, module docstring step 6); both
    matter only with a blend; ``residual_split`` (None: the policy's; ``share``: by
    ``residual_share``, ``scores``: by one ranking over groups and heads, module docstring step
    7; needs a blend). Sinks and the recent window are the policy's (:attr:`sinks`,
    :attr:`window`)."""

    name = "pask"
    per_group = True
    # the pure lookup records as before these fields existed
    record_omits = {"attention_blend": 0.0, "attention_stat": "window", "head_split": False,
                    "residual_split": "share"}
    #: KVzip's defaults for the ``kvzip`` statistic's reconstruction (the engine reads them as it
    #: reads :class:`~.kvzip.KVzip`'s): chunk length, and the first positions every chunk sees
    chunk_size: ClassVar[int] = 2048
    n_sink: ClassVar[int] = 4

    budget: Optional[float] = None
    schedule: Optional[str] = None
    interval: Optional[int] = None
    policy: Optional["Policy"] = field(default=None, compare=False, repr=False)
    span_delimiters: bool = True
    attention_blend: Optional[float] = None
    attention_stat: Optional[str] = None
    head_split: Optional[bool] = None
    residual_split: Optional[str] = None
    policy_name: Optional[str] = field(init=False, default=None)
    policy_sha256: str = field(init=False, default="", repr=False)

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
        blend = self.policy.attention_blend if self.attention_blend is None else self.attention_blend
        self._check("attention_blend", isinstance(blend, (int, float)) and 0.0 <= blend <= 1.0, "must be in [0, 1]")
        self._set("attention_blend", float(blend))
        stat = self.policy.attention_stat if self.attention_stat is None else self.attention_stat
        self._check("attention_stat", stat in STATS, f"must be one of {', '.join(STATS)}")
        self._set("attention_stat", stat)
        split = self.policy.head_split if self.head_split is None else self.head_split
        self._check("head_split", isinstance(split, (bool, np.bool_)), "must be a bool")
        self._set("head_split", bool(split))
        rsplit = self.policy.residual_split if self.residual_split is None else self.residual_split
        self._check("residual_split", rsplit in SPLITS, f"must be one of {', '.join(SPLITS)}")
        self._check("residual_split", rsplit == "share" or blend > 0,
                    "'scores' ranks the residual by attention votes and needs attention_blend > 0")
        self._set("residual_split", rsplit)
        # instance attributes over the class's: the registry's pask needs no statistics and keeps
        # one set per group; an attention-informed one needs its statistic's (the engines ask the
        # instance), and with head_split keeps one set per KV head
        self._set("needs_attention", STATS[stat][int(self.head_split)] if blend > 0 else None)
        self._set("per_head", blend > 0 and self.head_split)
        self._set("adaptive_heads", self.per_head and rsplit == "scores")
        self._set("policy_name", self.policy.name)
        self._set("policy_sha256", policy_hash(self.policy))

    def record(self) -> dict:
        out = super().record()
        out["policy"] = {"name": self.policy.name, "sha256": self.policy_sha256}
        if "attention_blend" not in out and self.policy.attention_blend:  # 0 over a blending policy
            out["attention_blend"] = 0.0
        return out

    @property
    def blended(self) -> bool:
        return self.attention_blend > 0

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

    # ---- arithmetic ----

    def _check_view(self, view: CacheView) -> None:
        groups = [list(g) for g in view.groups]
        if view.num_layers != self.policy.model.num_layers or groups != self.policy.groups:
            raise ValueError(f"pask: the view's {view.num_layers} layers in groups {groups} do not "
                             f"match the policy's {self.policy.model.num_layers} in {self.policy.groups}")
        for g, layers in enumerate(groups):
            for layer in layers[1:]:
                if not np.array_equal(view.retained[layer], view.retained[layers[0]]):
                    raise ValueError(f"pask keeps one set per group, but layers {layers[0]} and "
                                     f"{layer} of group {g} hold different positions")

    @property
    def ranked(self) -> bool:
        """Whether the residual is split across groups by one ranking (step 7)."""
        return self.residual_split == "scores"

    def _tiers(self, view: CacheView, g: int, top: Optional[float] = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For group ``g``'s held positions: (scores without delimiter promotion, mandatory
        mask (anchors + protected), protected mask). ``top``: the votes' scale (step 7; None: the
        group's own maximum)."""
        held = view.retained[view.groups[g][0]]
        cls = view.classes[held]
        rank = self.ranks[g][cls]
        rec = recency(held)
        sink = held + view.start < self.sinks  # sinks are the sequence's first tokens
        window = held >= view.seq_len - self.window
        anchor = sink | window | (held >= view.tail_start)
        protected = np.zeros(held.size, dtype=bool)
        for c in np.unique(cls):
            f = self.floors[g, c]
            if f <= 0.0:
                continue
            of_c = cls == c
            need = math.ceil(f * int(of_c.sum()) - 1e-9) - int((of_c & anchor).sum())
            if need > 0:
                protected[np.flatnonzero(of_c & ~anchor)[-need:]] = True
        score = RESIDUAL + (C - 1 - rank) + rec
        if self.blended and not self.head_split:
            b = self.attention_blend
            votes = self._scaled(view, held, self._unit_votes(view, g)[0][1], top)
            score = RESIDUAL + C * ((1.0 - b) * (C - 1 - rank + rec) / C + b * votes)
        score = np.where(protected, PROTECTED + (C - 1 - rank) + rec, score)
        score = np.where(window, WINDOW + rec, score)
        score = np.where(sink, SINK + rec, score)
        return score, anchor | protected, protected

    def _stats(self, view: CacheView) -> list[np.ndarray]:
        if view.attention is None:
            raise ValueError(f"pask with attention_blend > 0 needs attention.{self.needs_attention}; the "
                             "engine gave no attention statistics")
        return view.attention.get(self.needs_attention, view)

    def _pooled(self, view: CacheView, held: np.ndarray, votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values ``[m]``, observed bool ``[m]``) before scaling: ``window``: the prefix max-
        pooled, the observation window marked observed; ``kvzip``: the votes, nothing observed."""
        if self.attention_stat == "kvzip":
            return np.asarray(votes, dtype=np.float64), np.zeros(held.size, dtype=bool)
        observed = held >= view.seq_len - view.attention.window_size
        out = np.zeros(held.size)
        out[~observed] = max_pool(votes[~observed], KERNEL)
        return out, observed

    def _scaled(self, view: CacheView, held: np.ndarray, votes: np.ndarray, top: Optional[float] = None
                ) -> np.ndarray:
        """float ``[m]`` in [0, 1] from raw ``votes`` ``[m]`` at ``held`` ``[m]`` (module docstring
        step 5): :meth:`_pooled`, divided by ``top`` (None: its own maximum over the unobserved; 0
        where that is 0), the observation window 1."""
        vals, observed = self._pooled(view, held, votes)
        if top is None:
            top = vals[~observed].max(initial=0.0)
        out = np.ones(held.size)
        out[~observed] = vals[~observed] / top if top > 0 else 0.0
        return out

    def _unit_votes(self, view: CacheView, g: int) -> list[tuple[Optional[np.ndarray], np.ndarray]]:
        """Group ``g``'s units -- one per KV head with ``head_split``, else the group -- as
        (owned: bool ``[m]`` over the group's held positions or None for all, raw votes over the
        owned positions): the statistic summed over the group's layers (the group-wide ``kvzip``
        statistic: the most over its KV heads first); with the ranked split (step 7) the mean."""
        stats = self._stats(view)
        layers = view.groups[g]
        scale = 1.0 / len(layers) if self.ranked else 1.0  # x * 1.0 == x: the sum, bit for bit
        if not self.head_split:
            per = [stats[li] if stats[li].ndim == 1 else stats[li].max(axis=0) for li in layers]
            return [(None, np.sum(per, axis=0) * scale)]
        owned = view.head_held(layers[0], stats[0].shape[0])  # [H, m]: the same in every layer of the group
        return [(own, np.sum([stats[li][h][own] for li in layers], axis=0) * scale) for h, own in enumerate(owned)]

    def _vote_top(self, view: CacheView) -> float:
        """Step 7's common scale: the largest pooled vote of any group's (KV head's) unobserved
        positions."""
        top = 0.0
        for g, layers in enumerate(view.groups):
            held = view.retained[layers[0]]
            for own, raw in self._unit_votes(view, g):
                pos = held if own is None else held[own]
                vals, observed = self._pooled(view, pos, raw)
                top = max(top, float(vals[~observed].max(initial=0.0)))
        return top

    def _blend(self, score: np.ndarray, votes: np.ndarray) -> np.ndarray:
        """``score`` with its residual tier re-ranked by ``votes`` (step 5): ``RESIDUAL + C * ((1 -
        beta) * p + beta * v)``, ``p`` the lookup's order in [0, 1); the other tiers unchanged."""
        b = self.attention_blend
        residual = score < DELIMITER
        return np.where(residual, RESIDUAL + C * ((1.0 - b) * (score - RESIDUAL) / C + b * votes), score)

    def _unit_scores(self, view: CacheView, g: int, score: np.ndarray, top: Optional[float]
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Group ``g``'s units as (positions, scores): with ``head_split`` per KV head its held
        positions and ``score`` with the residual re-ranked by its votes (:meth:`_blend`), else the
        group's held positions and ``score`` (already blended by :meth:`_tiers`)."""
        held = view.retained[view.groups[g][0]]
        if not self.head_split:
            return [(held, score)]
        return [(held[own], self._blend(score[own], self._scaled(view, held[own], raw, top)))
                for own, raw in self._unit_votes(view, g)]

    def _ranked_shares(self, view: CacheView, units: list, mand: np.ndarray, size: np.ndarray,
                       total: int) -> np.ndarray:
        """Step 7: float ``[G]``, each group's slots among the best residual candidates of every
        group and unit (head) within the residual ``R`` (per head: ``H * R``); each costs its
        group's layer count. Ties: the more recent position, then the lower group and unit."""
        rest = total - int((size * mand).sum())
        cand, pos, grp, unit = [], [], [], []
        for g, per in enumerate(units):  # per group, :meth:`_unit_scores`
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

    def _plan(self, view: CacheView):
        """(allocation [L], per-group scores or None, info)."""
        self._check_view(view)
        held = view.held()
        total = view.budget_slots(self.budget)
        tail = view.protected_tail
        if self.budget >= 1.0 or view.num_layers * tail >= total:
            alloc = held if self.budget >= 1.0 else np.full(view.num_layers, tail, dtype=np.int64)
            return alloc, None, {}
        G = len(view.groups)
        size = np.array([len(g) for g in view.groups], dtype=np.int64)
        gheld = np.array([held[g[0]] for g in view.groups], dtype=np.int64)
        top = self._vote_top(view) if self.ranked else None
        tiers = [self._tiers(view, g, top) for g in range(G)]
        demand = np.array([int(t[1].sum()) for t in tiers], dtype=np.int64)
        mand = self._mandatory(total, view.num_layers, tail, demand)
        scores = []
        for g, (score, mandatory, protected) in enumerate(tiers):
            hp = view.retained[view.groups[g][0]]
            if self.span_delimiters and protected.any():
                granted = top_n(hp, np.where(mandatory, score, -np.inf), int(mand[g]), view.tail_start)
                granted = np.intersect1d(granted, hp[protected], assume_unique=True)
                near = np.union1d(granted - 1, granted + 1)
                delim = np.isin(hp, near) & np.isin(view.classes[hp], DELIMITERS) & ~mandatory
                score = np.where(delim, DELIMITER + recency(hp), score)
            scores.append(score)
        shares = self.shares
        # each group's units (KV heads) with their scores, once: the ranking and the per-head selection read them
        units = [self._unit_scores(view, g, scores[g], top) for g in range(G)] if self.blended else None
        if self.ranked:
            counts = self._ranked_shares(view, units, mand, size, total)
            shares = counts if counts.sum() > 0 else shares
        mand, keep, per_layer = self._split(total, view.num_layers, tail, size, gheld, demand, shares)
        alloc = np.empty(view.num_layers, dtype=np.int64)
        for g, layers in enumerate(view.groups):
            alloc[list(layers)] = keep[g]
        info = {"demand": demand.tolist(), "mandatory": mand.tolist(), "residual": per_layer.tolist()}
        if self.ranked:
            info["ranked_shares"] = [round(float(x), 6) for x in shares]
        return alloc, (scores, units), info

    @staticmethod
    def _mandatory(total: int, num_layers: int, tail: int, demand: np.ndarray) -> np.ndarray:
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
        alloc, plan, info = self._plan(view)
        if self.per_head:
            return self._select_heads(view, alloc, plan, info)
        kept: list[np.ndarray] = [None] * view.num_layers  # type: ignore[list-item]
        for g, layers in enumerate(view.groups):
            held = view.retained[layers[0]]
            n = int(alloc[layers[0]])
            chosen = held.copy() if n >= held.size else top_n(
                held, plan[0][g] if plan is not None else np.zeros(held.size), n, view.tail_start)
            for layer in layers:
                kept[layer] = chosen.copy()
        return Selection(kept, {"method": self.name, "allocation": alloc.tolist(), **info})

    def _select_heads(self, view: CacheView, alloc: np.ndarray, plan, info: dict) -> Selection:
        """Step 6 of the module docstring: per group and KV head ``h``, the top ``alloc`` of the
        positions ``h`` holds by the lookup's tiers with the residual re-ranked by ``h``'s votes;
        with the ranked split (step 7) the group's heads share ``H * alloc`` by those scores, each
        first keeping its mandatory set."""
        H = self._stats(view)[0].shape[0]
        per_layer: list = [None] * view.num_layers
        for g, layers in enumerate(view.groups):
            held = view.retained[layers[0]]
            n = int(alloc[layers[0]])
            if plan is None:  # only the protected tails fit, or b = 1 (_plan's early return)
                owned = view.head_held(layers[0], H)
                sets = [top_n(held[own], np.zeros(int(own.sum())), n, view.tail_start) for own in owned]
            else:
                units = plan[1][g]
                if self.ranked:
                    sets = adaptive_split(view, [p for p, _ in units], [s for _, s in units], n,
                                          int(info["mandatory"][g]))
                else:
                    sets = [p.copy() if n >= p.size else top_n(p, s, n, view.tail_start) for p, s in units]
            for layer in layers:
                per_layer[layer] = [k.copy() for k in sets]
        sel = union_selection(self.name, alloc, per_layer)
        sel.info.update(info)
        return sel

    # ---- many requests at once (the server's batched compression) ----

    def _tiers_padded(self, batch, g: int):
        """:meth:`_tiers` for group ``g`` of every request: (held [R, T], scores [R, T],
        mandatory [R, T], protected [R, T], recency [R, T]); the same float operations in the same order, so the
        scores equal :meth:`_tiers`' bit for bit at held positions."""
        held = batch.held[batch.groups[g][0]]
        pos = batch.positions
        cls = batch.classes
        rank = self.ranks[g][cls]
        last = np.where(held, pos, -1).max(axis=1, initial=-1)  # held[-1] per request
        rec = pos / (last[:, None] + 1.0)
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
            protected |= cand & (from_end <= need[:, None])
        score = RESIDUAL + (C - 1 - rank) + rec
        score = np.where(protected, PROTECTED + (C - 1 - rank) + rec, score)
        score = np.where(window, WINDOW + rec, score)
        score = np.where(sink, SINK + rec, score)
        return held, score, held & (anchor | protected), protected, rec

    def select_padded(self, batch) -> np.ndarray:
        """:meth:`select` for every request of ``batch`` (:class:`~.padded.PaddedBatch`) with
        array operations over the batch; per request only the O(groups) budget arithmetic of
        :meth:`_plan` runs in Python. Equal to :meth:`select` request by request."""
        from sglang_pask.methods.padded import top_n_mask

        if self.blended:
            raise ValueError("pask: the batched selection has no attention statistics "
                             f"(attention_blend = {self.attention_blend:g}); use select per request")
        L, G = batch.num_layers, len(batch.groups)
        if [list(g) for g in batch.groups] != self.policy.groups or L != self.policy.model.num_layers:
            raise ValueError(f"pask: the batch's {L} layers in groups {[list(g) for g in batch.groups]} do "
                             f"not match the policy's {self.policy.model.num_layers} in {self.policy.groups}")
        for layers in batch.groups:
            for layer in layers[1:]:
                if not np.array_equal(batch.held[layer], batch.held[layers[0]]):
                    raise ValueError(f"pask keeps one set per group, but layers {layers[0]} and {layer} "
                                     "hold different positions")
        tail = batch.protected_tail
        size = np.array([len(g) for g in batch.groups], dtype=np.int64)
        tiers = [self._tiers_padded(batch, g) for g in range(G)]
        gheld = np.stack([t[0].sum(axis=1) for t in tiers])  # [G, R]
        demand = np.stack([t[2].sum(axis=1) for t in tiers])  # [G, R]
        budgets = batch.budgets_for(self.budget)  # [R]
        total = np.floor(budgets * L * batch.seq_lens + 1e-9).astype(np.int64)  # budget_slots
        keep = np.empty((G, batch.size), dtype=np.int64)
        mand = np.zeros((G, batch.size), dtype=np.int64)
        flat = np.zeros(batch.size, dtype=bool)  # the early return of _plan: no scores
        for r in range(batch.size):  # O(G) arithmetic per request, as _plan
            if budgets[r] >= 1.0 or L * tail >= total[r]:
                flat[r] = True
                keep[:, r] = gheld[:, r] if budgets[r] >= 1.0 else tail
                continue
            mand[:, r], keep[:, r], _ = self._split(int(total[r]), L, tail, size, gheld[:, r], demand[:, r])
        out = np.zeros_like(batch.held)
        for g, (held, score, mandatory, protected, rec) in enumerate(tiers):
            if self.span_delimiters and protected.any():
                granted = top_n_mask(held, np.where(mandatory, score, -np.inf), mand[g], batch.tail_start) & protected
                granted &= ~flat[:, None]
                near = np.zeros_like(granted)
                near[:, 1:] |= granted[:, :-1]  # position + 1 of a granted one
                near[:, :-1] |= granted[:, 1:]  # position - 1
                delim = held & near & np.isin(batch.classes, DELIMITERS) & ~mandatory
                score = np.where(delim, DELIMITER + rec, score)
            score = np.where(flat[:, None], 0.0, score)
            chosen = top_n_mask(held, score, keep[g], batch.tail_start)
            out[list(batch.groups[g])] = chosen[None]
        return out
