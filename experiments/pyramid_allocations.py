"""Why PyramidKV scores below SnapKV on pask-tiny-fc: per-layer budgets and what each layer keeps.

For each entry of a data spec (default: the calib split, so no eval entry informs anything), runs
the reference runner's prefill under SnapKV and PyramidKV (schedule ``prefill``: one compression,
at prefill end) at each budget, and reports per layer: the allocation (tokens kept), the share of
the prompt kept, and the share of tool-name / parameter-name / query-value tokens kept. Writes a
markdown table (and the raw numbers as JSON) to ``--out``:

    .venv/bin/python -m experiments.pyramid_allocations --out experiments/results/pask-tiny-fc-pyramidkv-allocations
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from sglang_pask.eval.api import load_runner
from sglang_pask.eval.data import load_spec
from sglang_pask.eval.harness import Settings, build_request
from sglang_pask.eval.hf_backend import bind_runner, runner_body
from sglang_pask.structure.classes import StructClass as C

WATCH = {"tool name": C.TOOL_NAME, "param name": C.PARAM_NAME, "query value": C.QUERY_VALUE}


def layer_stats(runner, entries, settings) -> dict:
    """Mean over entries, per layer: allocation, prompt share kept, share of each watched class kept."""
    rows = {"prompt_len": [], "alloc": [], "prompt_share": [], **{k: [] for k in WATCH}}
    for e in entries:
        req, _ = build_request(e, settings)
        res = runner.generate(runner_body(req), max_new_tokens=1)
        comp = res.compressions[0]  # prefill end: every layer held the whole prompt
        P = comp.seq_len
        cls = np.asarray(res.classes[:P])
        rows["prompt_len"].append(P)
        rows["alloc"].append(comp.allocation)
        rows["prompt_share"].append([len(k) / P for k in comp.kept])
        for name, c in WATCH.items():
            of_c = np.flatnonzero(cls == c)
            rows[name].append([np.isin(of_c, k).mean() if of_c.size else np.nan for k in comp.kept])
    return {k: np.nanmean(np.asarray(v, dtype=float), axis=0).round(3).tolist() for k, v in rows.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/pask-tiny-fc")
    ap.add_argument("--data", default="synthetic:calib:40:tiny")
    ap.add_argument("--budgets", default="0.5,0.33,0.2")
    ap.add_argument("--out", required=True, help="folder for allocations.md / allocations.json")
    args = ap.parse_args(argv)
    entries = load_spec(args.data)
    settings = Settings(max_tokens=1, tool_choice="required")
    base = load_runner(args.model)
    out: dict = {"command": " ".join(["python", "-m", "experiments.pyramid_allocations", *sys.argv[1:]]),
                 "data": args.data, "cells": {}}
    lines = [f"Per-layer means over {len(entries)} entries of `{args.data}` (prefill end, schedule prefill). "
             f"Command: `{out['command']}`.", ""]
    for b in [float(x) for x in args.budgets.split(",")]:
        for method in ("snapkv", "pyramidkv"):
            runner = bind_runner(base, method, budget=b, schedule="prefill")
            s = layer_stats(runner, entries, settings)
            out["cells"][f"{method}@{b:g}"] = s
            lines.append(f"**{method} @ {b:g}** (mean prompt {np.mean(s['prompt_len']):.0f} tokens)")
            lines.append("")
            lines.append("| layer | tokens kept | prompt kept | " + " | ".join(f"{k} kept" for k in WATCH) + " |")
            lines.append("|---:|---:|---:|" + "---:|" * len(WATCH))
            for li in range(len(s["alloc"])):
                cells = [f"{s['alloc'][li]:.1f}", f"{100 * s['prompt_share'][li]:.0f}%"]
                cells += [f"{100 * s[k][li]:.0f}%" for k in WATCH]
                lines.append(f"| {li} | " + " | ".join(cells) + " |")
            lines.append("")
            print(f"{method}@{b:g}: alloc {s['alloc']}", file=sys.stderr, flush=True)
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "allocations.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (dest / "allocations.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
