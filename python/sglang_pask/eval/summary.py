"""Aggregates over scored results, and their markdown table.

  ``categories``  {name: {"n", "correct", "accuracy"}} for every category with results
  ``mean8``       plain mean of the 8 BFCL AST accuracies (the paper's headline); null unless all
                  8 are present
  ``non_live``    BFCL's non-live aggregate restricted to Python: the unweighted mean of
                  simple_python, multiple, parallel, parallel_multiple (those present; BFCL's own
                  CSV also averages java/js into "simple", which we do not run)
  ``live``        BFCL's live aggregate: sum(correct) / sum(n) over the live categories present
  ``mean``        plain mean over every category present (e.g. the 4 synthetic ones)
  ``errors``      {category: {error_type: count}} over invalid results
Accuracies are fractions in [0, 1]; a category with no results is absent, never counted as 0.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from sglang_pask.eval.data import BFCL_CATEGORIES, LIVE, NON_LIVE

__all__ = ["aggregate", "summarize", "markdown_table", "category_order"]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def aggregate(categories: dict[str, dict]) -> dict:
    """mean8 / non_live / live / mean from ``{category: {"n", "correct", ...}}`` (n > 0 each)."""
    acc = {c: v["correct"] / v["n"] for c, v in categories.items() if v["n"]}
    live = [c for c in LIVE if c in acc]
    return {
        "mean8": _mean([acc[c] for c in BFCL_CATEGORIES]) if all(c in acc for c in BFCL_CATEGORIES) else None,
        "non_live": _mean([acc[c] for c in NON_LIVE if c in acc]),
        "live": sum(categories[c]["correct"] for c in live) / sum(categories[c]["n"] for c in live) if live else None,
        "mean": _mean(list(acc.values())),
    }


def summarize(results: list[dict], config: dict, expected: dict[str, int] | None = None) -> dict:
    """Summary dict for result records (``{"category", "valid", "error_type", ...}``).

    ``expected`` (category -> number of entries asked for) adds ``complete`` and ``n_expected``.
    """
    n: Counter = Counter()
    ok: Counter = Counter()
    errors: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        c = r["category"]
        n[c] += 1
        if r["valid"]:
            ok[c] += 1
        else:
            errors[c][r.get("error_type") or "unknown"] += 1
    cats = {c: {"n": n[c], "correct": ok[c], "accuracy": ok[c] / n[c]} for c in sorted(n, key=category_order)}
    out = {
        "categories": cats,
        **aggregate(cats),
        "errors": {c: dict(errors[c].most_common()) for c in cats if errors[c]},
        "config": config,
    }
    if expected is not None:
        out["n_expected"] = dict(expected)
        out["complete"] = all(n[c] >= k for c, k in expected.items())
    return out


_KNOWN_ORDER = BFCL_CATEGORIES + (
    "synthetic_simple",
    "synthetic_multiple",
    "synthetic_parallel",
    "synthetic_parallel_multiple",
)


def category_order(c: str):
    """BFCL's 8 in their usual order, then the synthetic 4, then anything else by name."""
    return (_KNOWN_ORDER.index(c) if c in _KNOWN_ORDER else len(_KNOWN_ORDER), c)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def markdown_table(summary: dict) -> str:
    """One row per category plus the aggregates (accuracy in %)."""
    cfg = dict(summary.get("config", {}))
    if isinstance(cfg.get("model"), dict):
        cfg["model"] = cfg["model"].get("path")
    if isinstance(cfg.get("method"), dict):
        from sglang_pask.eval.records import method_label

        cfg["method"] = method_label(cfg["method"].get("name"), cfg.get("method_options"))
    head = ", ".join(
        f"{k}={cfg[k]}" for k in ("data", "backend", "model", "method", "schedule", "budget")
        if cfg.get(k) is not None
    )
    lines = [f"**{head}**" if head else "", "", "| category | n | correct | accuracy % |", "|---|---:|---:|---:|"]
    for c, v in summary["categories"].items():
        lines.append(f"| {c} | {v['n']} | {v['correct']} | {_pct(v['accuracy'])} |")
    for k in ("mean8", "non_live", "live", "mean"):
        if summary.get(k) is not None:
            lines.append(f"| **{k}** | | | {_pct(summary[k])} |")
    if summary.get("complete") is False:
        lines += ["", "*incomplete run: some entries are missing (resume with the same command)*"]
    return "\n".join(lines).lstrip() + "\n"
