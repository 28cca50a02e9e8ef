"""The structure-prior policy: floors from a fixed class ranking, no measurement behind them.

``calibration`` is ``null`` so nobody mistakes it for a calibrated policy. Expect it to be weak
(research/tiny_spike.md: hand-picked structure sets did no better than StreamingLLM at 33%); it
exists to exercise the machinery and as the baseline calibration must beat.

The ranking is :data:`~sglang_pask.structure.classes.PRECEDENCE` (names and keys that identify a
call, then literals a call copies, then types and descriptions, prose, punctuation). Floors by
tier: identifiers 1.0, literal values 0.5, everything else 0. Every group gets the same floors
and priority, and an equal residual share.
"""

from __future__ import annotations

from typing import Sequence

from sglang_pask.policy.binding import ModelBinding
from sglang_pask.policy.schema import Policy
from sglang_pask.structure.classes import PRECEDENCE, StructClass

S = StructClass
#: Classes a tool call or query identifies things by: every token persists.
IDENTIFIERS = (S.TEMPLATE_SPECIAL, S.OUT_TOOL_TAG, S.TOOL_NAME, S.OUT_FUNC_NAME, S.PARAM_NAME,
               S.OUT_ARG_KEY, S.SQL_TABLE, S.SQL_COLUMN)
#: Literals a call may copy: half persists (the most recent half; the residual may add more).
LITERALS = (S.ENUM_VALUE, S.REQUIRED_LIST, S.QUERY_VALUE, S.OUT_VALUE_STR, S.OUT_VALUE_NUM,
            S.OUT_VALUE_BOOL, S.OUT_VALUE_NULL, S.SQL_LITERAL)
PRIOR_FLOORS = {**{c: 1.0 for c in IDENTIFIERS}, **{c: 0.5 for c in LITERALS}}
PRIOR_RANKING: tuple[StructClass, ...] = PRECEDENCE


def even_groups(num_layers: int, groups: int) -> list[list[int]]:
    """``groups`` consecutive runs of layers, sizes differing by at most one (larger first)."""
    if not 1 <= groups <= num_layers:
        raise ValueError(f"--groups must be between 1 and the model's {num_layers} layers, got {groups}")
    size, extra = divmod(num_layers, groups)
    out, start = [], 0
    for g in range(groups):
        n = size + (g < extra)
        out.append(list(range(start, start + n)))
        start += n
    return out


def prior_policy(model: ModelBinding, groups: int | Sequence[Sequence[int]], budget: float,
                 sinks: int = 4, recent_window: int = 16, name: str | None = None) -> Policy:
    """A structure-prior policy for ``model`` (``groups``: a count, or explicit layer runs)."""
    runs = even_groups(model.num_layers, groups) if isinstance(groups, int) else [list(g) for g in groups]
    G = len(runs)
    names = [c.name for c in PRIOR_RANKING]
    floors = {c.name: PRIOR_FLOORS.get(c, 0.0) for c in PRIOR_RANKING}
    return Policy.model_validate({
        "name": name,
        "note": "structure prior: floors from a fixed class ranking, not measured; expect it to be weak",
        "model": model.model_dump(),
        "groups": runs,
        "classes": names,
        "priority": [list(names) for _ in range(G)],
        "floor": [dict(floors) for _ in range(G)],
        "residual_share": _equal_shares(G),
        "sinks": sinks,
        "recent_window": recent_window,
        "budget": budget,
        "calibration": None,
    })


def _equal_shares(n: int) -> list[float]:
    shares = [round(1.0 / n, 12)] * n
    shares[-1] = round(1.0 - sum(shares[:-1]), 12)
    return shares
