"""Each calibration's chosen member per budget with its fit, k-fold and held-out calib scores and,
once, at the end, its eval score: one table from the calibration records (``NAME.calibration.json``)
and the eval runs of the chosen policies (``pask eval`` folders).

    .venv/bin/python bench/calibration_summary.py \
        --calibration "lookup=experiments/policies/pask-tiny-fc.sturdy.calibration.json=runs/report/pask-sturdy-{b}" \
        --budgets 0.5,0.33,0.2 --out bench/results/.../calibration-summary.md

Fit: the chosen member on the search's fit entries. K-fold: the search re-run on k - 1 folds of
them, its choice scored on the held fold (the estimate of choosing by this search). Held-out: the
calib entries the search never saw. Eval: the eval split, run once after every decision was made.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def rows_for(label: str, record: Path, runs: str, budgets: list[str]) -> list[list[str]]:
    doc = json.loads(record.read_text())
    out = []
    for b in budgets:
        s = doc.get("search", {}).get(b)
        if s is None:
            continue
        best = s["rows"][s["best"]]
        kf = s.get("kfold") or {}
        check = doc.get("check", {}).get(b, {})
        summary = Path(runs.format(b=b)) / "summary.json"
        ev = json.loads(summary.read_text())["mean"] if summary.exists() else None
        base = s.get("baseline_method", "snapkv")
        kfold = f"{_pct(kf.get('estimate'))} ({kf.get('agree')}/{kf.get('k')} folds agree)" if kf else "-"
        out.append([label, b, best["label"], f"{_pct(best.get('accuracy'))} (n = {s['n']})", kfold,
                    f"{_pct(check.get('pask'))} vs {base} {_pct(check.get('baseline'))} (n = {check.get('n', '-')})",
                    _pct(ev)])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration", action="append", required=True, metavar="LABEL=RECORD=RUNS",
                   help="a calibration record and its chosen policies' eval runs ({b}: the budget)")
    p.add_argument("--budgets", default="0.5,0.33,0.2")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    budgets = [f"{float(b):g}" for b in a.budgets.split(",")]
    rows = []
    for spec in a.calibration:
        label, record, runs = spec.split("=", 2)
        rows += rows_for(label, Path(record), runs, budgets)
    head = ["calibration", "budget", "chosen member", "fit (calib)", "k-fold (calib)", "held-out check (calib)",
            "eval"]
    lines = ["# Chosen members: fit, k-fold and held-out calib, then eval", "",
             "Fit: the chosen member on the search's fit entries. K-fold: the search re-run on k - 1 folds of "
             "them, its choice scored on the held fold. Held-out: calib entries the search never saw, paired "
             "with the calibration's baseline. Eval: the eval split, run once, after every decision.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
