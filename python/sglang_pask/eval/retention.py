"""Retention: of the entries Full KV gets right, the share a compressed method still gets right.

A method's accuracy mixes what the model can do with what compression takes away; on a small model
that is wrong on most entries, two methods' accuracies differ by less than their intervals. Retention
asks only the second question, paired entry by entry against a Full KV run on the same entries:

* ``retention`` = right under the method / right under Full KV, over the entries Full KV gets right
  (pooled over categories), with a percentile bootstrap interval: each resample draws those entries
  again, with replacement, within each category (so every resample has Full KV's category mix);
* ``lost`` (right -> wrong) and ``gained`` (wrong -> right) flips against Full KV;
* the BFCL mean of the categories present (``mean8`` when all 8 are) with its own interval
  (:func:`~.stats.bootstrap_ci`);
* against a ``reference`` row (e.g. the shipped PASK policy), the paired difference in retention on
  the same draws: "A keeps more of Full KV's correct calls than B" at 95% when the lower end > 0;
* where the lost calls fail (``lost_by_kind``), from BFCL's checker error of the method's record
  (:func:`failure_kind`): the wrong tool or number of calls, a missing or unexpected parameter name,
  a wrong value or type, no call decoded, or other.

Input: results.jsonl records (``{"id", "category", "valid"}``) as ``pask eval`` / ``pask sweep``
write them; every row must hold exactly Full KV's entries (ValueError naming the first that differs).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from sglang_pask.eval.stats import LEVEL, RESAMPLES, bootstrap_ci
from sglang_pask.eval.summary import aggregate, category_order

__all__ = ["retention_rows", "retention_markdown", "failure_kind", "KINDS"]

#: the failure kinds of :func:`failure_kind`, in table order
KINDS = ("tool", "param_name", "value", "no_call", "other")


def failure_kind(error_type: Optional[str]) -> str:
    """A BFCL checker error type (``results.jsonl``'s ``error_type``) as one of :data:`KINDS`:
    ``tool`` (wrong function name, wrong number of calls), ``param_name`` (a required parameter
    missing, an unexpected or unknown one, an optional one the gold needs), ``value`` (a wrong value
    or type), ``no_call`` (nothing decodable: the output is not a call, or was cut), else ``other``
    (e.g. a parallel call set no permutation matches)."""
    e = (error_type or "").lower()
    if "wrong_func_name" in e or "wrong_count" in e:
        return "tool"
    if "missing_required" in e or "unexpected_param" in e or "missing_optional" in e:
        return "param_name"
    if e.startswith(("value_error", "type_error")):
        return "value"
    if e.startswith(("decode", "ast_decoder")):
        return "no_call"
    return "other"


def _index(records: Sequence[Mapping], what: str) -> dict[tuple[str, str], bool]:
    out: dict[tuple[str, str], bool] = {}
    for r in records:
        key = (r["category"], r["id"])
        if key in out:
            raise ValueError(f"{what}: entry {key} appears twice")
        out[key] = bool(r["valid"])
    return out


def _errors(records: Sequence[Mapping]) -> dict[tuple[str, str], Optional[str]]:
    return {(r["category"], r["id"]): r.get("error_type") for r in records}


def _mean(index: Mapping[tuple[str, str], bool]) -> dict:
    cats: dict[str, dict] = {}
    for (c, _), ok in index.items():
        v = cats.setdefault(c, {"n": 0, "correct": 0})
        v["n"] += 1
        v["correct"] += ok
    agg = aggregate(cats)
    return {"mean8": agg["mean8"], "mean": agg["mean"]}


def retention_rows(full: Sequence[Mapping], runs: Mapping[str, Sequence[Mapping]], reference: Optional[str] = None,
                   *, resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> list[dict]:
    """One dict per ``runs`` label (in order), see the module docstring: ``label``, ``n``,
    ``full_right``, ``kept``, ``retention`` and ``ci``, ``lost``, ``gained``, ``mean8`` / ``mean``
    with ``mean_ci``, and with ``reference`` (a label of ``runs``) ``vs_reference``:
    ``{"diff", "ci"}`` (this row's retention minus the reference's, paired); ``lost_by_kind``: the
    right -> wrong flips counted by :func:`failure_kind` (every kind of :data:`KINDS`)."""
    f = _index(full, "full")
    if not any(f.values()):
        raise ValueError("Full KV gets no entry right: retention is undefined")
    if reference is not None and reference not in runs:
        raise ValueError(f"reference {reference!r} is not one of the rows ({', '.join(runs)})")
    rows = {}
    for label, recs in runs.items():
        r = _index(recs, label)
        if set(r) != set(f):
            only_f, only_r = sorted(set(f) - set(r)), sorted(set(r) - set(f))
            raise ValueError(f"{label}: not Full KV's entries ({len(only_f)} missing, e.g. {only_f[:1]}; "
                             f"{len(only_r)} extra, e.g. {only_r[:1]})")
        rows[label] = r
    errors = {label: _errors(recs) for label, recs in runs.items()}
    right = sorted((k for k, ok in f.items() if ok), key=lambda k: (category_order(k[0]), k[1]))
    by_cat: dict[str, list[int]] = {}
    for i, (c, _) in enumerate(right):
        by_cat.setdefault(c, []).append(i)
    rng = np.random.default_rng(seed)
    draws = np.concatenate([np.asarray(ix)[rng.integers(0, len(ix), size=(resamples, len(ix)))]
                            for ix in by_cat.values()], axis=1)  # [resamples, len(right)], per category
    kept = {label: np.array([r[k] for k in right], dtype=np.float64) for label, r in rows.items()}
    samples = {label: x[draws].mean(axis=1) for label, x in kept.items()}
    lo, hi = (1 - level) / 2, (1 + level) / 2
    out = []
    for label, r in rows.items():
        mean = _mean(r)
        ci = bootstrap_ci([{"category": c, "id": i, "valid": ok} for (c, i), ok in r.items()],
                          resamples=resamples, seed=seed, level=level)
        row = {"label": label, "n": len(r), "full_right": len(right), "kept": int(kept[label].sum()),
               "retention": float(kept[label].mean()),
               "ci": [float(v) for v in np.quantile(samples[label], [lo, hi])],
               "lost": sum(1 for k in right if not r[k]),
               "lost_by_kind": {kind: sum(1 for k in right if not r[k] and failure_kind(errors[label][k]) == kind)
                                for kind in KINDS},
               "gained": sum(1 for k, ok in r.items() if ok and not f[k]),
               **mean, "mean_ci": ci.get("mean8" if mean["mean8"] is not None else "mean")}
        if reference is not None and label != reference:
            d = samples[label] - samples[reference]
            row["vs_reference"] = {"label": reference, "diff": float(kept[label].mean() - kept[reference].mean()),
                                   "ci": [float(v) for v in np.quantile(d, [lo, hi])]}
        out.append(row)
    return out


def retention_markdown(rows: Sequence[Mapping], full: Sequence[Mapping]) -> str:
    """The rows as a markdown table (percentages), Full KV's own line first."""
    f = _index(full, "full")
    fm = _mean(f)
    which = "mean8" if fm["mean8"] is not None else "mean"
    ref = next((r["vs_reference"]["label"] for r in rows if "vs_reference" in r), None)
    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    head = (f"| row | n | Full KV right | kept | retention [95% CI] | right -> wrong | wrong -> right | "
            f"BFCL {which} [95% CI] |" + (f" retention - {ref} [paired 95% CI] |" if ref else ""))
    lines = [head, "|" + "---|" * (8 + bool(ref))]
    fci = bootstrap_ci([{"category": c, "id": i, "valid": ok} for (c, i), ok in f.items()])[which]
    right = sum(f.values())
    lines.append(f"| full | {len(f)} | {right} | {right} | 100.0 | 0 | 0 | {pct(fm[which])} "
                 f"[{pct(fci[0])}, {pct(fci[1])}] |" + (" |" if ref else ""))
    for r in rows:
        cell = f"| {r['label']} | {r['n']} | {r['full_right']} | {r['kept']} | {pct(r['retention'])} " \
               f"[{pct(r['ci'][0])}, {pct(r['ci'][1])}] | {r['lost']} | {r['gained']} | {pct(r[which])} " \
               f"[{pct(r['mean_ci'][0])}, {pct(r['mean_ci'][1])}] |"
        if ref:
            v = r.get("vs_reference")
            cell += (f" {100 * v['diff']:+.1f} [{100 * v['ci'][0]:+.1f}, {100 * v['ci'][1]:+.1f}] |" if v else " - |")
        lines.append(cell)
    if rows and all("lost_by_kind" in r for r in rows):
        lines += ["", "Where the right -> wrong calls fail (BFCL's checker error of the method's output):", "",
                  "| row | right -> wrong | wrong tool or call count | parameter name | value or type | no call "
                  "| other |", "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['label']} | {r['lost']} | " + " | ".join(str(r["lost_by_kind"][k]) for k in KINDS) + " |"
                  for r in rows]
    return "\n".join(lines) + "\n"
