"""Compile measured S and D into policies: the small policy family the search scores.

Rule (DESIGN.md §4, §5), per layer group ``g``:

* sensitivity score ``s[g][c] = max(fail rise, 0) + max(NLL rise, 0)`` (the AST failure rate
  rise plus the gold NLL rise in nats per token; both measured by :mod:`.sensitivity`);
* ``priority[g]``: probed classes by descending ``s`` (ties and never-probed classes in
  :data:`~sglang_pask.structure.classes.PRECEDENCE` order), so the residual is filled by the most
  sensitive classes first;
* ``floor[g][c] = 1`` for the ``top_k`` classes of highest positive ``s``, else 0;
* ``residual_share[g]`` proportional to ``D[g](b) ** alpha`` (``alpha = 0``: equal shares);
* ``sinks`` fixed, ``recent_window = round(window_frac * b * P)``, ``P`` the mean calibration
  prompt length.

:data:`FAMILY` is the grid of (window_frac, top_k, alpha) the search tries at each budget.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from sglang_pask.calibrate.distortion import budget_key
from sglang_pask.policy.binding import ModelBinding
from sglang_pask.policy.schema import Policy
from sglang_pask.structure.classes import PRECEDENCE

__all__ = ["Member", "FAMILY", "sensitivity_score", "compile_policy"]


@dataclass(frozen=True)
class Member:
    """One point of the family."""

    window_frac: float
    top_k: int
    alpha: float
    sinks: int = 4

    @property
    def label(self) -> str:
        return f"w={self.window_frac:g} k={self.top_k} alpha={self.alpha:g}"


FAMILY: tuple[Member, ...] = tuple(
    Member(w, k, a) for w, k, a in itertools.product((0.25, 0.5, 0.75), (0, 3), (0.0, 1.0)))


def sensitivity_score(sens: dict) -> list[dict[str, float]]:
    """``s[g][c]`` (see the module docstring) from :func:`~.sensitivity.measure_sensitivity`."""
    return [{c: round(max(f[c], 0.0) + max(n[c], 0.0), 6) for c in sens["classes"]}
            for f, n in zip(sens["fail"], sens["nll"])]


def _shares(d: Sequence[float], alpha: float) -> list[float]:
    w = [max(x, 0.0) ** alpha if alpha else 1.0 for x in d]
    total = sum(w) or float(len(w))
    shares = [round((x if sum(w) else 1.0) / total, 6) for x in w]
    shares[-1] = round(1.0 - sum(shares[:-1]), 6)
    return shares


def compile_policy(binding: ModelBinding, groups: Sequence[Sequence[int]], score: list[dict[str, float]],
                   distortion: list[dict[str, float]], budget: float, member: Member, prompt_len: float,
                   calibration: dict | None = None, name: str | None = None) -> Policy:
    """The policy of ``member`` at ``budget`` (``score``: :func:`sensitivity_score`;
    ``distortion``: D[g] keyed by :func:`~.distortion.budget_key`)."""
    names = [c.name for c in PRECEDENCE]
    order = {n: i for i, n in enumerate(names)}
    priority, floor = [], []
    for s in score:
        probed = sorted(s, key=lambda c: (-s[c], order[c]))
        priority.append(probed + [n for n in names if n not in s])
        top = [c for c in probed if s[c] > 0][: member.top_k]
        floor.append({n: (1.0 if n in top else 0.0) for n in names})
    d = [row[budget_key(budget)] for row in distortion]
    return Policy.model_validate({
        "name": name,
        "note": f"calibrated ({member.label}, sinks {member.sinks}): pask calibrate",
        "model": binding.model_dump(),
        "groups": [list(g) for g in groups],
        "classes": names,
        "priority": priority,
        "floor": floor,
        "residual_share": _shares(d, member.alpha),
        "sinks": member.sinks,
        "recent_window": int(round(member.window_frac * budget * prompt_len)),
        "budget": budget,
        "calibration": calibration,
    })
