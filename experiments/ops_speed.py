"""Batched selection's time per decode step, the torch reference operators vs csrc's compiled ones,
side by side in one run (written by this script: report.md, results.json, meta.json into ``--out``).

The workload is what the server's batched compression hands PASK at every decode step under the
``continuous`` schedule, interval 1: ``R`` running requests of ``--tokens`` positions (random
structural classes; 1/3 already dropped per unit, as after earlier steps), the shipped tiny
policy at its budget, ``select_padded`` timed over ``--reps`` repetitions per variant, variants
interleaved so drift hits both. Both variants keep exactly the same sets (checked every run).

    .venv/bin/python -m experiments.ops_speed --out experiments/results/ops-speed
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from sglang_pask.policy.shipped import shipped_policy

from bench.server_capacity import run_meta, write_outputs


def batch_for(policy, R: int, T: int, seed: int):
    from sglang_pask.methods.padded import PaddedBatch
    from sglang_pask.structure.classes import StructClass

    rng = np.random.default_rng(seed)
    L = policy.model.num_layers
    classes = rng.integers(0, len(StructClass), size=(R, T))
    held = np.ones((L, R, T), dtype=bool)
    for g in policy.groups:
        drop = rng.random((R, T)) < 1 / 3
        drop[:, -1] = False
        held[list(g)] &= ~drop[None]
    return PaddedBatch(L, policy.groups, np.full(R, T), classes, held, np.full(R, T - 64), protected_tail=1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--running", default="16,64")
    p.add_argument("--tokens", type=int, default=1200)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from sglang_pask import ops
    from sglang_pask.environ import envs
    from sglang_pask.methods import make_method
    from sglang_pask.policy.document import load_policy

    if ops.compiled() is None:
        print(f"ops_speed: nothing to compare: {ops.implementation()}", file=sys.stderr)
        return 2
    t0 = time.time()
    policy = load_policy(a.policy)
    method = make_method("pask", policy.budget, policy=policy)
    rows = []
    for R in [int(x) for x in a.running.split(",")]:
        batch = batch_for(policy, R, a.tokens, R)
        times = {"reference": [], "csrc": []}
        kept = {}
        for _ in range(a.reps):
            for variant in times:
                envs.SGLANG_PASK_OPS.set(variant)
                ops._load.cache_clear()
                t = time.perf_counter()
                kept[variant] = method.select_padded(batch)
                times[variant].append(time.perf_counter() - t)
        if not np.array_equal(kept["reference"], kept["csrc"]):
            print(f"ops_speed: the two variants kept different sets at R={R}", file=sys.stderr)
            return 1
        med = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
        rows.append({"running": R, "tokens": a.tokens, "reference_ms": round(med["reference"], 3),
                     "csrc_ms": round(med["csrc"], 3), "speedup": round(med["reference"] / med["csrc"], 2)})
        print(f"R={R}: reference {med['reference']:.2f} ms, csrc {med['csrc']:.2f} ms "
              f"({rows[-1]['speedup']:.2f}x)", flush=True)
    envs.SGLANG_PASK_OPS.set(None)
    ops._load.cache_clear()
    meta = run_meta(t0)
    lines = ["# PASK's batched selection per decode step: torch reference vs csrc "
             "(written by experiments/ops_speed.py)", "",
             f"Command: `{meta['command']}` ({meta['machine']}, {meta['code']}, {meta['date']}). `{a.policy}` at "
             f"budget {policy.budget:g}; {a.tokens} positions per request; median of {a.reps} interleaved runs; "
             f"kernels: {ops.implementation()}. Same kept sets in both variants (checked).", "",
             "| running requests | reference ms | csrc ms | speed-up |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['running']} | {r['reference_ms']:.2f} | {r['csrc_ms']:.2f} | {r['speedup']:.2f}x |" for r in rows]
    write_outputs(a.out, {"rows": rows}, meta, "\n".join(lines) + "\n")
    print(f"wrote {a.out}/: report.md, results.json, meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
