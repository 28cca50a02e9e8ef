"""PASK's residual scorer: the part that ranks the residual by attention (kvpress style: one small
frozen dataclass, composed into :class:`~.pask.Pask` as its ``residual`` field; the lookup is the
other part).

:meth:`ResidualScorer.votes` turns the engine's :class:`~.base.AttentionStats` into one vote
vector per unit of each layer group -- the group, or each KV head with ``per_head`` -- in [0, 1]
over the unit's held positions (``pask.py``'s module docstring, steps 5-7):

* the statistic (:data:`STATISTICS`) summed over the group's layers (its mean with
  ``split="scores"``); a per-head field read group-wide is first maxed over the KV heads;
* ``window`` only: SnapKV's pooling of the prefix (:func:`~.snapkv.observation_votes`, kernel
  :data:`KERNEL`), the observation window voting 1;
* divided by the largest vote of the unit's unobserved positions (``split="scores"``: the largest
  over every group and head, one scale for one ranking).

A new statistic is one :data:`STATISTICS` entry (its :class:`~.base.AttentionStats` fields and
whether it is pooled), its name in :data:`~sglang_pask.policy.residual.STATS`, and the engines'
code that fills the field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, NamedTuple, Optional

import numpy as np

from sglang_pask.methods.base import CacheView
from sglang_pask.methods.snapkv import observation_votes
from sglang_pask.policy import residual as rule

#: the observation window and pooling kernel of the ``window`` statistic (SnapKV's defaults)
OBSERVATION, KERNEL = 32, 7


class Statistic(NamedTuple):
    """Where a statistic's votes come from: the :class:`~.base.AttentionStats` field read for the
    group as a whole and per KV head, and whether the prefix is pooled (the window's votes)."""

    group: str
    heads: str
    pooled: bool


#: every statistic a residual scorer can read (names: :data:`sglang_pask.policy.residual.STATS`)
STATISTICS = {
    "window": Statistic("window", "window_heads", pooled=True),
    "kvzip": Statistic("kvzip_heads", "kvzip_heads", pooled=False),
    # KVzip's scores as the learned scorer predicts them (the engine needs the scorer file: the
    # pask method's ``scorer`` option)
    "learned": Statistic("learned_heads", "learned_heads", pooled=False),
}

#: a group's units: (owned bool ``[m]`` over the group's held positions, or None for all of them;
#: votes float ``[units' m]``)
Units = list[tuple[Optional[np.ndarray], np.ndarray]]


@dataclass(frozen=True)
class ResidualScorer:
    """The residual scorer of a :class:`~.pask.Pask` (fields: :mod:`sglang_pask.policy.residual`).
    ``blend`` 0 switches it off (the pure lookup; the other fields then only record)."""

    blend: float
    stat: str = "window"
    per_head: bool = False
    split: str = "share"

    def __post_init__(self):
        rule.check(self.blend, self.stat, self.per_head, self.split)
        object.__setattr__(self, "blend", float(self.blend))
        object.__setattr__(self, "per_head", bool(self.per_head))

    @classmethod
    def from_block(cls, block) -> Optional["ResidualScorer"]:
        """From a policy's ``residual`` block (None: None; the scorer file it may pin is the
        :class:`~.pask.Pask`'s, :attr:`~sglang_pask.policy.Policy.scorer_path`)."""
        return None if block is None else cls(**{k: getattr(block, k) for k in rule.DEFAULTS})

    @classmethod
    def from_legacy(cls, options: Mapping[str, Any], base: Optional["ResidualScorer"] = None,
                    where: str = "pask") -> "ResidualScorer":
        """The scorer the old keywords ``options`` (``attention_blend`` ...; None: not given) make
        over ``base`` (None: blend 0); errors name the old keywords."""
        try:
            return cls(**rule.from_legacy(options, None if base is None else asdict(base)))
        except rule.ResidualError as e:
            raise ValueError(f"{where}: {e.named(rule.LEGACY)}") from None

    @property
    def active(self) -> bool:
        return self.blend > 0

    @property
    def ranked(self) -> bool:
        """Whether the residual is split across groups by one ranking of the votes (step 7)."""
        return self.split == "scores"

    @property
    def statistic(self) -> Statistic:
        return STATISTICS[self.stat]

    @property
    def needs_attention(self) -> str:
        """The :class:`~.base.AttentionStats` field the engine must fill."""
        return self.statistic.heads if self.per_head else self.statistic.group

    def legacy(self) -> dict:
        """The four old field names with their values (what a pask record writes)."""
        return {rule.LEGACY[k]: v for k, v in asdict(self).items()}

    def stats(self, view: CacheView) -> list[np.ndarray]:
        """The statistic :attr:`needs_attention` names, checked (ValueError if missing)."""
        if view.attention is None:
            raise ValueError(f"pask with attention_blend > 0 needs attention.{self.needs_attention}; the "
                             "engine gave no attention statistics")
        return view.attention.get(self.needs_attention, view)

    def votes(self, view: CacheView) -> list[Units]:
        """Per layer group, its units with their votes in [0, 1] (module docstring)."""
        stats = self.stats(view)
        raw = [self._raw(view, stats, layers) for layers in view.groups]
        pooled = [[(own, self._pooled(view, held if own is None else held[own], v)) for own, v in units]
                  for units, held in zip(raw, (view.retained[layers[0]] for layers in view.groups))]
        top = None
        if self.ranked:  # one scale for every group and head
            top = max([0.0] + [float(vals[~obs].max(initial=0.0)) for units in pooled for _, (vals, obs) in units])
        return [[(own, _scaled(vals, obs, top)) for own, (vals, obs) in units] for units in pooled]

    @property
    def batched(self) -> bool:
        """Whether :meth:`padded_votes` computes this scorer's votes for a padded batch: a
        statistic read group-wide, not pooled, ranked within each group (``per_head`` false,
        ``split="share"``)."""
        return self.active and not self.per_head and not self.ranked and not self.statistic.pooled

    def padded_votes(self, stats: np.ndarray, held: np.ndarray, layers) -> np.ndarray:
        """float64 ``[R, T]``: :meth:`votes` of one group (its ``layers``) for every row of a padded
        batch, equal to the per-request votes at the held positions bit for bit (the same float32
        max over heads and sum over layers, the same float64 scaling by the row's largest).
        ``stats`` float ``[L, H, R, T]`` (0 where not held), ``held`` bool ``[R, T]`` (the group's)."""
        if not self.batched:
            raise ValueError(f"the {self.stat} residual (per_head={self.per_head}, split={self.split}) has no "
                             "padded votes")
        raw = np.sum([stats[li].max(axis=0) for li in layers], axis=0) * 1.0  # as _raw: per layer, max over heads
        vals = np.asarray(raw, dtype=np.float64)
        top = np.where(held, vals, 0.0).max(axis=1, initial=0.0)  # as _scaled: max(0, the row's largest)
        safe = np.where(top > 0, top, 1.0)[:, None]
        return np.where(top[:, None] > 0, vals / safe, 0.0)

    def _raw(self, view: CacheView, stats: list[np.ndarray], layers) -> Units:
        """A group's units with the statistic summed over its layers (mean when ranked)."""
        scale = 1.0 / len(layers) if self.ranked else 1.0  # x * 1.0 == x: the sum, bit for bit
        if not self.per_head:
            per = [stats[li] if stats[li].ndim == 1 else stats[li].max(axis=0) for li in layers]
            return [(None, np.sum(per, axis=0) * scale)]
        owned = view.head_held(layers[0], stats[0].shape[0])  # [H, m]: the same in every layer of the group
        return [(own, np.sum([stats[li][h][own] for li in layers], axis=0) * scale) for h, own in enumerate(owned)]

    def _pooled(self, view: CacheView, held: np.ndarray, votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values ``[m]``, observed bool ``[m]``) before scaling."""
        if self.statistic.pooled:
            return observation_votes(view, held, votes, KERNEL)
        return np.asarray(votes, dtype=np.float64), np.zeros(held.size, dtype=bool)


def _scaled(vals: np.ndarray, observed: np.ndarray, top: Optional[float]) -> np.ndarray:
    """float ``[m]`` in [0, 1]: ``vals`` divided by ``top`` (None: their own largest unobserved; 0
    where that is 0), the observed positions 1."""
    if top is None:
        top = vals[~observed].max(initial=0.0)
    out = np.ones(vals.size)
    out[~observed] = vals[~observed] / top if top > 0 else 0.0
    return out
