"""K-fold estimate of the family search on the fit entries: how well does *choosing* a member by
the coordinate search do on calib entries the choice never saw?

The search scores every member on all ``n`` fit entries and keeps each entry's outcome (a row's
``"valid"``: 0/1 per fit entry, or ``"values"``: the teacher-forced value per entry). The fit
entries are split into ``k`` folds by a seeded permutation (sizes differ by at most one). For fold
``f`` the same coordinate search (:func:`~.coordinate.coordinate_search`: same start, axes, passes and
tie rule) runs on the other ``k - 1`` folds' outcomes only, and its choice is scored on fold ``f``.
The estimate is the mean of the ``k`` held-fold scores, weighted by fold size; next to the chosen
member's fit score it shows how much the choice fits calib noise. A member the full search never
scored is scored on all fit entries once (``score_member``) and kept with the others.

Accuracy on a subset is the reports' ``mean`` (the plain mean of per-category accuracies), as the
search's own objective.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from sglang_pask.calibrate.coordinate import coordinate_search
from sglang_pask.calibrate.family import Member
from sglang_pask.eval.summary import aggregate

__all__ = ["fold_indices", "subset_value", "kfold_estimate"]


def fold_indices(n: int, k: int, seed: int) -> list[np.ndarray]:
    """``k`` disjoint index arrays covering ``range(n)`` (a seeded permutation, cut in order)."""
    if not 2 <= k <= n:
        raise ValueError(f"k-fold needs 2 <= k <= fit entries ({n}), got k = {k}")
    order = np.random.default_rng([seed, k]).permutation(n)
    return [np.sort(part) for part in np.array_split(order, k)]


def subset_value(row: dict, idx: np.ndarray, categories: Sequence[str], objective: str) -> float:
    """The search objective of ``row`` over the fit entries ``idx`` (higher is better: accuracy as
    a fraction, or minus the mean teacher-forced value)."""
    if objective == "accuracy":
        cats: dict[str, dict] = {}
        for i in idx:
            c = cats.setdefault(categories[i], {"n": 0, "correct": 0})
            c["n"] += 1
            c["correct"] += int(row["valid"][i])
        return float(aggregate(cats)["mean"]) if cats else 0.0
    return -float(np.mean([row["values"][i] for i in idx]))


def kfold_estimate(score_member: Callable[[Member], dict], start: Member, axes: dict, passes: int,
                   categories: Sequence[str], k: int, seed: int, objective: str, chosen: Member) -> dict:
    """The module docstring's estimate. ``score_member``: Member -> its row with per-entry outcomes
    on all fit entries (cached by the caller). ``chosen``: the full search's choice. Returns
    ``{"k", "estimate", "fit": the chosen member's score on all fit entries, "agree": folds whose
    choice is ``chosen``, "folds": [{"n", "chosen", "train", "held"}]}`` (values as the objective:
    accuracy fractions, or minus the forced value)."""
    n = len(categories)
    parts = fold_indices(n, k, seed)
    folds = []
    for f, held in enumerate(parts):
        train = np.concatenate([p for j, p in enumerate(parts) if j != f])
        best, _, _ = coordinate_search(lambda m, train=train: subset_value(score_member(m), train, categories,
                                                                           objective), start, axes, passes)
        row = score_member(best)
        folds.append({"n": int(held.size), "chosen": best.label,
                      "train": round(subset_value(row, train, categories, objective), 6),
                      "held": round(subset_value(row, held, categories, objective), 6)})
    estimate = sum(f["held"] * f["n"] for f in folds) / n
    return {"k": k, "estimate": round(estimate, 6),
            "fit": round(subset_value(score_member(chosen), np.arange(n), categories, objective), 6),
            "agree": sum(f["chosen"] == chosen.label for f in folds), "folds": folds}
