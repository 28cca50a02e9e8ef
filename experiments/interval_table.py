"""The compression interval by measurement (``continuous`` schedule): accuracy on the **calib**
split and serving throughput against the interval, side by side in one run, and the interval the
table picks (written by this script: report.md, results.json, meta.json into ``--out``).

* Accuracy: the reference runner (``sglang_pask.score``; the server keeps the same sets) on
  ``--data`` (calib only: the pick is a decision), constrained, greedy, PASK with ``--policy`` at
  its budget under ``continuous`` every k decode steps, for each k of ``--intervals``; the policy's
  own point (prefill) as a reference row.
* Throughput: ``bench/server_capacity.py``'s pair -- Full KV and PASK at the same KV bytes, the
  same tool requests sent at once (``--requests``) -- at each interval and the policy's point.
* The pick: among the intervals whose calib accuracy is within ``--tolerance`` points of interval
  1's, the one of highest output throughput.

    .venv/bin/python -m experiments.interval_table --out experiments/results/pask-tiny-fc-interval-table
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from sglang_pask.policy.shipped import shipped_policy

from bench.server_capacity import (
    calib_runner,
    pair,
    parse_points,
    run_meta,
    tool_requests,
    write_dataset,
    write_outputs,
)


def accuracy_rows(a, intervals: list[int]) -> dict:
    import sglang_pask
    from sglang_pask.calibrate.search import accuracy

    policy, runner, entries, settings = calib_runner(a, "interval_table")
    out = {}
    for label, kw in [("policy", {})] + [(f"continuous:{k}", {"schedule": "continuous", "interval": k})
                                         for k in intervals]:
        t = time.time()
        recs = sglang_pask.score(runner, "pask", entries, budget=policy.budget, policy=policy, settings=settings, **kw)
        out[label] = {"accuracy": round(100 * accuracy(recs), 2), "n": len(recs), "seconds": round(time.time() - t, 1)}
        print(f"[accuracy] {label}: {out[label]['accuracy']:.1f} (n = {len(recs)}, {out[label]['seconds']:.0f} s)",
              flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--data", default="synthetic:calib:200:tiny")
    p.add_argument("--intervals", default="1,4,16,64")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--prompt-tokens", type=int, default=1100)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--full-tokens", type=int, default=8192)
    p.add_argument("--tolerance", type=float, default=1.0, help="accuracy points below interval 1 still allowed")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from sglang_pask.policy.document import load_policy
    from transformers import AutoTokenizer

    t0 = time.time()
    intervals = [int(x) for x in a.intervals.split(",")]
    if intervals[0] != 1:
        p.error("--intervals must start with 1 (the reference the tolerance is measured from)")
    acc = accuracy_rows(a, intervals)
    budget = load_policy(a.policy, model_dir=a.model).budget
    points = parse_points(",".join(["policy"] + [f"continuous:{k}" for k in intervals]))
    with tempfile.TemporaryDirectory(prefix="pask-interval-") as d:
        work = Path(d)
        write_dataset(work / "data.jsonl", tool_requests(AutoTokenizer.from_pretrained(a.model), a.requests,
                                                          a.prompt_tokens, 0), a.output_len)
        serve = pair(a.model, a.policy, budget, a.full_tokens, work / "data.jsonl", a.requests, a.requests, work,
                     "interval-", points=points)
    rows = []
    for i, (label, _) in enumerate(points):
        name, ratio = ("pask", "ratio") if i == 0 else (f"pask-{i}", f"ratio_{i}")
        rows.append({"point": label, **acc[label], "output_throughput": serve[name]["output_throughput"],
                     "throughput_vs_full": serve[ratio]["output_throughput"],
                     "median_tpot_ms": serve[name]["median_tpot_ms"],
                     "max_running_req": serve[name]["max_running_req"]})
    ref = rows[1]["accuracy"]
    eligible = [r for r in rows[1:] if r["accuracy"] >= ref - a.tolerance]
    pick = max(eligible, key=lambda r: r["output_throughput"])
    meta = run_meta(t0)
    full = serve["full"]
    lines = ["# The compression interval by measurement (written by experiments/interval_table.py)", "",
             f"Command: `{meta['command']}` ({meta['machine']}, {meta['code']}, {meta['date']}, "
             f"{meta['wall_s']:.0f} s). "
             f"`{a.model}`, `{a.policy}` at b = {budget:g}. Accuracy: reference runner on `{a.data}` (calib), "
             f"constrained, greedy. Throughput: {a.requests} tool requests (~{a.prompt_tokens} prompt tokens, "
             f"{a.output_len} output) sent at once; Full KV with {a.full_tokens} tokens of KV ran "
             f"{full['output_throughput']:.1f} tok/s, {full['max_running_req']} at once; PASK at the same KV "
             "bytes.", "",
             "| operating point | calib accuracy | output tok/s | vs Full | median TPOT ms | max running |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['point']} | {r['accuracy']:.1f} | {r['output_throughput']:.1f} | {r['throughput_vs_full']:.2f}x | "
              f"{r['median_tpot_ms']:.1f} | {r['max_running_req']} |" for r in rows]
    lines += ["", f"Pick (continuous): **{pick['point']}** -- the highest output throughput among the intervals "
              f"within {a.tolerance:g} point(s) of interval 1's calib accuracy ({ref:.1f})."]
    write_outputs(a.out, {"rows": rows, "pick": pick["point"], "full": full, "tolerance": a.tolerance}, meta,
                  "\n".join(lines) + "\n")
    print(f"wrote {a.out}/: report.md, results.json, meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
