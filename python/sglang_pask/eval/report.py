"""Merge ``pask eval`` runs into one table (with 95% bootstrap intervals) and an accuracy/budget PNG.

A run is a directory with ``summary.json`` (its ``config`` is the run record,
:mod:`sglang_pask.eval.records`) and ``results.jsonl`` (per-entry correctness, for the intervals).

Rows are keyed by everything that defines the experiment. The *experiment* fields
(:data:`EXPERIMENT_FIELDS`: model (path + config fingerprint), data (the spec; any bfcl category
list counts as "bfcl", so per-category runs merge), tool_choice, max_tokens, temperature,
enable_thinking, backend) must agree across all runs: a report refuses, with one line naming the
field and two runs, to put runs of different experiments in one table, unless ``group_by`` names
that field (then it becomes part of the row key and a column). Within an experiment a row is
``(method + its non-default options + how the engine compressed -- a shared segment, a server's
radix cache --, schedule, budget, policy hash)``; runs with the same row key
are merged category by category (one run per category); if two hold the same category, the one
with more entries wins and a warning names both.

Intervals: :func:`sglang_pask.eval.stats.bootstrap_ci` over the row's entries (2000 resamples,
seed 0, stratified by category); ``row["ci"]`` maps each category and aggregate to ``[lo, hi]``.
Compare two rows with :func:`paired` (the paired bootstrap of their difference).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sglang_pask.eval.records import method_label
from sglang_pask.eval.summary import aggregate, category_order

__all__ = ["EXPERIMENT_FIELDS", "load_run", "load_summary", "merge", "report_markdown", "plot", "paired",
           "write_report"]

_AGGS = ("mean8", "non_live", "live", "mean")
EXPERIMENT_FIELDS = ("model", "data", "tool_choice", "max_tokens", "temperature", "enable_thinking", "backend")


def load_summary(run_dir: str | Path) -> dict:
    p = Path(run_dir) / "summary.json"
    if not p.exists():
        raise ValueError(f"{run_dir}: no summary.json (is it a `pask eval --out` directory?)")
    return json.loads(p.read_text(encoding="utf-8"))


def load_run(run_dir: str | Path) -> dict:
    """``{"summary", "records"}``: summary.json and results.jsonl's records (id -> record)."""
    from sglang_pask.eval.harness import read_results

    return {"summary": load_summary(run_dir), "records": read_results(Path(run_dir) / "results.jsonl")}


# ---- what a run's config says -------------------------------------------------------------------


def _model_key(cfg: dict) -> str:
    m = cfg.get("model")
    if isinstance(m, dict):  # the folder's name (runs may give it relative or absolute) + its fingerprint
        name = os.path.basename(os.path.normpath(str(m.get("path"))))
        return f"{name} ({m['fingerprint']})" if m.get("fingerprint") else name
    return str(m) if m is not None else "-"


def _data_key(cfg: dict) -> str:
    spec = str(cfg.get("data") or "-")
    key = "bfcl" if spec.startswith("bfcl") else spec
    return f"{key} limit={cfg['limit']}" if cfg.get("limit") else key


def experiment(cfg: dict) -> dict:
    """The experiment fields of a run config, as comparable strings."""
    out = {"model": _model_key(cfg), "data": _data_key(cfg)}
    for f in EXPERIMENT_FIELDS[2:]:
        out[f] = json.dumps(cfg.get(f)) if not isinstance(cfg.get(f), str) else cfg[f]
    return out


def _method(cfg: dict) -> tuple[str, dict]:
    m = cfg.get("method")
    if isinstance(m, dict):
        return str(m.get("name")), dict(cfg.get("method_options") or {})
    return str(m or cfg.get("backend") or "unknown"), dict(cfg.get("method_options") or {})


def _schedule(cfg: dict) -> str:
    m = cfg.get("method")
    s = cfg.get("schedule") or (m.get("schedule") if isinstance(m, dict) else None)
    return str(s) if s else "-"


def _policy(cfg: dict) -> str:
    p = cfg.get("policy")
    if isinstance(p, dict):
        return f"{p.get('name') or 'policy'}@{str(p.get('sha256', ''))[:10]}"
    return str(p) if p else "-"


def _engine(cfg: dict) -> str:
    """How the engine compressed, when it is not the whole prompt per request: `` [segment=system,
    radix]`` (the shared segment compressed alone; a server's radix cache on)."""
    parts = [f"segment={cfg['segment']}"] if cfg.get("segment") not in (None, "none") else []
    parts += [f"segment budget {cfg['segment_budget']:g}"] if parts and cfg.get("segment_budget") else []
    parts += [f"own budget {cfg['own_budget']:g}"] if parts and cfg.get("own_budget") else []
    parts += ["full prefill"] if parts and cfg.get("segment_prefill") == "full" else []
    parts += ["radix"] if cfg.get("radix_cache") else []
    return f" [{', '.join(parts)}]" if parts else ""


def row_key(cfg: dict, group_by: tuple[str, ...] = ()) -> tuple:
    name, opts = _method(cfg)
    budget = cfg.get("budget")
    exp = experiment(cfg)
    return (tuple(exp[f] for f in group_by), method_label(name, opts) + _engine(cfg), _schedule(cfg),
            1.0 if budget is None else float(budget), _policy(cfg))


def _refuse_mixed(runs: dict[str, dict], group_by: tuple[str, ...]) -> None:
    first: dict[str, tuple[str, str]] = {}
    for name, s in runs.items():
        for f, v in experiment(s.get("config", {})).items():
            if f in group_by:
                continue
            if f not in first:
                first[f] = (name, v)
            elif first[f][1] != v:
                raise ValueError(
                    f"runs differ in {f}: {first[f][0]} has {first[f][1]}, {name} has {v} "
                    f"(report them separately, or pass --group-by {f})")


# ---- merging ------------------------------------------------------------------------------------


def merge(runs: dict[str, dict], group_by: tuple[str, ...] = (), records: dict[str, dict] | None = None,
          ) -> tuple[list[dict], list[str]]:
    """Rows sorted by key, and warnings. ``runs``: run name -> summary; ``records``: run name ->
    {id: record} (its results.jsonl) for the intervals. Row: ``{"group", "method", "options",
    "label", "schedule", "budget", "policy", "categories", "runs", "incomplete", "ci",
    "records", **aggregates}`` (``records``: the row's per-entry records, list; not written to
    report.json). Raises ValueError for runs of different experiments (module docstring)."""
    group_by = tuple(group_by)
    for f in group_by:
        if f not in EXPERIMENT_FIELDS:
            raise ValueError(f"--group-by {f!r}: choose from {', '.join(EXPERIMENT_FIELDS)}")
    _refuse_mixed(runs, group_by)
    rows: dict[tuple, dict] = {}
    src: dict[tuple, str] = {}
    warnings: list[str] = []
    for name, s in runs.items():
        cfg = s.get("config", {})
        key = row_key(cfg, group_by)
        mname, opts = _method(cfg)
        row = rows.setdefault(key, {
            "group": dict(zip(group_by, key[0])), "method": mname, "options": opts, "label": key[1],
            "schedule": key[2], "budget": key[3], "policy": key[4], "categories": {}, "runs": [],
            "incomplete": [], "_recs": {}})
        row["runs"].append(name)
        if s.get("complete") is False:
            row["incomplete"].append(name)
            warnings.append(f"{name}: incomplete run (resume it with the same `pask eval` command)")
        for cat, v in s.get("categories", {}).items():
            old = row["categories"].get(cat)
            if old is not None:
                keep_new = v["n"] > old["n"]
                warnings.append(f"{_label(row)}@{key[3]:g} {cat}: in {src[key + (cat,)]} and {name}; "
                                f"keeping {name if keep_new else src[key + (cat,)]}")
                if not keep_new:
                    continue
            row["categories"][cat] = {"n": v["n"], "correct": v["correct"], "accuracy": v["correct"] / v["n"]}
            src[key + (cat,)] = name
            if records is not None:
                recs = [r for r in records.get(name, {}).values() if r.get("category") == cat]
                row["_recs"][cat] = (name, recs)
    out = []
    for key in sorted(rows):
        row = rows[key]
        row["categories"] = dict(sorted(row["categories"].items(), key=lambda kv: category_order(kv[0])))
        row.update(aggregate(row["categories"]))
        row["n"] = sum(v["n"] for v in row["categories"].values())
        row["records"], row["ci"] = _intervals(row, records is not None, warnings)
        del row["_recs"]
        out.append(row)
    return out, warnings


def _intervals(row: dict, wanted: bool, warnings: list[str]) -> tuple[list[dict], dict]:
    from sglang_pask.eval.stats import bootstrap_ci

    if not wanted:
        return [], {}
    recs: list[dict] = []
    for cat, v in row["categories"].items():
        run, rs = row["_recs"].get(cat, ("?", []))
        n_ok = sum(1 for r in rs if r.get("valid"))
        if len(rs) != v["n"] or n_ok != v["correct"]:
            warnings.append(f"{run}: results.jsonl holds {len(rs)} {cat} records ({n_ok} correct), "
                            f"summary.json {v['n']} ({v['correct']}): no intervals for {_label(row)}")
            return [], {}
        recs.extend(rs)
    return recs, bootstrap_ci(recs)


def paired(row_a: dict, row_b: dict, metric: str = "mean", **kwargs) -> dict:
    """Paired bootstrap of ``metric(row_a) - metric(row_b)`` over their common entries
    (:func:`sglang_pask.eval.stats.paired_bootstrap`); rows from :func:`merge`."""
    from sglang_pask.eval.stats import paired_bootstrap

    return paired_bootstrap(row_a["records"], row_b["records"], metric=metric, **kwargs)


# ---- output -------------------------------------------------------------------------------------


def _label(r: dict) -> str:
    return r["label"] + ("" if r["schedule"] == "-" else f" ({r['schedule']})")


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _ci(r: dict, k: str) -> str:
    ci = r.get("ci", {}).get(k)
    return "" if not ci else f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def report_markdown(rows: list[dict], experiment_fields: dict | None = None) -> str:
    cats = sorted({c for r in rows for c in r["categories"]}, key=category_order)
    aggs = [a for a in _AGGS if any(r.get(a) is not None for r in rows)]
    groups = list(rows[0]["group"]) if rows else []
    head = groups + ["method", "schedule", "budget", "policy", "n"] + cats + [f"{a} [95% CI]" for a in aggs]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "---|" * (len(groups) + 4) + "---:|" * (1 + len(cats) + len(aggs))]
    for r in rows:
        cells = [r["group"][g] for g in groups]
        cells += [r["label"] + (" (incomplete)" if r["incomplete"] else ""), r["schedule"], f"{r['budget']:g}",
                  r["policy"], str(r["n"])]
        cells += [_pct(r["categories"][c]["accuracy"]) if c in r["categories"] else "-" for c in cats]
        cells += [_pct(r.get(a)) + _ci(r, a) for a in aggs]
        lines.append("| " + " | ".join(cells) + " |")
    head_lines = []
    if experiment_fields:
        head_lines.append("Experiment: " + ", ".join(f"{k}={v}" for k, v in experiment_fields.items()) + ".")
    head_lines.append("Accuracy in %; 95% bootstrap intervals over entries (2000 resamples, stratified by "
                      "category); per-category intervals are in report.json.")
    return "\n".join(head_lines) + "\n\n" + "\n".join(lines) + "\n"


def plot(rows: list[dict], path: str | Path) -> Path:
    """Accuracy (headline) against budget, one line per (method, schedule), with interval bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    label = "mean8" if all(r.get("mean8") is not None for r in rows) else "mean"
    lines: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get(label) is not None:
            lines.setdefault((tuple(r["group"].values()), r["label"], r["schedule"], r["policy"]), []).append(r)
    # one colour per method (label + group), one line style per schedule
    colours = {k[:2]: plt.cm.tab10(i % 10) for i, k in enumerate(dict.fromkeys(k[:2] for k in sorted(lines)))}
    styles = {"prefill": "-", "continuous": "--"}
    for (group, name, schedule, _pol), rs in sorted(lines.items()):
        rs = sorted(rs, key=lambda r: r["budget"])
        xs = [r["budget"] for r in rs]
        ys = [100 * r[label] for r in rs]
        cis = [r.get("ci", {}).get(label) for r in rs]
        err = None
        if all(cis):
            err = [[y - 100 * c[0] for y, c in zip(ys, cis)], [100 * c[1] - y for y, c in zip(ys, cis)]]
        text = " ".join([*group, name] + ([] if schedule == "-" else [f"({schedule})"]))
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=text, color=colours[(group, name)],
                    linestyle=styles.get(schedule, ":"), alpha=0.9)
    ax.set_xlabel("KV budget (fraction of Full KV kept)")
    ax.set_ylabel(f"accuracy % ({label}), 95% CI")
    ax.set_xlim(0, 1.05)
    ax.set_ylim(-2, 102)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def _public(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "records"}


def write_report(run_dirs: list[str], out_dir: str | Path, group_by: tuple[str, ...] = ()) -> dict:
    """Write report.md, report.json and accuracy_vs_budget.png (if matplotlib is installed).
    Raises ValueError for runs of different experiments (module docstring)."""
    loaded = {str(d): load_run(d) for d in run_dirs}
    runs = {k: v["summary"] for k, v in loaded.items()}
    rows, warnings = merge(runs, group_by, {k: v["records"] for k, v in loaded.items()})
    exp = {f: v for f, v in experiment(next(iter(runs.values())).get("config", {})).items()
           if f not in group_by} if runs else {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = report_markdown(rows, exp)
    (out / "report.md").write_text(md, encoding="utf-8")
    (out / "report.json").write_text(json.dumps(
        {"experiment": exp, "group_by": list(group_by), "rows": [_public(r) for r in rows], "warnings": warnings},
        indent=2) + "\n", encoding="utf-8")
    files = [out / "report.md", out / "report.json"]
    try:
        files.append(plot(rows, out / "accuracy_vs_budget.png"))
    except ModuleNotFoundError:
        warnings.append("matplotlib is not installed (requirements/eval.txt): no PNG written")
    return {"rows": rows, "warnings": warnings, "markdown": md, "files": [str(f) for f in files]}
