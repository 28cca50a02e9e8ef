"""The family search at one budget, on the fit entries (accuracy under the scoring API, the given
schedule -- or, for models too slow to generate every member on CPU, a teacher-forced measure along
the gold call: objective ``nll``, its mean NLL per token, or ``kl``, the mean KL from Full KV's
next-token distributions), each member paired with SnapKV (same schedule) on the same entries.

Why ``kl``: the gold NLL rewards a member for every answer token it happens to make likelier, so
one lost argument name (a large rise at one position) is offset by small falls elsewhere; the real
model's ``nll`` choice matched Full KV's mean NLL (1.93 vs 1.94) and still called ``get_weather {}``.
KL from Full KV is zero where the member changes nothing and positive wherever it moves the
distribution, so no position offsets another.

It is a coordinate search over :data:`~.family.AXES` from :data:`~.family.START`: for each field in
turn, score the incumbent with that field set to each of its values and move to the most accurate
one only if it beats the incumbent (ties keep the incumbent; among equal challengers the earlier
value wins); repeat the pass over all fields until one changes nothing (at most ``passes``). Every
member is scored once (a cache), so the result is deterministic and its cost is one scoring run per
distinct member. Then the held-out check: the chosen policy vs the baseline on calibration entries the search never
saw, with a paired bootstrap of the difference (:func:`~sglang_pask.eval.stats.paired_bootstrap`).

The baseline every member is paired with (``baseline``, default SnapKV) is a registry method at the
same schedule and budget; pass the strongest one on calib. Against one fixed baseline the paired
difference orders members exactly as their accuracy does, so it changes what the rows report (the
margin over that method, with its interval), not the choice. Each row keeps its per-entry outcomes
(``"valid"`` or ``"values"``, in fit-entry order), which :mod:`.kfold` reads: with ``folds`` = k > 1
the search is re-run on k - 1 folds at a time and its choices scored on the held fold.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable, Optional, Sequence

import numpy as np

from sglang_pask.calibrate.coordinate import coordinate_search
from sglang_pask.calibrate.family import AXES, START, Member
from sglang_pask.eval.api import gold_kl, gold_nll, score
from sglang_pask.eval.data import Entry
from sglang_pask.eval.harness import Settings
from sglang_pask.eval.stats import paired_bootstrap, paired_mean_bootstrap
from sglang_pask.eval.summary import aggregate
from sglang_pask.policy.operating_point import OperatingPoint

#: the operating point the search scores under unless told otherwise
PREFILL = OperatingPoint(schedule="prefill")

__all__ = ["accuracy", "coordinate_search", "search_budget", "check_policy", "BASELINE", "max_members",
           "OBJECTIVES"]

#: what the search maximises per member: ``accuracy`` (generation, BFCL's checker), ``nll`` (minus
#: the mean teacher-forced gold NLL per token: one forward per entry and member, no generation) or
#: ``kl`` (minus the mean KL from Full KV along the gold call; Full KV's distributions once per entry)
OBJECTIVES = ("accuracy", "nll", "kl")
#: the objectives measured by teacher forcing (a per-entry value, lower is better)
FORCED = ("nll", "kl")

#: the default paired baseline (the strongest 2024 baseline on calib, bench/results: SnapKV, prefill)
BASELINE = ("snapkv", "prefill")


def accuracy(records: Sequence[dict]) -> float:
    """The reports' ``mean``: the plain mean of the per-category accuracies (as ``pask report``)."""
    cats: dict[str, dict] = {}
    for r in records:
        c = cats.setdefault(r["category"], {"n": 0, "correct": 0})
        c["n"] += 1
        c["correct"] += bool(r["valid"])
    return float(aggregate(cats)["mean"]) if cats else 0.0


def _spec(method: str, policy=None) -> tuple[str, dict]:
    """(registry name, keyword arguments) of a method spec such as ``snapkv:per_head=false``
    (``--baseline``; :func:`~sglang_pask.methods.options.parse_method_spec`), with ``policy``."""
    from sglang_pask.methods.options import parse_method_spec

    name, opts = parse_method_spec(method)
    return name, {**opts, **({"policy": policy} if policy is not None else {})}


def _baseline(runner, entries, budget, settings, point: OperatingPoint, method: str = BASELINE[0]) -> list[dict]:
    name, kw = _spec(method)
    return score(runner, name, entries, budget=budget, schedule=point.schedule, interval=point.interval,
                 settings=settings, segment_rule=point.segment, **kw)


def _pask(runner, policy, entries, budget, settings, point: OperatingPoint) -> list[dict]:
    return score(runner, "pask", entries, budget=budget, policy=policy, schedule=point.schedule,
                 interval=point.interval, settings=settings, segment_rule=point.segment)


def _nlls(runner, method: str, entries, budget, settings, point: OperatingPoint, policy=None) -> list[float]:
    """Per entry, the gold call's teacher-forced NLL per token under ``method`` (a spec) at ``point``."""
    method, kw = _spec(method, policy)
    return [gold_nll(runner, method, e, budget=budget, schedule=point.schedule, interval=point.interval,
                     settings=settings, segment_rule=point.segment, **kw).mean for e in entries]


def _kls(runner, method: str, entries, budget, settings, point: OperatingPoint, references: dict,
         policy=None) -> list[float]:
    """Per entry, the mean KL from Full KV along the gold call under ``method`` at ``point``.
    ``references``: entry id -> Full KV's forced run with its distributions, filled on first use
    (shared across budgets and members: Full KV has no budget)."""
    method, kw = _spec(method, policy)
    out = []
    for e in entries:
        if e.id not in references:
            references[e.id] = gold_nll(runner, "full", e, settings=settings, logprobs=True)
        out.append(gold_kl(runner, method, e, references[e.id], budget=budget, schedule=point.schedule,
                           interval=point.interval, settings=settings, segment_rule=point.segment, **kw))
    return out


def max_members(axes: dict = AXES, passes: int = 2) -> int:
    """An upper bound on the members :func:`search_budget` scores (for a progress bar)."""
    return 1 + passes * sum(len(v) - 1 for v in axes.values())


def search_budget(runner, compile_member: Callable[[Member], object], entries: Sequence[Entry], budget: float,
                  settings: Settings, seed: int, point: OperatingPoint = PREFILL,
                  tick: Optional[Callable[[], None]] = None, start: Member = START, axes: dict = AXES,
                  passes: int = 2, objective: str = "accuracy", progress: Optional[dict] = None,
                  save: Optional[Callable[[], None]] = None, references: Optional[dict] = None,
                  baseline: str = BASELINE[0], folds: int = 0) -> dict:
    """``compile_member``: Member -> policy. ``point``: the operating point (schedule, interval,
    segment rule) of every scoring run, PASK's and the baseline's; the compiled policies record it.
    ``objective``: :data:`OBJECTIVES`. Returns ``{"budget", "objective", "baseline", "rows":
    [{"label", "accuracy" | "nll" | "kl", "diff", "ci"}] in scoring order, "best": index,
    "best_member": the chosen Member's fields, "n", "passes"}`` (accuracies as fractions; ``nll``:
    mean gold NLL per token, ``kl``: mean KL from Full KV per token, their ``diff`` PASK minus the
    baseline, so negative is better). A record without ``"objective"`` is an accuracy search.
    ``references``: Full KV's forced runs by entry id, for ``kl`` (:func:`_kls`; pass one dict to
    every budget's search so they are computed once). ``baseline``: the registry method each member
    is paired with (``"baseline_method"`` in the result). ``folds`` > 1: also ``"kfold"``
    (:func:`~.kfold.kfold_estimate`); members only the folds' searches visit are scored too and
    listed in ``"kfold_rows"``. Every row holds its per-entry outcomes (``"valid"`` or ``"values"``).

    ``progress``: a dict this search fills as it goes (``"baseline"``: the baseline's per-entry
    values or records; ``"rows"``: label -> row) and reads back on a rerun, so an interrupted search
    resumes member by member; ``save`` is called after each new entry (the caller persists
    ``progress``). A resumed search returns what an uninterrupted one would."""
    if objective not in OBJECTIVES:
        raise ValueError(f"search objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    forced = objective in FORCED
    references = {} if references is None else references

    def measure(method: str, policy=None) -> list[float]:
        if objective == "kl":
            return _kls(runner, method, entries, budget, settings, point, references, policy=policy)
        return _nlls(runner, method, entries, budget, settings, point, policy=policy)

    progress = {} if progress is None else progress
    done = progress.setdefault("rows", {})
    if "baseline" not in progress:
        progress["baseline"] = (measure(baseline) if forced
                                else _baseline(runner, entries, budget, settings, point, baseline))
        if save:
            save()
    base = progress["baseline"]
    if tick:
        tick()
    rows: list[dict] = []

    def row_of(m: Member) -> dict:
        """``m``'s row with per-entry outcomes, scored on every fit entry once (then cached)."""
        if m.label not in done:
            if forced:
                vals = measure("pask", policy=compile_member(m))
                pb = paired_mean_bootstrap(vals, base, seed=seed)
                row = {"label": m.label, objective: round(float(np.mean(vals)), 6), "diff": pb["diff"],
                       "ci": pb["ci"], "values": [round(float(v), 6) for v in vals]}
            else:
                recs = _pask(runner, compile_member(m), entries, budget, settings, point)
                pb = paired_bootstrap(recs, base, seed=seed)
                row = {"label": m.label, "accuracy": accuracy(recs), "diff": pb["diff"], "ci": pb["ci"],
                       "valid": [int(bool(r["valid"])) for r in recs]}
            done[m.label] = row
            if save:
                save()
            if tick:
                tick()
        return done[m.label]

    def value(m: Member) -> float:
        rows.append(row_of(m))
        return -rows[-1][objective] if forced else rows[-1]["accuracy"]

    best, order, passes_made = coordinate_search(value, start, axes, passes)
    out = {"budget": budget, "objective": objective, "baseline_method": baseline,
           "baseline": round(float(np.mean(base)), 6) if forced else accuracy(base), "rows": rows,
           "best": order.index(best), "best_member": asdict(best), "n": len(entries), "passes": passes_made}
    if folds > 1:
        from sglang_pask.calibrate.kfold import kfold_estimate

        searched = {r["label"] for r in rows}
        cats = [e.category for e in entries]
        out["kfold"] = kfold_estimate(row_of, start, axes, passes, cats, folds, seed, objective, best)
        out["kfold_rows"] = [r for label, r in done.items() if label not in searched]
    return out


def check_policy(runner, policy, entries: Sequence[Entry], budget: float, settings: Settings,
                 seed: int, point: OperatingPoint = PREFILL, baseline: str = BASELINE[0]) -> dict:
    """The chosen policy vs the baseline method on held-out calibration entries (``point`` as
    :func:`search_budget`): ``{"budget", "n", "pask", "baseline", "baseline_method", "diff", "ci"}``."""
    recs = _pask(runner, policy, entries, budget, settings, point)
    base = _baseline(runner, entries, budget, settings, point, baseline)
    pb = paired_bootstrap(recs, base, seed=seed)
    return {"budget": budget, "n": len(entries), "pask": accuracy(recs), "baseline": accuracy(base),
            "baseline_method": baseline, "diff": pb["diff"], "ci": pb["ci"]}
