"""The compression operators, the Triton kernels and decode attention side by side in one run
(torch, numpy and triton only, so it runs on a bare CUDA image; ``bench/gpu_check.sh`` calls it).
Without a GPU it runs the CPU columns of part ``ops`` and says which parts it skipped.

Part ``ops``: ``top_n_mask`` (the selection step of batched compression) for ``R`` running
requests of ``T`` positions: the numpy reference, csrc's compiled CPU operator, the torch sort path
(``ops/top_n.py``) on CPU, and on a GPU csrc's CUDA kernel and the torch sort path on CUDA, each
checked equal to the reference on the same inputs (random scores with ties, 1/3 of positions
already dropped, a 64-position protected tail, n = 0.33 T). Median ms per call over ``--reps``
calls, CUDA timed with events after a synchronize; the CPU thread count is in the header.

Part ``triton`` (GPU only: the interpreter is no timing): FlashInfer's per-unit index streams for
a decode batch (``ops.triton_kernels.unit_indices`` with its one sync, and ``unit_indices_into``
into fixed buffers) against the torch build (``ops.reference.unit_indices``, what
``build_unit_indices`` computes), and the learned scorer's fused projection + store against its
torch reference (float64 on the device), each checked equal first.

Part ``attention`` (GPU only): one decode step's attention only (no MLP, no projections) of
Qwen3-4B's shape (36 layers, 32 query / 8 KV heads, head dim 128, bf16;
``F.scaled_dot_product_attention`` with GQA): Full KV at context T against the same batch keeping
ceil(0.33 T) positions, and against 3x the batch at 0.33 (equal KV memory). It bounds what
attention alone can give; the whole model's TPOT needs the serving bench.

Part ``flashinfer`` (GPU and flashinfer only): the same comparison through FlashInfer's decode
kernel over index streams (page size 1, the kept positions scattered as a compression leaves them),
each eagerly and replayed as a CUDA graph of the 36 layers' calls, after a check against SDPA over
the same kept positions. UNTESTED: no GPU with flashinfer has run it yet.

    OUT=/tmp/x python3 bench/gpu_ops_bench.py --out $OUT/ops   # writes report.md, results.json, meta.json
    OMP_NUM_THREADS=1 .venv/bin/python bench/gpu_ops_bench.py --parts ops --out bench/results/top-n-mask-cpu
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

SKIPPED_WITHOUT_GPU = "no CUDA GPU (torch.cuda.is_available() is False)"


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


def part_ops(running, contexts, reps: int, cuda: bool) -> list[dict]:
    import torch
    from sglang_pask import ops
    from sglang_pask.ops import reference
    from sglang_pask.ops.top_n import top_n_mask_torch

    lib = ops.compiled()
    rows = []
    for R in running:
        for T in contexts:
            held, scores, n, tail = inputs(R, T, R * 7919 + T)
            want = reference.top_n_mask(held, scores, n, tail)
            cpu_t = [torch.from_numpy(x) for x in (held, scores, n, tail)]
            paths = {"torch_sort_cpu": (lambda a=cpu_t: top_n_mask_torch(*a), cpu_ms)}
            if lib is not None:
                paths["csrc_cpu"] = (lambda a=cpu_t: lib.top_n_mask(*a), cpu_ms)
            if cuda:
                gpu_t = [x.cuda() for x in cpu_t]
                paths["torch_sort_cuda"] = (lambda a=gpu_t: top_n_mask_torch(*a), cuda_ms)
                has_cuda = torch._C._dispatch_has_kernel_for_dispatch_key("sglang_pask::top_n_mask", "CUDA")
                if lib is not None and has_cuda:
                    paths["csrc_cuda"] = (lambda a=gpu_t: lib.top_n_mask(*a), cuda_ms)
            row = {"running": R, "tokens": T,
                   "reference_ms": round(cpu_ms(lambda a=(held, scores, n, tail): reference.top_n_mask(*a), reps), 3)}
            for name, (fn, timer) in paths.items():
                row[f"equal_{name}"] = bool(np.array_equal(fn().cpu().numpy(), want))
                row[f"{name}_ms"] = round(timer(fn, reps), 3)
            rows.append(row)
            print("[ops]", json.dumps(row), flush=True)
    return rows


def part_triton(reps: int, device: str = "cuda", units: int = 18, bs: int = 64, T: int = 4096, n: int = 4096,
                d: int = 2560, h: int = 8) -> list[dict]:
    """The Triton kernels against their torch builds on the GPU. Defaults: a Qwen3-4B-like step (36
    layers in 2-layer units, 64 requests of 4,096 positions; a 4,096-token prefill chunk of hidden
    size 2,560 scored for 8 KV heads). ``device="cpu"`` under TRITON_INTERPRET=1: a smoke run."""
    import torch
    from sglang_pask.ops import reference, triton_kernels

    if not triton_kernels.available():
        return [{"kernel": "all", "skipped": "triton is not importable"}]
    timer = cuda_ms if device == "cuda" else cpu_ms
    rows = []
    g = torch.Generator().manual_seed(0)
    full = bs * T + 2
    req_to_token = (torch.randperm(full - 2, generator=g) + 1).view(bs, T).to(torch.int32)
    mapping = torch.zeros(units, full, dtype=torch.int64)
    for u in range(units):
        keep = torch.rand(full - 2, generator=g) < 0.33
        mapping[u, 1:-1] = torch.where(keep, torch.randperm(full - 2, generator=g) + 1, 0)
    rows_t, lens = torch.arange(bs), torch.full((bs,), T)
    args = [x.to(device) for x in (mapping, req_to_token, rows_t, lens)]
    want = reference.unit_indices(*args)
    got = triton_kernels.unit_indices(*args, seq_lens_sum=bs * T)
    equal = all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, want))
    ptr = torch.empty(units, bs + 1, dtype=torch.int32, device=device)
    idx = torch.empty(units, bs * T, dtype=torch.int32, device=device)
    rows.append({"kernel": "unit_indices", "shape": f"{units} units x {bs} requests x {T} positions", "equal": equal,
                 "torch_ms": round(timer(lambda: reference.unit_indices(*args), reps), 3),
                 "triton_ms": round(timer(lambda: triton_kernels.unit_indices(*args, seq_lens_sum=bs * T), reps), 3),
                 "triton_into_ms": round(timer(lambda: triton_kernels.unit_indices_into(*args, ptr, idx), reps), 3)})
    print("[triton]", json.dumps(rows[-1]), flush=True)
    x = torch.randn(n, d, generator=g).to(torch.bfloat16).to(device)
    w, b = (torch.randn(d, h, generator=g) * 0.02).to(device), torch.randn(h, generator=g).to(device)
    loc = torch.randperm(2 * n, generator=g)[:n].to(device)
    table = torch.zeros(2 * n, h, device=device)
    triton_kernels.learned_scores_into(x, w, b, table, loc)
    ulps = (table[loc].view(torch.int32).long() - reference.learned_scores(x, w, b).view(torch.int32).long())
    torch_store = lambda: table.index_put_((loc,), reference.learned_scores(x, w, b))  # noqa: E731
    rows.append({"kernel": "learned_scores", "shape": f"{n} tokens x {d} features -> {h} heads, bf16",
                 "equal": int(ulps.abs().max()) <= 1, "torch_ms": round(timer(torch_store, reps), 3),
                 "triton_ms": round(timer(lambda: triton_kernels.learned_scores_into(x, w, b, table, loc), reps), 3)})
    print("[triton]", json.dumps(rows[-1]), flush=True)
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


def part_flashinfer(contexts, batch: int, reps: int, budget: float) -> list[dict]:
    """FlashInfer's decode kernel (what the PASK FlashInfer backend runs, page size 1) at Qwen3-4B's
    shape over Full KV's index stream and over a kept one (``ceil(budget T)`` positions per request,
    scattered as a compression leaves them), same batch and 3x the batch; each eagerly and as a
    CUDA graph of the 36 layers' calls (fixed-buffer wrappers, the backend's graph mode). The
    kept configuration is first checked against SDPA over the same kept positions."""
    import torch
    import torch.nn.functional as F
    from flashinfer import BatchDecodeWithPagedKVCacheWrapper

    layers, hq, hkv, d = 36, 32, 8, 128  # Qwen3-4B
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)

    def setup(B: int, T: int, L: int, graph: bool):
        slots = B * T + 1  # slot 0: padding, as in the unit pools
        k = torch.randn(slots, 1, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(slots, 1, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
        pos = [torch.arange(T, device="cuda") if L == T else
               torch.randperm(T, device="cuda", generator=g)[:L].sort().values for _ in range(B)]
        indices = torch.cat([1 + b * T + p for b, p in enumerate(pos)]).to(torch.int32)
        indptr = (torch.arange(B + 1, device="cuda") * L).to(torch.int32)
        last = torch.ones(B, dtype=torch.int32, device="cuda")
        kw = dict(use_cuda_graph=True, paged_kv_indptr_buffer=indptr, paged_kv_indices_buffer=indices,
                  paged_kv_last_page_len_buffer=last) if graph else {}
        w = BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True, **kw)
        w.begin_forward(indptr, indices, last, hq, hkv, d, 1, q_data_type=torch.bfloat16,
                        kv_data_type=torch.bfloat16)
        q = torch.randn(B, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
        return w, q, (k, v), indices, pos

    def eager(B: int, T: int, L: int):
        w, q, kv, _, _ = setup(B, T, L, graph=False)
        return lambda: [w.forward(q, kv, sm_scale=d ** -0.5) for _ in range(layers)]

    def graphed(B: int, T: int, L: int):
        w, q, kv, _, _ = setup(B, T, L, graph=True)
        w.forward(q, kv, sm_scale=d ** -0.5)  # warm-up outside the capture
        torch.cuda.synchronize()
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            for _ in range(layers):
                w.forward(q, kv, sm_scale=d ** -0.5)
        return cg.replay

    rows = []
    for T in contexts:
        kept = math.ceil(budget * T)
        w, q, (k, v), indices, pos = setup(2, T, kept, graph=False)  # the check: SDPA over the kept positions
        got = w.forward(q, (k, v), sm_scale=d ** -0.5).float()
        worst = 0.0
        for b in range(2):
            ids = (1 + b * T + pos[b]).long()
            kb, vb = k[ids, 0].float().movedim(0, 1)[None], v[ids, 0].float().movedim(0, 1)[None]
            want = F.scaled_dot_product_attention(q[b].float()[None, :, None], kb, vb, enable_gqa=True,
                                                  scale=d ** -0.5)[0, :, 0]
            worst = max(worst, float((got[b] - want).abs().max()))
        row = {"tokens": T, "kept": kept, "batch": batch, "equal_sdpa": worst <= 2e-2, "max_abs_err": round(worst, 5)}
        for name, B, L in (("full", batch, T), ("pask_same_batch", batch, kept), ("pask_3x_batch", 3 * batch, kept)):
            row[f"{name}_ms"] = round(cuda_ms(eager(B, T, L), reps), 3)
            row[f"{name}_graph_ms"] = round(cuda_ms(graphed(B, T, L), reps), 3)
            torch.cuda.empty_cache()
        row["per_token_ratio_same_batch"] = round(row["pask_same_batch_ms"] / row["full_ms"], 3)
        row["per_token_ratio_3x_batch"] = round(row["pask_3x_batch_ms"] / (3 * row["full_ms"]), 3)
        rows.append(row)
        print("[flashinfer]", json.dumps(row), flush=True)
    return rows


def code_version() -> str:
    """The commit the run used (``+dirty`` with uncommitted changes), or why it is unknown."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git checkout)"
    return f"git {head}{'+dirty' if dirty else ''}"


OPS_COLUMNS = (("reference", "numpy reference"), ("csrc_cpu", "csrc CPU"), ("torch_sort_cpu", "torch sort, CPU"),
               ("csrc_cuda", "csrc CUDA"), ("torch_sort_cuda", "torch sort, CUDA"))


def report(res: dict, a) -> str:
    lines = [f"# Compression operators{', Triton kernels and decode attention' if res['cuda'] else ''} "
             f"({res['device']}, torch {res['torch']}{', CUDA ' + str(res['cuda']) if res['cuda'] else ''}, "
             f"{res['threads']} CPU thread(s))", ""]
    if "ops" in res:
        cols = [(k, label) for k, label in OPS_COLUMNS if f"{k}_ms" in res["ops"][0]]
        equal = all(v for r in res["ops"] for k, v in r.items() if k.startswith("equal_"))
        lines += [f"top_n_mask, median ms per call over {a.reps} calls (every path equal to the reference: {equal})",
                  "", "| running | tokens | " + " | ".join(label for _, label in cols) + " |",
                  "|---:|---:|" + "---:|" * len(cols)]
        lines += [f"| {r['running']} | {r['tokens']} | " + " | ".join(str(r[f"{k}_ms"]) for k, _ in cols) + " |"
                  for r in res["ops"]] + [""]
    if res.get("triton"):
        lines += ["Triton kernels vs their torch builds on the GPU, median ms per call (equal: checked first)", "",
                  "| kernel | shape | equal | torch | Triton | Triton, fixed buffers |", "|---|---|---|---:|---:|---:|"]
        lines += [f"| {r['kernel']} | {r.get('shape', '')} | {r.get('equal', r.get('skipped'))} "
                  f"| {r.get('torch_ms', '')} | {r.get('triton_ms', '')} | {r.get('triton_into_ms', '-')} |"
                  for r in res["triton"]] + [""]
    if "attention" in res:
        lines += [f"Decode attention only, Qwen3-4B shape, 36 layers, bf16, batch {a.batch}; ms per step "
                  f"(per token: the 3x batch's time / 3)", "",
                  "| context | kept | Full | PASK same batch | PASK 3x batch | per token, same batch "
                  "| per token, 3x batch |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['tokens']} | {r['kept']} | {r['full_ms']} | {r['pask_same_batch_ms']} "
                  f"| {r['pask_3x_batch_ms']} | {r['per_token_ratio_same_batch']} | {r['per_token_ratio_3x_batch']} |"
                  for r in res["attention"]] + [""]
    if res.get("flashinfer"):
        lines += [f"FlashInfer decode (page size 1), Qwen3-4B shape, 36 layers, bf16, batch {a.batch}; ms per step, "
                  "eager / CUDA graph of the 36 calls (kept positions scattered; checked against SDPA first)", "",
                  "| context | kept | equal SDPA (max abs err) | Full | PASK same batch | PASK 3x batch "
                  "| per token, same batch | per token, 3x batch |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['tokens']} | {r['kept']} | {r['equal_sdpa']} ({r['max_abs_err']}) "
                  f"| {r['full_ms']} / {r['full_graph_ms']} "
                  f"| {r['pask_same_batch_ms']} / {r['pask_same_batch_graph_ms']} "
                  f"| {r['pask_3x_batch_ms']} / {r['pask_3x_batch_graph_ms']} | {r['per_token_ratio_same_batch']} "
                  f"| {r['per_token_ratio_3x_batch']} |" for r in res["flashinfer"]] + [""]
    if res["skipped"]:
        lines += ["Skipped: " + "; ".join(f"part {k}: {v}" for k, v in res["skipped"].items()), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="ops,triton,attention,flashinfer")
    p.add_argument("--running", default="16,64")
    p.add_argument("--contexts", default="2048,4096")
    p.add_argument("--batch", type=int, default=16, help="attention part: Full KV's batch")
    p.add_argument("--budget", type=float, default=0.33)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args(argv)
    import torch

    t0, load0 = time.time(), os.getloadavg()
    cuda = torch.cuda.is_available()
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    parts = a.parts.split(",")
    from sglang_pask import ops

    res = {"device": torch.cuda.get_device_name(0) if cuda else f"CPU only, {platform.machine()}",
           "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
           "threads": torch.get_num_threads(), "kernels": ops.implementation(), "skipped": {}}
    if "ops" in parts:
        res["ops"] = part_ops(ints(a.running), ints(a.contexts), a.reps, cuda)
    import importlib.util

    for part, run in (("triton", lambda: part_triton(a.reps)),
                      ("attention", lambda: part_attention(ints(a.contexts), a.batch, a.reps, a.budget)),
                      ("flashinfer", lambda: part_flashinfer(ints(a.contexts), a.batch, a.reps, a.budget))):
        why = (SKIPPED_WITHOUT_GPU if not cuda else
               "flashinfer is not importable" if part == "flashinfer" and importlib.util.find_spec("flashinfer") is None
               else None)
        if part in parts and why is None:
            res[part] = run()
        elif part in parts:
            res["skipped"][part] = why
            print(f"gpu_ops_bench: part {part} skipped: {why}", file=sys.stderr)
    text = report(res, a)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = " ".join(f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS",) if k in os.environ)
    meta = {"command": " ".join([*([env] if env else []), "python", *sys.argv]), "code": code_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus{', ' + res['device'] if cuda else ''}",
            "threads": res["threads"], "loadavg_before": [round(x, 2) for x in load0],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()], "wall_s": round(time.time() - t0, 1)}
    (out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out / "report.md").write_text(text)
    print(text)
    checks = [v for r in res.get("ops", []) for k, v in r.items() if k.startswith("equal_")]
    checks += [r["equal"] for r in res.get("triton", []) if "equal" in r]
    checks += [r["equal_sdpa"] for r in res.get("flashinfer", [])]
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
