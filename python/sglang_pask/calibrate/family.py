"""Compile measured S and D into policies: the small policy family the search scores.

Rule (DESIGN.md §4, §5), per layer group ``g``:

* sensitivity score ``s[g][c] = max(fail rise, 0) + max(NLL rise, 0)`` (the AST failure rate
  rise plus the gold NLL rise in nats per token; both measured by :mod:`.sensitivity`);
* the class order of group ``g`` (``rank``): ``"total"`` by descending ``s[g][c]``; ``"density"``
  by descending ``s[g][c] / n_c``; ``"joint"`` by descending ``j[c] / n_c`` in every group, ``j[c]``
  the same score from the joint probe (class ``c`` dropped from *all* groups at once,
  :func:`~.sensitivity.measure_joint`), which sees the names the single-group probes cannot (a
  neighbouring group still holds them); ``n_c`` the class's mean token count in the prompts holding it
  (the rise per slot spent: dropping all 73 punctuation tokens of a prompt costs more than dropping
  its 5 template specials, but each special is worth far more). Ties -- above all the classes whose
  single-group probe measured nothing because another group still held them -- go by the same
  quantity's maximum over all groups, then :data:`~sglang_pask.structure.classes.PRECEDENCE`;
* ``priority[g]``: that order, so the residual is filled by the most sensitive classes first;
* ``floor[g][c] = floor`` (1, or a fraction: that share of the class's tokens, its newest, must
  stay) for the first ``top_k`` classes of that order with positive ``s``, else 0;
* ``residual_share[g]`` proportional to ``D[g](b) ** alpha * (g + 1) ** tilt`` (``alpha = 0``:
  D ignored; ``tilt > 0`` leans the residual toward deeper groups, ``< 0`` toward shallower ones;
  both 0: equal shares). D alone does not order the groups by task importance on the tiny model
  (calib: D is highest in group 0, yet moving the residual to group 1 is what raises accuracy at
  b = 0.2), so the depth tilt is searched on task accuracy like the other members;
* ``sinks`` (searched), ``recent_window = round(window_frac * b * P)``, ``P`` the mean calibration
  prompt length;
* ``pin``: classes floored at 1 in *every* group whatever their measured score (:data:`PINS`). The
  single-group probes measure nearly nothing for a tool or parameter name in a group whose
  neighbours still hold it (on the real model the names scored ~0 in groups 0-1), so no order built
  from S floors them there; dropping them from three groups at once is what made the real model
  call ``get_weather {}``. Pinning is a searched member like the others, never forced.
* ``scorer`` and ``blend`` (only in :data:`BLEND_AXES`): the policy's ``residual`` block, its
  ``stat`` / ``per_head`` (:data:`SCORERS`) and ``blend`` (0: no block, the pure class-priority lookup,
  what the radix segment runs; > 0 blends attention votes into the residual's order: SnapKV's
  window votes, which the server's torch backend records, or KVzip's reconstruction scores, per
  group or per KV head, reference runner only). Visited last, so the attention-informed search
  scores every member the pure one does first, and keeps the lookup unless a blend beats it;
* ``split`` (only in :data:`BLEND_AXES`): the policy's ``residual.split`` -- ``share`` (by
  ``residual_share``) or ``scores`` (one ranking of every group's and KV head's residual by the
  blended score, :class:`~sglang_pask.methods.pask.Pask` step 7). A ranked member reads no
  ``residual_share`` (except when no group has a candidate), so its ``alpha`` and ``tilt`` are held
  at 0: the axes' other values are the same member and cost nothing.

The search starts at :data:`START` unless told otherwise (``pask calibrate --search-start``,
:func:`parse_start`: e.g. the attention-informed region the coordinate rule cannot walk into from
the lookup's start, where every budget slot is taken by a recent window and floors).

:data:`AXES` are the values the coordinate search (:mod:`.search`) tries for each field, from
:data:`START`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from sglang_pask.calibrate.distortion import budget_key
from sglang_pask.policy import residual as residual_rule
from sglang_pask.policy.binding import ModelBinding
from sglang_pask.policy.operating_point import OperatingPoint
from sglang_pask.policy.schema import Policy
from sglang_pask.structure.classes import PRECEDENCE

__all__ = ["Member", "AXES", "BLEND_AXES", "LEARNED_AXES", "LEARNED_SCORERS", "JOINT_RANKS", "equal_pools",
           "PINS", "SPLITS", "START", "sensitivity_score",
           "class_order", "joint_score", "residual_shares", "compile_policy", "parse_start"]


@dataclass(frozen=True)
class Member:
    """One point of the family."""

    window_frac: float
    top_k: int
    alpha: float
    sinks: int = 4
    tilt: float = 0.0
    rank: str = "total"
    pin: str = ""  # a key of PINS
    blend: float = 0.0  # the policy's residual.blend (0: no residual scorer)
    floor: float = 1.0  # the floor of the top_k classes (pins are always floored at 1)
    scorer: str = "window"  # a key of SCORERS: the statistic a blend reads, and whether per KV head
    split: str = "share"  # one of SPLITS: the policy's residual.split

    def __post_init__(self):
        if self.pin not in PINS:
            raise ValueError(f"pin must be one of {', '.join(map(repr, PINS))}, got {self.pin!r}")
        if not 0.0 < self.floor <= 1.0:
            raise ValueError(f"floor must be in (0, 1], got {self.floor!r}")
        if self.top_k == 0 and self.floor != 1.0:  # no floored class: the same policy as floor 1
            object.__setattr__(self, "floor", 1.0)
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {', '.join(map(repr, SCORERS))}, got {self.scorer!r}")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {self.split!r}")
        if (self.scorer != "window" or self.split != "share") and not self.blend:
            object.__setattr__(self, "blend", SCORER_BLEND)  # read only with a blend: its start
        if self.split != "share":  # the ranking splits the residual: no shares to shape
            object.__setattr__(self, "alpha", 0.0)
            object.__setattr__(self, "tilt", 0.0)

    @property
    def label(self) -> str:
        return (f"rank={self.rank} w={self.window_frac:g} k={self.top_k} alpha={self.alpha:g} "
                f"sinks={self.sinks} tilt={self.tilt:g}" + (f" pin={self.pin}" if self.pin else "")
                + (f" blend={self.blend:g}" if self.blend else "")
                + (f" floor={self.floor:g}" if self.floor != 1.0 else "")
                + (f" scorer={self.scorer}" if self.scorer != "window" else "")
                + (f" split={self.split}" if self.split != "share" else ""))


#: the class sets a member may pin in every group (floor 1): none, the names a call copies, and the
#: names plus the values it copies from the schema and the query
PINS: dict[str, tuple[str, ...]] = {
    "": (),
    "names": ("TOOL_NAME", "PARAM_NAME"),
    "names+values": ("TOOL_NAME", "PARAM_NAME", "ENUM_VALUE", "QUERY_VALUE", "QUERY_TEXT"),
}


#: a member's ``scorer`` -> the policy's residual (stat, per_head): SnapKV's window votes,
#: KVzip's reconstruction scores, or the learned scorer's prediction of them (no extra forward;
#: needs ``pask calibrate --scorer FILE``), one set per group or per KV head
SCORERS: dict[str, tuple[str, bool]] = {"window": ("window", False), "window/heads": ("window", True),
                                        "kvzip": ("kvzip", False), "kvzip/heads": ("kvzip", True),
                                        "learned": ("learned", False), "learned/heads": ("learned", True)}
#: the scorers that read the learned scorer (the family searched with ``--scorer``: in place of
#: the attention statistics, so its policies need no reconstruction forward)
LEARNED_SCORERS = tuple(k for k, (stat, _) in SCORERS.items() if stat == "learned")
#: the blend a member that names a scorer other than ``window`` gets when it has none (so the
#: scorer axis, visited at blend 0, tries every statistic; the blend axis then tunes it)
SCORER_BLEND = 0.5
#: a member's ``split`` values (the policy's ``residual.split``)
SPLITS = residual_rule.SPLITS


#: the values the coordinate search tries per field, in the order the fields are visited
AXES: dict[str, tuple] = {
    "rank": ("total", "density", "joint"),
    "pin": tuple(PINS),
    "tilt": (-1.0, 0.0, 1.0, 2.0, 3.0),
    "sinks": (1, 4),
    "window_frac": (0.0, 0.25, 0.5, 0.75),
    "top_k": (0, 1, 3),
    "floor": (1.0, 0.5),
    "alpha": (0.0, 1.0),
}
#: the rank values that need the joint probe's scores
JOINT_RANKS = ("joint",)
#: the attention-informed family (``pask calibrate --attention-blend``): :data:`AXES` plus the
#: blend, visited last; its policies run on the reference runner only, so it is opt-in
BLEND_AXES: dict[str, tuple] = {**AXES, "scorer": tuple(k for k in SCORERS if k not in LEARNED_SCORERS),
                                 "split": SPLITS, "blend": (0.0, 0.25, 0.5, 0.75, 1.0)}
#: the learned-scorer family (``pask calibrate --attention-blend --scorer FILE``): the residual
#: reads only the learned scorer
LEARNED_AXES: dict[str, tuple] = {**BLEND_AXES, "scorer": LEARNED_SCORERS}


def equal_pools(axes: dict[str, tuple]) -> dict[str, tuple]:
    """``axes`` without the two residual forms the server's per-group KV pools hold worst
    (``pask calibrate --equal-pools``): each layer group's pool holds b of a request's positions,
    one slot per position for all the group's KV heads, so a ranking across groups (``split``
    scores) and per-KV-head sets (a slot for their union) fill one pool first. The lookup's own
    floors and residual shares still differ by group, so a member is not held to exactly b per
    group (the tiny 0.33 choice holds 10 requests at once where the lookup holds 13)."""
    return {**axes, "split": ("share",), "scorer": tuple(k for k in axes.get("scorer", ("window",))
                                                          if not SCORERS[k][1])}


#: where the search starts: StreamingLLM's 4 sinks, equal shares, a quarter of the budget recent
START = Member(window_frac=0.25, top_k=0, alpha=0.0, sinks=4, tilt=0.0)


def parse_start(spec: str) -> Member:
    """:data:`START` with the fields of ``spec`` (``FIELD=VALUE,...``, e.g.
    ``rank=joint,window_frac=0,blend=0.5,scorer=kvzip/heads,split=scores``) set, each converted to
    the field's type; ValueError naming an unknown field or a bad value."""
    from dataclasses import fields, replace

    types = {f.name: type(getattr(START, f.name)) for f in fields(Member)}
    changes = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, eq, value = part.partition("=")
        if not eq or name not in types:
            raise ValueError(f"--search-start: {part!r} is not FIELD=VALUE with FIELD one of {', '.join(types)}")
        try:
            changes[name] = types[name](value)
        except ValueError:
            raise ValueError(f"--search-start: {name}={value!r} is not a {types[name].__name__}") from None
    try:
        return replace(START, **changes)
    except ValueError as e:  # a value the member itself refuses (e.g. scorer=h2o): the same prefix
        raise ValueError(f"--search-start: {e}") from None


def sensitivity_score(sens: dict) -> list[dict[str, float]]:
    """``s[g][c]`` (see the module docstring) from :func:`~.sensitivity.measure_sensitivity` (a
    failure rise not measured -- signal ``nll`` -- counts 0)."""
    return [{c: round(max(f[c] or 0.0, 0.0) + max(n[c], 0.0), 6) for c in sens["classes"]}
            for f, n in zip(sens["fail"], sens["nll"])]


def class_order(score: list[dict[str, float]], rank: str, tokens: dict[str, float] | None = None,
                joint: dict[str, float] | None = None) -> list[list[str]]:
    """Per group, the probed classes in the order of ``rank`` (module docstring). ``tokens``: mean
    token counts (:func:`~.sensitivity.measure_sensitivity`'s ``"tokens"``); needed for density and
    joint. ``joint``: the joint probe's score per class (:func:`joint_score`); needed for joint."""
    if rank not in ("total", "density", "joint"):
        raise ValueError(f"rank must be 'total', 'density' or 'joint', got {rank!r}")
    if rank in ("density", "joint") and not tokens:
        raise ValueError(f"rank={rank!r} needs the classes' token counts (re-run the sensitivity phase)")
    if rank == "joint" and joint is None:
        raise ValueError("rank='joint' needs the joint probe's scores (the calibration's joint stage)")
    order = {c.name: i for i, c in enumerate(PRECEDENCE)}
    per = [{c: v / max(tokens[c], 1e-9) if rank != "total" else v for c, v in s.items()} for s in score]
    best = {c: max(p[c] for p in per) for c in per[0]} if per else {}
    if rank == "joint":  # one order for every group; the single-group density breaks ties
        key = {c: joint.get(c, 0.0) / max(tokens[c], 1e-9) for c in per[0]} if per else {}
        return [sorted(p, key=lambda c: (-key[c], -p[c], order[c])) for p in per]
    return [sorted(p, key=lambda c: (-p[c], -best[c], order[c])) for p in per]


def joint_score(joint: dict) -> dict[str, float]:
    """``j[c] = max(fail rise, 0) + max(NLL rise, 0)`` from :func:`~.sensitivity.measure_joint`."""
    return {c: round(max(joint["fail"][c] or 0.0, 0.0) + max(joint["nll"][c], 0.0), 6) for c in joint["nll"]}


def residual_shares(d: Sequence[float], alpha: float, tilt: float = 0.0) -> list[float]:
    """Shares proportional to ``d[g] ** alpha * (g + 1) ** tilt``, rounded to 1e-6, summing to 1."""
    w = [(max(x, 0.0) ** alpha if alpha else 1.0) * (g + 1) ** tilt for g, x in enumerate(d)]
    total = sum(w) or float(len(w))
    shares = [round((x if sum(w) else 1.0) / total, 6) for x in w]
    shares[-1] = round(1.0 - sum(shares[:-1]), 6)
    return shares


def compile_policy(binding: ModelBinding, groups: Sequence[Sequence[int]], score: list[dict[str, float]],
                   distortion: list[dict[str, float]], budget: float, member: Member, prompt_len: float,
                   calibration: dict | None = None, name: str | None = None,
                   tokens: dict[str, float] | None = None, point: OperatingPoint | None = None,
                   joint: dict[str, float] | None = None, scorer: tuple[str, str] | None = None) -> Policy:
    """The policy of ``member`` at ``budget``, recording ``point``, the operating point it was
    calibrated under (default: prefill schedule, no segment) (``score``: :func:`sensitivity_score`;
    ``distortion``: D[g] keyed by :func:`~.distortion.budget_key`; ``tokens``: the classes' mean
    token counts, for ``member.rank == "density"`` or ``"joint"``; ``joint``: :func:`joint_score`, for
    ``"joint"``; ``scorer``: the learned scorer's ``(path, sha256)``, for a member whose scorer is
    learned: the policy pins it by file name and hash, and resolves it in the file's folder)."""
    names = [c.name for c in PRECEDENCE]
    priority, floor = [], []
    for s, probed in zip(score, class_order(score, member.rank, tokens, joint)):
        priority.append(probed + [n for n in names if n not in s])
        sensitive = joint if member.rank == "joint" else s
        top = [c for c in probed if sensitive.get(c, 0.0) > 0][: member.top_k]
        pins = PINS[member.pin]
        floor.append({n: (1.0 if n in pins else member.floor if n in top else 0.0) for n in names})
    d = [row[budget_key(budget)] for row in distortion]
    stat, per_head = SCORERS[member.scorer]
    residual = {"blend": member.blend, "stat": stat, "per_head": per_head, "split": member.split}
    if member.blend and stat == "learned":
        if scorer is None:
            raise ValueError(f"member {member.label}: the learned statistic needs a scorer file (--scorer)")
        residual.update(scorer=os.path.basename(scorer[0]), scorer_sha256=scorer[1])
    policy = Policy.model_validate({
        "name": name,
        "note": f"calibrated ({member.label}): pask calibrate",
        "model": binding.model_dump(),
        "groups": [list(g) for g in groups],
        "classes": names,
        "priority": priority,
        "floor": floor,
        "residual_share": residual_shares(d, member.alpha, member.tilt),
        "sinks": member.sinks,
        "recent_window": int(round(member.window_frac * budget * prompt_len)),
        "budget": budget,
        "residual": residual if member.blend else None,
        "operating_point": (point or OperatingPoint(schedule="prefill")).record(),
        "calibration": calibration,
    })
    if policy.scorer_path:
        policy._origin = os.path.dirname(os.path.abspath(scorer[0]))
    return policy
