"""The family search: score every :data:`~.family.FAMILY` member at one budget on the fit entries
(accuracy under the scoring API, the given schedule), paired with SnapKV (same schedule) on the same
entries; choose the most accurate member (ties: the earlier member of the family). Then the
held-out check: the chosen policy vs SnapKV (prefill) on calibration entries the search never
saw, with a paired bootstrap of the difference (:func:`~sglang_pask.eval.stats.paired_bootstrap`).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from sglang_pask.eval.api import score
from sglang_pask.eval.data import Entry
from sglang_pask.eval.harness import Settings
from sglang_pask.eval.stats import paired_bootstrap
from sglang_pask.eval.summary import aggregate

__all__ = ["accuracy", "search_budget", "check_policy", "BASELINE"]

#: the strongest baseline on the calib split at every budget (bench/results: SnapKV, prefill)
BASELINE = ("snapkv", "prefill")


def accuracy(records: Sequence[dict]) -> float:
    """The reports' ``mean``: the plain mean of the per-category accuracies (as ``pask report``)."""
    cats: dict[str, dict] = {}
    for r in records:
        c = cats.setdefault(r["category"], {"n": 0, "correct": 0})
        c["n"] += 1
        c["correct"] += bool(r["valid"])
    return float(aggregate(cats)["mean"]) if cats else 0.0


def _baseline(runner, entries, budget, settings, schedule) -> list[dict]:
    return score(runner, BASELINE[0], entries, budget=budget, schedule=schedule, settings=settings)


def _pask(runner, policy, entries, budget, settings, schedule) -> list[dict]:
    return score(runner, "pask", entries, budget=budget, policy=policy, schedule=schedule, settings=settings)


def search_budget(runner, candidates: Sequence[tuple[str, object]], entries: Sequence[Entry], budget: float,
                  settings: Settings, seed: int, schedule: str = "prefill",
                  tick: Optional[Callable[[], None]] = None) -> dict:
    """``candidates``: (label, policy). Returns ``{"budget", "baseline", "rows": [{"label",
    "accuracy", "diff", "ci"}], "best": index}`` (accuracies as fractions)."""
    base = _baseline(runner, entries, budget, settings, schedule)
    if tick:
        tick()
    rows = []
    for label, policy in candidates:
        recs = _pask(runner, policy, entries, budget, settings, schedule)
        pb = paired_bootstrap(recs, base, seed=seed)
        rows.append({"label": label, "accuracy": accuracy(recs), "diff": pb["diff"], "ci": pb["ci"]})
        if tick:
            tick()
    best = max(range(len(rows)), key=lambda i: (rows[i]["accuracy"], -i))
    return {"budget": budget, "baseline": accuracy(base), "rows": rows, "best": best, "n": len(entries)}


def check_policy(runner, policy, entries: Sequence[Entry], budget: float, settings: Settings,
                 seed: int, schedule: str = "prefill") -> dict:
    """The chosen policy vs the baseline on held-out calibration entries:
    ``{"budget", "n", "pask", "baseline", "diff", "ci"}``."""
    recs = _pask(runner, policy, entries, budget, settings, schedule)
    base = _baseline(runner, entries, budget, settings, schedule)
    pb = paired_bootstrap(recs, base, seed=seed)
    return {"budget": budget, "n": len(entries), "pask": accuracy(recs), "baseline": accuracy(base),
            "diff": pb["diff"], "ci": pb["ci"]}
