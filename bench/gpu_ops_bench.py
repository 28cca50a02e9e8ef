"""The compression operators and decode attention on a GPU, side by side in one run (torch and
numpy only, so it runs on a bare CUDA image; ``bench/gpu_check.sh`` calls it).

Part ``ops``: csrc's ``top_n_mask`` (the selection step of batched compression) for ``R`` running
requests of ``T`` positions: the compiled CUDA kernel, the compiled CPU one and the numpy
reference, each checked equal to the reference on the same inputs (random scores with ties, 1/3
of positions already dropped, a 64-position protected tail, n = 0.33 T). Median ms per call over
``--reps`` calls, CUDA timed with events after a synchronize.

Part ``attention``: one decode step's attention only (no MLP, no projections) of Qwen3-4B's shape
(36 layers, 32 query / 8 KV heads, head dim 128, bf16; ``F.scaled_dot_product_attention`` with
GQA): Full KV at context T against the same batch keeping ceil(0.33 T) positions, and against 3x
the batch at 0.33 (equal KV memory). It bounds what attention alone can give; the whole model's
TPOT needs the serving bench.

    OUT=/tmp/x python3 bench/gpu_ops_bench.py --out $OUT/ops   # writes report.md, results.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np


def inputs(R: int, T: int, seed: int):
    """held bool [R, T], scores float64 [R, T], n int64 [R], tail_start int64 [R]."""
    rng = np.random.default_rng(seed)
    held = rng.random((R, T)) >= 1 / 3
    scores = rng.integers(0, 64, (R, T)).astype(np.float64) + rng.random((R, T)).round(1)
    n = np.full(R, math.floor(0.33 * T), dtype=np.int64)
    tail = np.full(R, T - 64, dtype=np.int64)
    return held, scores, n, tail


def cuda_ms(fn, reps: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def cpu_ms(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t))
    return float(np.median(times))


def part_ops(running, contexts, reps: int) -> list[dict]:
    import torch
    from sglang_pask import ops
    from sglang_pask.ops import reference

    lib = ops.compiled()
    if lib is None:
        raise SystemExit(f"gpu_ops_bench: no compiled operators: {ops.implementation()}")
    rows = []
    for R in running:
        for T in contexts:
            held, scores, n, tail = inputs(R, T, R * 7919 + T)
            want = reference.top_n_mask(held, scores, n, tail)
            cpu_t = [torch.from_numpy(x) for x in (held, scores, n, tail)]
            gpu_t = [x.cuda() for x in cpu_t]
            got_cpu = lib.top_n_mask(*cpu_t).numpy()
            got_gpu = lib.top_n_mask(*gpu_t).cpu().numpy()
            row = {"running": R, "tokens": T, "equal_cpu": bool(np.array_equal(got_cpu, want)),
                   "equal_cuda": bool(np.array_equal(got_gpu, want)),
                   "reference_ms": round(cpu_ms(lambda a=(held, scores, n, tail): reference.top_n_mask(*a), reps), 3),
                   "csrc_cpu_ms": round(cpu_ms(lambda a=cpu_t: lib.top_n_mask(*a), reps), 3),
                   "csrc_cuda_ms": round(cuda_ms(lambda a=gpu_t: lib.top_n_mask(*a), reps), 3)}
            rows.append(row)
            print("[ops]", json.dumps(row), flush=True)
    return rows


def part_attention(contexts, batch: int, reps: int, budget: float) -> list[dict]:
    import torch
    import torch.nn.functional as F

    layers, hq, hkv, d = 36, 32, 8, 128  # Qwen3-4B
    rows = []
    for T in contexts:
        kept = math.ceil(budget * T)

        def step(B: int, L: int):
            q = torch.randn(B, hq, 1, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(B, hkv, L, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)

            def run():
                for _ in range(layers):  # the same tensors per layer: the cost, not the values
                    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            return run

        full = cuda_ms(step(batch, T), reps)
        same_batch = cuda_ms(step(batch, kept), reps)
        equal_mem = cuda_ms(step(3 * batch, kept), reps)
        row = {"tokens": T, "kept": kept, "batch": batch, "full_ms": round(full, 3),
               "pask_same_batch_ms": round(same_batch, 3), "pask_3x_batch_ms": round(equal_mem, 3),
               "per_token_ratio_same_batch": round(same_batch / full, 3),
               "per_token_ratio_3x_batch": round(equal_mem / (3 * full), 3)}
        rows.append(row)
        print("[attention]", json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="ops,attention")
    p.add_argument("--running", default="16,64")
    p.add_argument("--contexts", default="2048,4096")
    p.add_argument("--batch", type=int, default=16, help="attention part: Full KV's batch")
    p.add_argument("--budget", type=float, default=0.33)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_ops_bench: torch.cuda.is_available() is False: this bench needs a CUDA GPU", file=sys.stderr)
        return 3
    t0 = time.time()
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    parts = a.parts.split(",")
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    if "ops" in parts:
        res["ops"] = part_ops(ints(a.running), ints(a.contexts), a.reps)
    if "attention" in parts:
        res["attention"] = part_attention(ints(a.contexts), a.batch, a.reps, a.budget)
    lines = [f"# GPU operators and decode attention ({res['device']}, torch {res['torch']}, "
             f"CUDA {res['cuda']})", ""]
    if "ops" in res:
        lines += ["top_n_mask, median ms per call (all three equal to the reference: "
                  f"{all(r['equal_cpu'] and r['equal_cuda'] for r in res['ops'])})", "",
                  "| running | tokens | numpy reference | csrc CPU | csrc CUDA |", "|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['running']} | {r['tokens']} | {r['reference_ms']} | {r['csrc_cpu_ms']} "
                  f"| {r['csrc_cuda_ms']} |" for r in res["ops"]] + [""]
    if "attention" in res:
        lines += [f"Decode attention only, Qwen3-4B shape, 36 layers, bf16, batch {a.batch}; ms per step "
                  f"(per token: the 3x batch's time / 3)", "",
                  "| context | kept | Full | PASK same batch | PASK 3x batch | per token, same batch "
                  "| per token, 3x batch |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['tokens']} | {r['kept']} | {r['full_ms']} | {r['pask_same_batch_ms']} "
                  f"| {r['pask_3x_batch_ms']} | {r['per_token_ratio_same_batch']} | {r['per_token_ratio_3x_batch']} |"
                  for r in res["attention"]]
    text = "\n".join(lines) + "\n"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"command": " ".join(["python3", *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": platform.machine(), "wall_s": round(time.time() - t0, 1)}
    (out / "results.json").write_text(json.dumps({**res, "meta": meta}, indent=1))
    (out / "report.md").write_text(text)
    print(text)
    return 0 if all(r["equal_cpu"] and r["equal_cuda"] for r in res.get("ops", [])) else 1


if __name__ == "__main__":
    sys.exit(main())
