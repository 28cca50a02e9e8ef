"""Merge ``pask eval`` runs into a methods x budgets x categories table and an accuracy/budget PNG.

A run is a directory with ``summary.json``. Its row key is ``(method, budget)`` from the run's
config: ``method`` defaults to the backend name, ``budget`` to 1.0 (Full KV). Runs with the same
key are merged category by category (e.g. one run per category); if two runs hold the same
category for the same key, the one with more entries wins and a warning names both. Aggregates
(summary.aggregate) are recomputed from the merged counts. The PNG plots, per method, the
headline (``mean8`` when all 8 BFCL categories are present, else ``mean``) against budget.
"""

from __future__ import annotations

import json
from pathlib import Path

from sglang_pask.eval.summary import aggregate, category_order

__all__ = ["load_summary", "merge", "report_markdown", "plot", "write_report"]

_AGGS = ("mean8", "non_live", "live", "mean")


def load_summary(run_dir: str | Path) -> dict:
    p = Path(run_dir) / "summary.json"
    if not p.exists():
        raise ValueError(f"{run_dir}: no summary.json (is it a `pask eval --out` directory?)")
    return json.loads(p.read_text(encoding="utf-8"))


def _key(summary: dict) -> tuple[str, float]:
    cfg = summary.get("config", {})
    budget = cfg.get("budget")
    return (str(cfg.get("method") or cfg.get("backend") or "unknown"), 1.0 if budget is None else float(budget))


def merge(runs: dict[str, dict]) -> tuple[list[dict], list[str]]:
    """Rows ``{"method", "budget", "categories", "runs", **aggregates}`` sorted by (method, budget),
    and warnings. ``runs`` maps a run's name (its directory) to its summary."""
    rows: dict[tuple, dict] = {}
    src: dict[tuple, str] = {}
    warnings: list[str] = []
    for name, s in runs.items():
        key = _key(s)
        row = rows.setdefault(key, {"method": key[0], "budget": key[1], "categories": {}, "runs": [], "incomplete": []})
        row["runs"].append(name)
        if s.get("complete") is False:
            row["incomplete"].append(name)
            warnings.append(f"{name}: incomplete run (resume it with the same `pask eval` command)")
        for cat, v in s.get("categories", {}).items():
            old = row["categories"].get(cat)
            if old is not None:
                keep_new = v["n"] > old["n"]
                warnings.append(
                    f"{key[0]}@{key[1]} {cat}: in {src[key + (cat,)]} and {name}; "
                    f"keeping {name if keep_new else src[key + (cat,)]}"
                )
                if not keep_new:
                    continue
            row["categories"][cat] = {"n": v["n"], "correct": v["correct"], "accuracy": v["correct"] / v["n"]}
            src[key + (cat,)] = name
    out = []
    for key in sorted(rows):
        row = rows[key]
        row["categories"] = dict(sorted(row["categories"].items(), key=lambda kv: category_order(kv[0])))
        row.update(aggregate(row["categories"]))
        out.append(row)
    return out, warnings


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def report_markdown(rows: list[dict]) -> str:
    cats = sorted({c for r in rows for c in r["categories"]}, key=category_order)
    aggs = [a for a in _AGGS if any(r.get(a) is not None for r in rows)]
    head = ["method", "budget"] + cats + aggs
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(cats) + len(aggs))]
    for r in rows:
        cells = [r["method"] + (" (incomplete)" if r["incomplete"] else ""), f"{r['budget']:g}"]
        cells += [_pct(r["categories"][c]["accuracy"]) if c in r["categories"] else "-" for c in cats]
        cells += [_pct(r.get(a)) for a in aggs]
        lines.append("| " + " | ".join(cells) + " |")
    return "Accuracy in %; n per cell is in report.json.\n\n" + "\n".join(lines) + "\n"


def plot(rows: list[dict], path: str | Path) -> Path:
    """Accuracy (headline) against budget, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    label = "mean8" if all(r.get("mean8") is not None for r in rows) else "mean"
    for method in sorted({r["method"] for r in rows}):
        pts = sorted((r["budget"], r.get(label)) for r in rows if r["method"] == method and r.get(label) is not None)
        if pts:
            ax.plot([b for b, _ in pts], [100 * a for _, a in pts], marker="o", label=method)
    ax.set_xlabel("KV budget (fraction of Full KV)")
    ax.set_ylabel(f"accuracy % ({label})")
    ax.set_xlim(0, 1.05)
    ax.set_ylim(-2, 102)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def write_report(run_dirs: list[str], out_dir: str | Path) -> dict:
    """Write report.md, report.json and accuracy_vs_budget.png (if matplotlib is installed)."""
    runs = {str(d): load_summary(d) for d in run_dirs}
    rows, warnings = merge(runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = report_markdown(rows)
    (out / "report.md").write_text(md, encoding="utf-8")
    (out / "report.json").write_text(
        json.dumps({"rows": rows, "warnings": warnings}, indent=2) + "\n", encoding="utf-8"
    )
    files = [out / "report.md", out / "report.json"]
    try:
        files.append(plot(rows, out / "accuracy_vs_budget.png"))
    except ModuleNotFoundError:
        warnings.append("matplotlib is not installed (requirements/eval.txt): no PNG written")
    return {"rows": rows, "warnings": warnings, "markdown": md, "files": [str(f) for f in files]}
