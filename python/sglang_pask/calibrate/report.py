"""The calibration report beside the policy: ``NAME.calibration.md`` (S and D tables, the family
search with calib scores, the held-out check, timings) and the heatmaps ``NAME.S.png`` /
``NAME.D.png`` (written when matplotlib is installed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sglang_pask.calibrate.family import sensitivity_score

__all__ = ["write_report"]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _fail(x: float | None, unit: str = "") -> str:
    """A failure rate or rise in points; "-" where it was not measured (sensitivity signal nll)."""
    if x is None:
        return "-"
    return f"{100 * x:.1f}{unit}" if unit else f"{100 * x:+.1f}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _heatmap(matrix: np.ndarray, rows: list[str], cols: list[str], title: str, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * len(cols) + 2), 0.5 * len(rows) + 1.8))
    im = ax.imshow(matrix, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows)
    for (i, j), v in np.ndenumerate(matrix):
        ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=6, color="w")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _engine_line(cfg: dict) -> list[str]:
    """The segment rule the search and check scored under, when it is not the whole prompt."""
    if cfg.get("segment", "none") == "none":
        return []
    own = cfg.get("own_budget")
    return [f"Search and check scored under `--segment {cfg['segment']}` (the tools block compressed "
            f"alone, as a server with the radix cache on), each request's own tokens at "
            f"{'the budget counting the segment' if own is None else f'budget {own:g}'}; PASK and "
            "SnapKV alike.", ""]


def _reused_line(reused: dict) -> list[str]:
    """Which stages were adopted from a record of other code (``--reuse-stages``), and whose."""
    by_code: dict[str, list[str]] = {}
    for stage, code in reused.items():
        by_code.setdefault(code, []).append(stage)
    return [line for code, stages in by_code.items()
            for line in (f"Adopted with `--reuse-stages` (measured by {code}, same configuration): "
                         f"{', '.join(stages)}.", "")]


#: the teacher-forced search objectives and what their values are
_FORCED = {"nll": "gold NLL/token", "kl": "KL from Full KV/token"}


def _base_name(rec: dict) -> str:
    """The paired baseline a search or check record names (older records: SnapKV at prefill)."""
    return {"snapkv": "SnapKV"}.get(rec.get("baseline_method", "snapkv"), rec.get("baseline_method", "snapkv"))


def _kfold_lines(s: dict, value) -> list[str]:
    """The k-fold estimate of one budget's search (:mod:`.kfold`)."""
    kf = s["kfold"]
    out = [f"K-fold ({kf['k']} folds of the fit entries): the search re-run on the other folds chose, and "
           f"scored on the held fold. Estimate {value(kf['estimate'])} against the chosen member's fit "
           f"{value(kf['fit'])}; {kf['agree']} of {kf['k']} folds chose the same member. Members scored only "
           f"for the folds: {len(s.get('kfold_rows', []))}.", ""]
    out += _table(["fold", "n", "chosen on the other folds", "other folds", "held fold"],
                  [[str(i), str(f["n"]), f["chosen"], value(f["train"]), value(f["held"])]
                   for i, f in enumerate(kf["folds"])])
    return out + [""]


def write_report(doc: dict, out: Path, policies: dict) -> Path:
    """Write the markdown (and PNGs) for the measurement document ``doc`` of ``--out`` ``out``."""
    cfg, sens = doc["config"], doc["sensitivity"]
    classes = sens["classes"]
    G = len(sens["fail"])
    sizes = doc.get("split_sizes", {})
    lines = [f"# Calibration: {out.name}", "",
             f"Model `{cfg['model']}`, data `{cfg['data']}` (calib split only; the eval split is never "
             f"used here), seed {cfg['seed']}, {cfg['groups']} layer groups, schedule `{cfg['schedule']}`, "
             f"max_tokens {cfg['max_tokens']}, tool_choice {cfg['tool_choice']}. Entries: "
             f"{sizes.get('probe')} probe (S, D) within {sizes.get('fit')} fit (family search); "
             f"{sizes.get('check')} held-out check. Code: {cfg['code']}.", "",
             *_reused_line(doc.get("reused", {})),
             *[line for b, lent in doc.get("reused_search", {}).items()
               for r in (lent if isinstance(lent, list) else [lent])  # older records: one dict
               for line in (f"b = {b}: {r['members']} members scored by `{r['record']}` (same fit entries, "
                            "baseline and operating point) were reused, not scored again."
                            + (f" Warning: {r['warning']}." if r.get("warning") else ""), "")],
             *_engine_line(cfg),
             "## Task-error sensitivity S[g][c]", "",
             f"Drop class c in group g only, at prefill end (all else Full KV). Full KV on the probe "
             f"entries: failure rate {_fail(sens['full']['fail'], '%')}, gold NLL {sens['full']['nll']:.4f} "
             "nats/token. Rise in failure rate (points) / rise in gold NLL (nats/token), over the entries "
             "holding the class (`n`; `tokens`: its mean token count there); s = max(fail, 0) + max(nll, 0) "
             "orders the classes (rank total), or s / tokens (rank density).", ""]
    rows = []
    tokens = sens.get("tokens", {})
    for c in classes:
        cells = [c, str(sens["count"][c]), f"{tokens[c]:.1f}" if c in tokens else "-"]
        for g in range(G):
            f, n = sens["fail"][g][c], sens["nll"][g][c]
            cells.append(f"{_fail(f)} / {n:+.4f}")
        rows.append(cells)
    lines += _table(["class", "n", "tokens"] + [f"group {g} fail / nll" for g in range(G)], rows)
    if any(sens.get("delimiters") or []):
        lines += ["", "### Span delimiters", "",
                  "Class c kept, but the delimiters next to it (SCHEMA_PUNCT / OUT_DELIM at distance 1) "
                  "dropped in group g only: rise in failure rate (points) / gold NLL (nats/token).", ""]
        names = [c for c in classes if any(c in d for d in sens["delimiters"])]
        lines += _table(["class", "n"] + [f"group {g} fail / nll" for g in range(G)],
                        [[c, str(sens["count"][c])] + [
                            f"{_fail(d[c]['fail'])} / {d[c]['nll']:+.4f}" if c in d else "-"
                            for d in sens["delimiters"]] for c in names])
    if "joint" in doc:
        j = doc["joint"]
        lines += ["", "### Joint probe", "",
                  "Class c dropped from every layer at once (all else Full KV), over the same probe entries: rise "
                  "in failure rate (points) / gold NLL (nats/token). Rank `joint` orders every group by "
                  "(max(fail, 0) + max(nll, 0)) / tokens from this column.", ""]
        lines += _table(["class", "n", "all groups fail / nll"],
                        [[c, str(sens["count"].get(c, "-")), f"{_fail(j['fail'][c])} / {j['nll'][c]:+.4f}"]
                         for c in j["nll"]])
    budgets = list(doc["distortion"][0])
    lines += ["", "## Attention-output distortion D[g](b)", "",
              "Relative error of group g's attention output on the gold-answer positions (teacher "
              "forcing) when only group g keeps sinks + the newest tokens (b of the prompt).", ""]
    lines += _table(["group"] + [f"b={b}" for b in budgets],
                    [[str(g)] + [f"{doc['distortion'][g][b]:.4f}" for b in budgets] for g in range(G)])
    lines += ["", "## Family search (fit entries, calib)", "",
              "Coordinate search (`calibrate/search.py`) over the family of `calibrate/family.py`: w = "
              "recent window as a fraction of b x mean prompt length, k = sensitive classes with a floor (1, or "
              "floor=f: that share of their tokens), "
              "residual shares proportional to D^alpha x (g+1)^tilt, sinks, pin = classes floored in every group "
              "(names: tool and parameter names; +values: enum values and the query too). Rows in scoring order; the "
              "chosen member in bold."
              + (f" The search started at the first row's member (`--search-start {cfg['search_start']}`)."
                 if cfg.get("search_start") else ""), ""]
    for b, s in doc.get("search", {}).items():
        objective = s.get("objective", "accuracy")
        forced = objective in _FORCED
        value = (lambda x: f"{x:.4f}") if forced else _pct
        diff = (lambda x: f"{x:+.4f}") if forced else (lambda x: f"{100 * x:+.1f}")
        base = _base_name(s)
        lines += [f"### b = {b} (n = {s['n']}; {base} {value(s['baseline'])}"
                  f"{' ' + _FORCED[objective] if forced else ''}; {s.get('passes', 1)} pass(es))", ""]
        rows = [[("**" + r["label"] + "**") if i == s["best"] else r["label"],
                 value(r[objective]),
                 f"{diff(r['diff'])} [{diff(r['ci'][0])}, {diff(r['ci'][1])}]"]
                for i, r in enumerate(s["rows"])]
        head = ["member", f"{_FORCED[objective]} (lower is better)" if forced else "accuracy",
                f"diff vs {base} [95% CI]"]
        lines += _table(head, rows) + [""]
        if "kfold" in s:
            lines += _kfold_lines(s, (lambda x, v=value: v(-x)) if forced else value)  # minus a forced value
    if doc.get("check"):
        lines += ["## Held-out check (calib entries the search never saw)", ""]
        rows = [[b, str(c["n"]), _pct(c["pask"]), f"{_pct(c['baseline'])} ({_base_name(c)})",
                 f"{100 * c['diff']:+.1f} [{100 * c['ci'][0]:+.1f}, {100 * c['ci'][1]:+.1f}]",
                 f"`{Path(policies[float(b)]).name}`" if float(b) in policies else ""]
                for b, c in doc["check"].items()]
        lines += _table(["budget", "n", "pask (chosen)", "baseline", "paired diff [95% CI]", "policy"], rows)
        lines.append("")
        summary = [[b, s["rows"][s["best"]]["label"], _pct(s["kfold"]["fit"]), _pct(s["kfold"]["estimate"]),
                    _pct(doc["check"][b]["pask"]) if b in doc["check"] else "-"]
                   for b, s in doc.get("search", {}).items()
                   if "kfold" in s and s.get("objective", "accuracy") == "accuracy"]
        if summary:
            lines += ["## Chosen members: fit, k-fold and held-out calib", "",
                      "Fit: the chosen member on all fit entries (what the search maximised). K-fold: the "
                      "search's choice on k - 1 folds scored on the held fold (the estimate of choosing by this "
                      "search). Held-out: the check entries. All calib.", ""]
            lines += _table(["budget", "chosen member", "fit", "k-fold", "held-out check"], summary)
        lines.append("")
    if doc.get("pools"):
        lines += ["## What each group holds (the server's pool sizes)", "",
                  "Per layer group, the share of a prompt's positions the chosen policy holds (its `pools` "
                  "block; the server sizes each group's KV pool in proportion at the same KV bytes).", ""]
        G = max(len(p["share"]) for p in doc["pools"].values())
        lines += _table(["budget", *(f"group {g}" for g in range(G)), "entries"],
                        [[b, *(f"{x:.3f}" for x in p["share"]), str(p["entries"])] for b, p in doc["pools"].items()])
        lines.append("")
    lines += ["## Wall time", "", "Seconds per phase, on this machine (a resumed run reuses earlier phases):", ""]
    lines += _table(["phase", "s"], [[k, f"{v:.1f}"] for k, v in doc.get("timings_s", {}).items()])
    s_mat = np.array([[s[c] for c in classes] for s in sensitivity_score(sens)])
    d_mat = np.array([[doc["distortion"][g][b] for b in budgets] for g in range(G)])
    groups = [f"group {g}" for g in range(G)]
    pngs = []
    title = "S[g][c] = NLL rise" if sens.get("signal") == "nll" else "S[g][c] = fail rise + NLL rise"
    if _heatmap(s_mat, groups, classes, title, out.with_name(f"{out.stem}.S.png")):
        pngs.append(f"{out.stem}.S.png")
    if _heatmap(d_mat, groups, [f"b={b}" for b in budgets], "D[g](b)", out.with_name(f"{out.stem}.D.png")):
        pngs.append(f"{out.stem}.D.png")
    lines += [""] + [f"![{p}]({p})" for p in pngs]
    md = out.with_name(f"{out.stem}.calibration.md")
    md.write_text("\n".join(lines) + "\n")
    return md
