"""The coordinate search over a family's axes (the rule of :mod:`.search`'s docstring), on any
objective: :mod:`.search` runs it on the fit entries, :mod:`.kfold` on k - 1 folds of them."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from sglang_pask.calibrate.family import Member

__all__ = ["coordinate_search"]


def coordinate_search(objective: Callable[[Member], float], start: Member, axes: dict,
                      passes: int) -> tuple[Member, list[Member], int]:
    """Maximise ``objective`` over members by the coordinate rule of the module docstring.
    ``objective`` is called once per distinct member, in the returned order. Returns (best, the
    members in scoring order, passes made)."""
    seen: dict[Member, float] = {}
    order: list[Member] = []

    def value(m: Member) -> float:
        if m not in seen:
            seen[m] = float(objective(m))
            order.append(m)
        return seen[m]

    best, done = start, 0
    value(best)
    for _ in range(passes):
        done += 1
        moved = False
        for field, values in axes.items():
            challengers = [replace(best, **{field: v}) for v in values]
            top = max(challengers, key=lambda m: (value(m), -challengers.index(m)))
            if value(top) > value(best):
                best, moved = top, True
        if not moved:
            break
    return best, order, done
