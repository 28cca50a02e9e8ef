"""Paired bootstrap of run folders against a baseline's, one row per budget, as markdown.

    python bench/paired_table.py --runs A=DIR_FMT --baseline B=DIR_FMT [--baseline C=DIR_FMT ...] \
        --budgets 0.5,0.33,0.2 --out FILE.md

With several ``--baseline``, each row pairs A with the most accurate of them at that budget (the
strongest baseline on these very runs, which favours the baselines) and names it.

``DIR_FMT`` holds ``{b}`` (e.g. ``runs/calibrated-pask-tiny-fc/pask-prefill-{b}``); each folder is a
``pask eval`` run (results.jsonl + run.json). Rows refuse to pair runs whose data, model, max_tokens
or tool_choice differ. Accuracy is the reports' ``mean``; intervals are eval/stats.py's (95%,
stratified by category, seed 0).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sglang_pask.eval.stats import bootstrap_ci, paired_bootstrap
from sglang_pask.eval.summary import aggregate

KEYS = ("data", "max_tokens", "tool_choice", "temperature")


def _load(folder: Path) -> tuple[list[dict], dict]:
    recs = [json.loads(x) for x in (folder / "results.jsonl").read_text().splitlines() if x.strip()]
    return recs, json.loads((folder / "run.json").read_text())


def _mean(recs: list[dict]) -> float:
    cats: dict = {}
    for r in recs:
        c = cats.setdefault(r["category"], {"n": 0, "correct": 0})
        c["n"] += 1
        c["correct"] += bool(r["valid"])
    return aggregate(cats)["mean"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True, help="LABEL=DIR_FMT")
    ap.add_argument("--baseline", required=True, action="append", help="LABEL=DIR_FMT (repeatable)")
    ap.add_argument("--budgets", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    la, fa = args.runs.split("=", 1)
    bases = [x.split("=", 1) for x in args.baseline]
    many = len(bases) > 1
    lb = "strongest baseline" if many else bases[0][0]
    lines = [f"| budget | n | {la} [95% CI] | {lb} [95% CI] | {la} - {lb} [paired 95% CI] |", "|---|---|---|---|---|"]
    for b in args.budgets.split(","):
        ra, ma = _load(Path(fa.format(b=b)))
        loaded = [(label, *_load(Path(fmt.format(b=b)))) for label, fmt in bases]
        name, rb, mb = max(loaded, key=lambda t: _mean(t[1]))  # ties: the first listed
        for k in KEYS:
            if ma.get(k) != mb.get(k):
                raise SystemExit(f"b={b}: runs differ in {k}: {ma.get(k)!r} vs {mb.get(k)!r}")
        ca, cb, pb = bootstrap_ci(ra)["mean"], bootstrap_ci(rb)["mean"], paired_bootstrap(ra, rb)
        cell = lambda m, c: f"{100 * m:.1f} [{100 * c[0]:.1f}, {100 * c[1]:.1f}]"  # noqa: E731
        shown = f"{name}: " if many else ""
        lines.append(f"| {b} | {pb['n']} | {cell(_mean(ra), ca)} | {shown}{cell(_mean(rb), cb)} | "
                     f"{100 * pb['diff']:+.1f} [{100 * pb['ci'][0]:+.1f}, {100 * pb['ci'][1]:+.1f}] |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
