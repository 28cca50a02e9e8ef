"""Many tools blocks (many agents, many tenants) that do not all fit in KV memory: Full KV's radix
cache (LRU) against PASK's accurate radix mode with tiers (a hot block whole, a cold block demoted
to its compressed form before LRU evicts it), at the same KV bytes, side by side in one run (issue 25).

For each K of ``--blocks``: K distinct tools blocks (the union of the tools of consecutive
train-split tiny entries until the system message is at least ``--segment-tokens`` tokens; the
blocks are built once, the first K used), ``--requests`` chat requests whose block is drawn with
Zipf-like popularity (``p(k) ~ 1 / (k + 1) ** --zipf``), each asking one of that block's entries'
queries (numbered, so no two prompts are equal), sent through SGLang's ``bench_serving``
(``sglang-oai-chat``) ``--concurrency`` at a time, ``--output-len`` tokens each (``ignore_eos``).

* Full: stock SGLang, radix cache on, ``--max-total-tokens --full-tokens``.
* PASK: ``--policy`` (the segment policy) with ``--pask-segment system --pask-own-budget 1
  --pask-segment-prefill full`` (the accurate mode: kept positions and tokens equal the reference
  runner's), the radix cache on, at the same KV bytes (``server_capacity.pask_tokens_for``).

Per K and server: requests/s, output tok/s, median TTFT and TPOT, the radix hit rate (cached /
(cached + computed) prompt tokens, from SGLang's prefill log lines) and, for PASK, the tree's
demotions and tiers at the end. Ratios PASK / Full per K; ``plot.png``: requests/s and hit rate
against K. ``--rounds`` R (default 3): each round starts every server once per K, in the same order;
a row is the median of its rounds, a ratio the median of the rounds' ratios.

``--requests`` defaults to 384: at 128 a run lasts ~6 s and the blocks' first touches (misses
every cache pays alike) are a fifth of the prompt tokens, so the rounds' ratios spread 1.13-1.63
(stop 39's run) and say more about start-up than about a cache in its steady state; at 384 they
are 7%.

``--server-threads N`` runs each server with ``OMP_NUM_THREADS=N`` (default: unset, torch's own
choice, what a user gets). On this 2-core machine the client and the server's HTTP processes share
the cores with the scheduler, and a scheduler running two intra-op threads is preempted inside its
parallel regions: stock Full KV's decode (one SDPA call per request and layer) then runs in one of
two speeds by run (TPOT ~17 or ~27 ms). With one thread both servers are faster and steady.

The ceiling: however many blocks a cache keeps, it can at most turn Full KV's requests/s at K into
Full KV's at the smallest K (where nearly every block hits); the report prints that ratio per K next
to PASK's, so a PASK / Full ratio is read against what hits alone could buy on this model.

    .venv/bin/python bench/server_many_blocks.py --out bench/results/pask-tiny-fc-server-many-blocks

Writes ``report.md``, ``results.json``, ``meta.json`` and ``plot.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from server_capacity import (
    median_run,
    paired_ratios,
    pask_tokens_for,
    run_meta,
    serve_and_bench,
    write_outputs,
)
from server_shared_prefix import MATCHED, block_request, build_blocks, write_dataset

RATIOS = ("request_throughput", "output_throughput", "median_ttft_ms", "median_tpot_ms")


def balanced(run: dict) -> bool | None:
    """After the bench (every request finished): every full id and unit slot is free or held by the
    tree -- no slot leaked (None: not a PASK server)."""
    pools, tree = run.get("pools"), run.get("tree")
    if not pools or not tree:
        return None
    return (pools["full_available"] + tree["tokens"] == pools["full_size"]
            and all(a + t == n for a, t, n in zip(pools["unit_available"], tree["unit_slots"], pools["unit_sizes"]))
            and tree["protected_tokens"] == 0)


#: Full KV thrashes at K when its hit rate is this far (fraction) under a never-evicting cache's
THRASH_DROP = 0.10


def never_evicting_hit_rate(row: dict) -> float:
    """The radix hit rate of a cache that never evicts: every block asked is computed once (its
    first touch), every request's own tokens always; the rest of the prompt tokens hit."""
    data = row["dataset"]
    total = data["prompt_tokens_total"]
    computed = row["block_tokens_total"] + data["own_prompt_tokens_mean"] * data["requests"]
    return round(1 - computed / total, 4)


def thrash_line(rows: list[dict]) -> str:
    """The goal of issue 25, read off the rows: PASK's requests/s over Full's where Full's LRU thrashes."""
    cap = {r["blocks"]: never_evicting_hit_rate(r) for r in rows}
    hit = [r for r in rows if (r["full"]["cache_hit_rate"] or 0) <= cap[r["blocks"]] - THRASH_DROP]
    head = ("A cache that never evicts would hit " + ", ".join(f"{100 * v:.1f}% at K = {k}" for k, v in cap.items())
            + " of the prompt tokens. ")
    if not hit:
        return head + f"Full KV stays within {100 * THRASH_DROP:.0f} points of it at every K: it never thrashes here."
    return (head + f"Where Full KV thrashes (at least {100 * THRASH_DROP:.0f} points under it): " + ", ".join(
        f"K = {r['blocks']}: Full {100 * (r['full']['cache_hit_rate'] or 0):.1f}%, PASK "
        f"{100 * (r['pask']['cache_hit_rate'] or 0):.1f}%, requests/s {r['ratio']['request_throughput']}x"
        for r in hit) + " (PASK over Full KV; the goal: at least 1.5x).")


def zipf_requests(tokenizer, blocks, n: int, s: float, seed: int) -> list[dict]:
    """``n`` requests over ``blocks`` with Zipf-like popularity (see the module docstring)."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) ** s for k in range(len(blocks))]
    out = []
    for i in range(n):
        b = rng.choices(range(len(blocks)), weights)[0]
        out.append({**block_request(tokenizer, blocks[b], i, str(i)), "block": b})
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [r["blocks"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    for name, label in (("full", "Full KV (LRU)"), ("pask", "PASK accurate mode (tiers)")):
        a.plot(ks, [r[name]["request_throughput"] for r in rows], marker="o", label=label)
        b.plot(ks, [100 * (r[name]["cache_hit_rate"] or 0) for r in rows], marker="o", label=label)
    a.set(xlabel="distinct tools blocks K", ylabel="requests/s", xticks=ks)
    b.set(xlabel="distinct tools blocks K", ylabel="radix hit rate (% of prompt tokens)", xticks=ks)
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default="experiments/policies/pask-tiny-fc.segment.b0.33.json")
    p.add_argument("--budget", type=float, default=0.33)
    p.add_argument("--full-tokens", type=int, default=6144, help="Full KV tokens (about 12 blocks of ~500)")
    p.add_argument("--blocks", default="4,8,16,32")
    p.add_argument("--requests", type=int, default=384, help="requests per K and server (default 384: module)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--segment-tokens", type=int, default=400)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds, each starting every server once per K in the same order (default 3): rows are "
                        "medians, ratios medians of the rounds' ratios")
    p.add_argument("--server-threads", type=int, default=None,
                   help="OMP_NUM_THREADS for both servers (default: unset; module docstring)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from transformers import AutoTokenizer

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(a.model)
    ks = [int(x) for x in a.blocks.split(",")]
    blocks = build_blocks(tok, max(ks), a.segment_tokens, pool=8000)
    n_pask = pask_tokens_for(a.full_tokens, a.budget)
    accurate = ["--pask-segment", "system", "--pask-own-budget", "1", "--pask-segment-prefill", "full"]
    servers = {"full": [*MATCHED, "--max-total-tokens", str(a.full_tokens)],
               "pask": [*MATCHED, "--max-total-tokens", str(n_pask), "--pask-policy", a.policy,
                        "--pask-budget", str(a.budget), *accurate]}
    env = None if a.server_threads is None else {**os.environ, "OMP_NUM_THREADS": str(a.server_threads)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="pask-blocks-") as d:
        work = Path(d)
        for k in ks:
            reqs = zipf_requests(tok, blocks[:k], a.requests, a.zipf, a.seed)
            data = write_dataset(work / f"data-{k}.jsonl", reqs, a.output_len)
            block_tokens = sorted({r["segment_tokens"] for r in reqs})
            print(f"[many-blocks] K={k}: {json.dumps(data)[:300]}", flush=True)
            row = {"blocks": k, "dataset": data, "block_tokens_total": sum(
                next(r["segment_tokens"] for r in reqs if r["block"] == b) for b in {r["block"] for r in reqs}),
                "blocks_asked": len({r["block"] for r in reqs}), "block_tokens": block_tokens}
            runs = {name: [] for name in servers}
            for r in range(a.rounds):
                for name, flags in servers.items():
                    runs[name].append(serve_and_bench(f"{name}-K{k}-r{r}", a.model, flags, work / f"data-{k}.jsonl",
                                                      a.requests, a.concurrency, work, env=env))
            row["pask_balanced"] = [balanced(x) for x in runs["pask"]]
            for name in servers:
                row[name] = median_run(runs[name])
                row[name]["runs"] = [{key: x.get(key) for key in ("request_throughput", "cache_hit_rate",
                                                                   "median_ttft_ms", "median_tpot_ms")}
                                     for x in runs[name]]
            row["ratio"] = paired_ratios(runs["pask"], runs["full"], RATIOS, "request_throughput")
            rows.append(row)
    for r in rows:  # what hits alone could buy: Full at the smallest K over Full at this K
        r["ceiling"] = round(rows[0]["full"]["request_throughput"] / r["full"]["request_throughput"], 3)
    meta = run_meta(t0)
    pools = rows[0]["pask"]["pools"]
    layers = sum(len(u) for u in pools["units"])
    kv = {"full": a.full_tokens * layers * pools["bytes_per_token_layer"], "pask": pools["kv_bytes_capacity"]}
    lines = [f"# Many tools blocks: Full KV (LRU) vs PASK's accurate radix mode (tiers) ({meta['date']})", "",
             f"`{meta['command']}` (code {meta['code']}, {meta['machine']}, {meta['wall_s']} s)", "",
             f"{a.requests} requests per K, block drawn with Zipf-like popularity (s = {a.zipf:g}), "
             f"{a.concurrency} at a time, {a.output_len} output tokens each (ignore_eos), servers' OMP_NUM_THREADS "
             f"{a.server_threads if a.server_threads is not None else 'unset'}. Same KV bytes: Full "
             f"{kv['full']} B ({a.full_tokens} tokens), PASK {kv['pask']} B ({n_pask} full ids, {pools['unit_sizes']} "
             f"slots per unit). PASK: `{a.policy}` at b = {a.budget:g}, `{' '.join(accurate)}`. Hit rate: cached / "
             "(cached + computed) prompt tokens (SGLang's prefill log).", "",
             "| K | blocks asked (tokens) | Full req/s | PASK req/s | ratio (rounds) | ceiling from hits | "
             "Full hit rate | PASK hit rate | "
             "median TTFT ms Full / PASK | median TPOT ms Full / PASK | PASK demotions | PASK tiers at the end |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|"]
    first = {r["blocks"]: r["blocks_asked"] for r in rows}
    for r in rows:
        f, q = r["full"], r["pask"]
        tiers = (q.get("tree") or {}).get("tiers") or {}
        lines.append(
            f"| {r['blocks']} | {r['blocks_asked']} ({r['block_tokens_total']}) | {f['request_throughput']:.2f} | "
            f"{q['request_throughput']:.2f} | {r['ratio']['request_throughput']}x ("
            + ", ".join(f"{x:.2f}" for x in r["ratio"]["per_round_request_throughput"]) + f") | {r['ceiling']}x | "
            f"{100 * (f['cache_hit_rate'] or 0):.1f}% | {100 * (q['cache_hit_rate'] or 0):.1f}% | "
            f"{f['median_ttft_ms']:.0f} / {q['median_ttft_ms']:.0f} | "
            f"{f['median_tpot_ms']:.1f} / {q['median_tpot_ms']:.1f} | "
            f"{(q.get('tree') or {}).get('demoted', 0)} | "
            + ", ".join(f"{t} {v['blocks']} ({v['kv_bytes']} B)" for t, v in tiers.items()) + " |")
    lines += ["", f"{a.rounds} round(s) per K, each starting both servers once, Full first; a row is the median "
              "of its rounds, a ratio the median of the rounds' ratios (a run on this shared 2-core machine varies "
              "by up to 40%). Demotions and tiers: the last round's. Ceiling from hits: Full KV's requests/s at "
              f"K = {rows[0]['blocks']} over its requests/s at K, the most any cache could gain by hits alone.",
              "", "First touches (a miss in any cache): " + ", ".join(
                  f"K = {k}: {n} of {a.requests} requests" for k, n in first.items()) + ".",
              "", thrash_line(rows), "",
              "PASK's pools after each run (every full id and unit slot free or in the tree, nothing protected): "
              + ("balanced in every run" if all(all(r["pask_balanced"]) for r in rows) else
                 "NOT balanced: " + json.dumps({r["blocks"]: r["pask_balanced"] for r in rows})) + ".", ""]
    out = write_outputs(a.out, {"rows": rows, "kv_bytes": kv, "pask_max_total_tokens": n_pask, "zipf": a.zipf,
                                "requests": a.requests, "concurrency": a.concurrency, "rounds": a.rounds,
                                "server_threads": a.server_threads}, meta,
                        "\n".join(lines))
    plot(rows, out / "plot.png")
    print(f"wrote {a.out}/: report.md, results.json, meta.json, plot.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
