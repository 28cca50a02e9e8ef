"""Compression's share of the decode loop, batched vs request by request, at 16 and 64 running
requests (written by this script: report.md, results.json, meta.json into ``--out``).

Each server is this project's launcher with ``--pask-policy`` under the ``continuous`` schedule at
interval 1 (the rule that compresses every request at every decode step: the worst case for
compression's cost; ``--point policy``: the policy's own operating point, e.g. ``prefill``, which
compresses once per request), KV for every
request at once, no radix cache. The same N tool requests (~1,100 prompt tokens, ``--output-len``
tokens each) are sent at once through SGLang's ``bench_serving``. The share is the server's own
timers (``/server_info`` ``compression_time``: seconds inside the compression hook / seconds
between consecutive decode steps). Three variants per N: request by request
(``SGLANG_PASK_BATCHED_COMPRESSION=0``), batched with the torch reference operators
(``SGLANG_PASK_OPS=reference``) and batched with csrc's compiled ones (the default when built;
the row says which ran, from ``/server_info`` ``kernels``).

    .venv/bin/python -m experiments.compression_share --out experiments/results/compression-share
    .venv/bin/python -m experiments.compression_share --point policy \
        --out experiments/results/compression-share-defaults
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from sglang_pask.policy.shipped import shipped_policy
from sglang_pask.testing import running_server

from bench.server_capacity import (
    MATCHED,
    bench_serving,
    run_meta,
    server_info,
    tool_requests,
    write_dataset,
    write_outputs,
)

#: (label, environment) of each variant, in the order they run; ``--variants`` names them by key
VARIANTS = (("request by request", {"SGLANG_PASK_BATCHED_COMPRESSION": "0", "SGLANG_PASK_OPS": "reference"}),
            ("batched, torch reference", {"SGLANG_PASK_BATCHED_COMPRESSION": "1", "SGLANG_PASK_OPS": "reference"}),
            ("batched, csrc", {"SGLANG_PASK_BATCHED_COMPRESSION": "1", "SGLANG_PASK_OPS": "csrc"}))
VARIANT_KEYS = dict(zip(("request", "reference", "csrc"), (v for v, _ in VARIANTS)))


def point_flags(point: str) -> list[str]:
    """``continuous:I`` (that schedule and interval) or ``policy`` (no flags: the policy's own
    operating point, what ``--pask-policy`` alone serves)."""
    if point == "policy":
        return []
    schedule, _, interval = point.partition(":")
    if schedule != "continuous" or not interval.isdigit() or int(interval) < 1:
        raise SystemExit(f"--point {point!r}: expected 'policy' or 'continuous:I' (I >= 1)")
    return ["--pask-schedule", "continuous", "--pask-interval", interval]


def one(model, policy, n, out_len, dataset, variant: str, work: Path, point: str = "continuous:1") -> dict:
    env = {**os.environ, **dict(VARIANTS)[variant]}
    batched = env["SGLANG_PASK_BATCHED_COMPRESSION"] == "1"
    tokens = n * (1200 + out_len) + 512
    flags = [*MATCHED, "--max-total-tokens", str(tokens), "--max-running-requests", str(n), "--pask-policy",
             policy, *point_flags(point)]
    label = f"{n} requests, {variant}"
    print(f"[{label}] starting", flush=True)
    t0 = time.monotonic()
    with running_server(model, flags, env=env) as srv:
        res = bench_serving(srv, model, dataset, n, n, work / f"out-{n}-{variant.replace(' ', '_')}.jsonl")
        pask = server_info(srv)["internal_states"][0].get("pask") or {}
        log = srv.log()
    from bench.server_capacity import DECODE_RE

    running = [int(x) for x in DECODE_RE.findall(log)]
    t = pask.get("compression_time") or {}
    row = {"requests": n, "variant": variant, "batched": batched, "kernels": pask.get("kernels"),
           "max_running_req": max(running, default=0),
           "decode_steps": t.get("decode_steps"), "step_s": t.get("step_s"), "compress_s": t.get("compress_s"),
           "share": t["compress_s"] / t["step_s"] if t.get("step_s") else None,
           "ms_per_step": 1e3 * t["step_s"] / t["decode_steps"] if t.get("decode_steps") else None,
           "compressions": (pask.get("compression") or {}).get("compressions"),
           "errors": (pask.get("compression") or {}).get("errors"), "wall_s": round(time.monotonic() - t0, 1), **res}
    print(f"[{label}] share {100 * (row['share'] or 0):.2f}% of {row['ms_per_step']:.1f} ms per decode step, "
          f"max running {row['max_running_req']}", flush=True)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--running", default="16,64", help="requests sent at once (and running at once)")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=1100)
    p.add_argument("--point", default="continuous:1",
                   help="continuous:I (default continuous:1, the worst case) or policy (the policy's own point)")
    p.add_argument("--variants", default=",".join(VARIANT_KEYS), help="a comma list of request, reference, csrc")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    point_flags(a.point)
    unknown = sorted(set(a.variants.split(",")) - set(VARIANT_KEYS))
    if unknown:
        p.error(f"--variants: unknown {', '.join(unknown)} (choices: {', '.join(VARIANT_KEYS)})")
    from transformers import AutoTokenizer

    t0 = time.time()
    rows = []
    tok = AutoTokenizer.from_pretrained(a.model)
    with tempfile.TemporaryDirectory(prefix="pask-share-") as d:
        work = Path(d)
        for n in [int(x) for x in a.running.split(",")]:
            ds = work / f"data-{n}.jsonl"
            write_dataset(ds, tool_requests(tok, n, a.prompt_tokens, 0), a.output_len)
            for key in a.variants.split(","):
                rows.append(one(a.model, a.policy, n, a.output_len, ds, VARIANT_KEYS[key], work, a.point))
    meta = run_meta(t0)
    lines = ["# Compression's share of the decode loop (written by experiments/compression_share.py)", "",
             f"Command: `{meta['command']}` ({meta['machine']}, {meta['code']}, {meta['date']}, "
             f"{meta['wall_s']:.0f} s). "
             f"`{a.model}`, `{a.policy}` " + (
                 "at the policy's own operating point (`--pask-policy` alone: what a user serves)"
                 if a.point == "policy" else f"under `continuous`, interval {a.point.partition(':')[2]}" + (
                     " (every request compressed at every decode step)" if a.point == "continuous:1" else "")) +
             f"; {a.output_len} output tokens per request, all sent at once.", "",
             "| requests | compression | kernels | max running | decode steps | ms per decode step | "
             "compression share | output tok/s | median TPOT ms |", "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['requests']} | {r['variant']} | {r['kernels']} | "
                     f"{r['max_running_req']} | {r['decode_steps']} | {r['ms_per_step']:.1f} | "
                     f"{100 * r['share']:.2f}% | {r['output_throughput']:.1f} | {r['median_tpot_ms']:.1f} |")
    write_outputs(a.out, {"rows": rows}, meta, "\n".join(lines) + "\n")
    print(f"wrote {a.out}/: report.md, results.json, meta.json")
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
