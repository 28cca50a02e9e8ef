"""Bootstrap confidence intervals over entries, and the paired bootstrap of a difference.

Input: results.jsonl records (``{"id", "category", "valid", ...}``), as ``pask eval`` writes them
and :func:`sglang_pask.eval.api.score` returns them. Resampling is stratified by category (each
category's entries are resampled with replacement, keeping its size), so every resample has the
category sizes the point estimate has, and the aggregates (``mean``, ``mean8``, ``non_live``,
``live``: :func:`sglang_pask.eval.summary.aggregate`) are computed from each resample exactly as
from the data. Percentile intervals; seeded (``numpy.random.default_rng(seed)``) and independent of
the records' order (categories in report order, entries by id), so the same records give the
same interval.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from sglang_pask.eval.summary import aggregate, category_order

__all__ = ["bootstrap_ci", "paired_bootstrap", "paired_mean_bootstrap", "RESAMPLES", "LEVEL"]

RESAMPLES = 2000
LEVEL = 0.95
_AGGS = ("mean8", "non_live", "live", "mean")


def _by_category(records: Iterable[Mapping] | Mapping[str, Mapping]) -> dict[str, dict[str, bool]]:
    recs = records.values() if isinstance(records, Mapping) else records
    out: dict[str, dict[str, bool]] = {}
    for r in recs:
        cat = out.setdefault(r["category"], {})
        if r["id"] in cat:
            raise ValueError(f"entry {r['id']!r} appears twice")
        cat[r["id"]] = bool(r["valid"])
    return dict(sorted(out.items(), key=lambda kv: category_order(kv[0])))


def _resampled(cats: dict[str, list[np.ndarray]], resamples: int, seed: int) -> list[dict[str, dict]]:
    """Per series (e.g. a and b of a pair): {category: {"n", "correct": int64 [resamples]}},
    with the same entry indices drawn for every series."""
    rng = np.random.default_rng(seed)
    n_series = len(next(iter(cats.values())))
    out: list[dict[str, dict]] = [{} for _ in range(n_series)]
    for cat, series in cats.items():
        n = series[0].size
        idx = rng.integers(0, n, size=(resamples, n))
        for k, x in enumerate(series):
            out[k][cat] = {"n": n, "correct": x[idx].sum(axis=1)}
    return out


def _interval(samples: np.ndarray, level: float) -> list[float]:
    lo, hi = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


def bootstrap_ci(records, *, resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> dict:
    """``{category: [lo, hi], aggregate: [lo, hi]}`` (fractions), for every category present and
    every aggregate that is defined for them."""
    cats = _by_category(records)
    if not cats:
        return {}
    arrays = {c: [np.array([v[i] for i in sorted(v)], dtype=np.int64)] for c, v in cats.items()}
    (res,) = _resampled(arrays, resamples, seed)
    out = {c: _interval(res[c]["correct"] / res[c]["n"], level) for c in res}
    for name, samples in aggregate(res).items():
        if samples is not None and name in _AGGS:
            out[name] = _interval(np.asarray(samples, dtype=np.float64), level)
    return out


def paired_bootstrap(a, b, *, metric: str = "mean", resamples: int = RESAMPLES, seed: int = 0,
                     level: float = LEVEL) -> dict:
    """The difference ``metric(a) - metric(b)`` over the same entries, with a paired percentile
    interval: ``{"metric", "diff", "ci": [lo, hi], "n"}``. ``a`` and ``b`` are the records of two
    rows (e.g. two methods) on the same entry ids (ValueError otherwise); each resample draws one
    set of entries and scores both on it. "a beats b" at ``level`` when ``ci[0] > 0``."""
    ca, cb = _by_category(a), _by_category(b)
    ids_a = {(c, i) for c, v in ca.items() for i in v}
    ids_b = {(c, i) for c, v in cb.items() for i in v}
    if ids_a != ids_b:
        only_a, only_b = sorted(ids_a - ids_b), sorted(ids_b - ids_a)
        raise ValueError(f"paired bootstrap needs the same entries: {len(only_a)} only in a "
                         f"(e.g. {only_a[:1]}), {len(only_b)} only in b (e.g. {only_b[:1]})")
    arrays = {c: [np.array([v[i] for i in sorted(v)], dtype=np.int64),
                  np.array([cb[c][i] for i in sorted(v)], dtype=np.int64)] for c, v in ca.items()}
    point = [aggregate({c: {"n": x[k].size, "correct": int(x[k].sum())} for c, x in arrays.items()}).get(metric)
             for k in (0, 1)]
    if point[0] is None:
        raise ValueError(f"metric {metric!r} is not defined for these categories")
    ra, rb = _resampled(arrays, resamples, seed)
    diff = np.asarray(aggregate(ra)[metric], dtype=np.float64) - np.asarray(aggregate(rb)[metric], dtype=np.float64)
    return {"metric": metric, "diff": float(point[0] - point[1]), "ci": _interval(diff, level),
            "n": len(ids_a)}


def paired_mean_bootstrap(a: Sequence[float], b: Sequence[float], *, resamples: int = RESAMPLES,
                          seed: int = 0, level: float = LEVEL) -> dict:
    """``mean(a) - mean(b)`` for per-entry values (e.g. gold NLL per token) paired by position,
    with a percentile interval over entries resampled with replacement: ``{"diff", "ci", "n"}``."""
    x = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or len(a) != len(b):
        raise ValueError(f"paired values need two equal, non-empty lists (got {len(a)} and {len(b)})")
    draws = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    return {"diff": float(x.mean()), "ci": _interval(x[draws].mean(axis=1), level), "n": int(x.size)}
