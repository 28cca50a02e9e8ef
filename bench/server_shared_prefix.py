"""Shared-prefix tool serving at a fixed KV memory: Full KV vs PASK@b, both with the radix cache on,
side by side in one run (issue 13).

Agents send the same tools block with every request: here ``--blocks`` tools blocks (the union
of the tools of consecutive train-split tiny entries, until the system message is at least
``--segment-tokens`` tokens), each asked ``--per-block`` times with the queries of its entries
(numbered, so no two prompts are equal), in a shuffled order. Load is SGLang's own
``sglang.benchmark.serving`` (backend ``sglang-oai-chat``, dataset ``openai``: the chat requests
with their tools, through ``/v1/chat/completions``; fixed output lengths, ``ignore_eos``), all
requests at once.

* Full: stock SGLang (no policy; this project's launcher, the same binary), radix cache on: it
  shares each tools block across its requests; ``--max-total-tokens M``.
* PASK@b: ``--pask-policy P --pask-segment system``, radix cache on: the tree caches each block
  once, compressed to b (the shared segment), each request compresses its own tokens; the
  largest ``--max-total-tokens N`` whose per-unit pools hold ``ceil(b N) == M`` slots: the same
  KV bytes (checked against ``/server_info``).

Both run without the overlap scheduler (a policy turns it off). Measured: bench_serving's
completed requests/s and output throughput, the most requests in one decode batch, and, read
from the pools after the run, what the tree holds (tokens, unit slots, KV bytes). PASK runs the
continuous schedule at each of ``--intervals`` (decode steps between budget checks). ``--repeat``
rounds (default 3) start every server once each, in the same order; rows are medians and ratios
medians of the rounds' ratios (one run on a shared 2-core machine varies by up to 40%).

    .venv/bin/python bench/server_shared_prefix.py --out bench/results/pask-tiny-fc-server-shared-prefix
    .venv/bin/python bench/server_shared_prefix.py --own-budget 1 \
        --policy experiments/policies/pask-tiny-fc.segment.b0.33.json \
        --out bench/results/pask-tiny-fc-server-shared-prefix-own-kept
    .venv/bin/python bench/server_shared_prefix.py --own-budget 1 --segment-prefill full \
        --policy experiments/policies/pask-tiny-fc.segment.b0.33.json \
        --out bench/results/pask-tiny-fc-server-shared-prefix-full-prefill

Writes ``report.md``, ``results.json`` and ``meta.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
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
from sglang_pask.policy.shipped import shipped_policy

MATCHED = ["--disable-overlap-schedule", "--decode-log-interval", "1", "--sleep-on-idle", "--log-level", "info"]


def build_blocks(tokenizer, k: int, segment_tokens: int, pool: int = 4000) -> list[tuple[list, list]]:
    """``k`` tools blocks, each (tools, bodies): the union of the tools of consecutive single-call
    train-split tiny entries (from the first ``pool``) until its system message is at least
    ``segment_tokens`` tokens, and the request bodies of those entries."""
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.rendering import render_chat
    from sglang_pask.tiny.examples import request_body

    entries = iter(e for e in generate("train", pool, profile="tiny") if len(e.ground_truth) == 1)
    blocks = []
    for _ in range(k):
        tools, names, used = [], set(), []
        while True:
            body = request_body(next(entries))[0]
            new = [t for t in body["tools"] if t["function"]["name"] not in names]
            tools += new
            names |= {t["function"]["name"] for t in new}
            used.append(body)
            r = render_chat(tokenizer, {"messages": body["messages"], "tools": tools, "tool_choice": "auto"})
            if r.segment_end >= segment_tokens:
                break
        blocks.append((tools, used))
    return blocks


def block_request(tokenizer, block: tuple[list, list], i: int, label: str) -> dict:
    """Request ``i`` on ``block``: the query of one of its entries, numbered ``label`` (so no two
    prompts are equal), with its rendered length and segment end."""
    from sglang_pask.rendering import render_chat

    tools, used = block
    messages = [dict(m) for m in used[i % len(used)]["messages"]]
    messages[-1]["content"] = f"{messages[-1]['content']} (request {label})"
    req = {"messages": messages, "tools": tools, "tool_choice": "auto"}
    r = render_chat(tokenizer, req)
    return {**req, "prompt_tokens": len(r.token_ids), "segment_tokens": r.segment_end}


def shared_requests(tokenizer, blocks: int, per_block: int, segment_tokens: int, seed: int) -> list[dict]:
    """``blocks x per_block`` chat requests (see the module docstring), shuffled."""
    out = [block_request(tokenizer, block, i, f"{b}.{i}")
           for b, block in enumerate(build_blocks(tokenizer, blocks, segment_tokens)) for i in range(per_block)]
    random.Random(seed).shuffle(out)
    return out


def write_dataset(path: Path, reqs: list[dict], out_len: int) -> dict:
    with open(path, "w") as f:
        for r in reqs:
            row = {k: r[k] for k in ("messages", "tools", "tool_choice")} | {"max_tokens": out_len}
            f.write(json.dumps(row) + "\n")
    seg = sorted({r["segment_tokens"] for r in reqs})
    return {"requests": len(reqs), "output_tokens": out_len, "segment_tokens": seg,
            "prompt_tokens_total": sum(r["prompt_tokens"] for r in reqs),
            "own_prompt_tokens_mean": round(sum(r["prompt_tokens"] - r["segment_tokens"] for r in reqs) / len(reqs), 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--budget", type=float, default=0.33)
    p.add_argument("--full-tokens", type=int, default=4096, help="Full KV tokens (M)")
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--per-block", type=int, default=16)
    p.add_argument("--segment-tokens", type=int, default=400)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--segment-budget", type=float, default=None, help="the shared segment's budget")
    p.add_argument("--own-budget", type=float, default=None,
                   help="each request's own tokens' budget (--pask-own-budget; 1: only the segment is compressed)")
    p.add_argument("--segment-prefill", choices=("compressed", "full"), default=None,
                   help="--pask-segment-prefill (full: each request recomputes the tools block)")
    p.add_argument("--intervals", default="1,16", help="PASK compression intervals (continuous schedule)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3,
                   help="rounds, each starting every server once in the same order (default 3): rows are "
                        "medians, ratios medians of the rounds' ratios")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from transformers import AutoTokenizer

    t0 = time.time()
    reqs = shared_requests(AutoTokenizer.from_pretrained(a.model), a.blocks, a.per_block, a.segment_tokens, a.seed)
    n = len(reqs)
    with tempfile.TemporaryDirectory(prefix="pask-shared-") as d:
        work = Path(d)
        data = write_dataset(work / "data.jsonl", reqs, a.output_len)
        print(f"[shared-prefix] {json.dumps(data)}", flush=True)
        n_pask = pask_tokens_for(a.full_tokens, a.budget)
        seg = ["--pask-segment", "system"] + ([] if a.segment_budget is None else
                                              ["--pask-segment-budget", str(a.segment_budget)])
        seg += [] if a.own_budget is None else ["--pask-own-budget", str(a.own_budget)]
        seg += [] if a.segment_prefill is None else ["--pask-segment-prefill", a.segment_prefill]
        servers = [("full", [*MATCHED, "--max-total-tokens", str(a.full_tokens)])]
        for interval in [int(x) for x in a.intervals.split(",")]:
            servers.append((interval, [*MATCHED, "--max-total-tokens", str(n_pask), "--pask-policy", a.policy,
                                       "--pask-budget", str(a.budget), "--pask-schedule", "continuous",
                                       "--pask-interval", str(interval), *seg]))
        rounds = {key: [] for key, _ in servers}
        for r in range(a.repeat):  # every server once per round, in the same order (server_capacity.pair)
            for key, flags in servers:
                name = ("full" if key == "full" else f"pask-i{key}") + (f"-r{r + 1}" if a.repeat > 1 else "")
                rounds[key].append(serve_and_bench(name, a.model, flags, work / "data.jsonl", n, n, work))
    full = median_run(rounds["full"])
    runs = {key: median_run(rs) for key, rs in rounds.items() if key != "full"}
    pask = next(iter(runs.values()))
    pools = pask["pools"]
    layers = sum(len(u) for u in pools["units"])
    kv = {"full": a.full_tokens * layers * pools["bytes_per_token_layer"], "pask": pools["kv_bytes_capacity"]}
    keys = ("request_throughput", "output_throughput", "max_running_req", "mean_running_req", "median_tpot_ms",
            "median_ttft_ms")
    paired = {i: paired_ratios(rounds[i], rounds["full"], keys, "request_throughput") for i in runs}
    by_round = {i: q.pop("per_round_request_throughput") for i, q in paired.items()}
    ratios = paired
    results = {"model": a.model, "policy": a.policy, "budget": a.budget, "own_budget": a.own_budget,
               "segment_prefill": a.segment_prefill,
               "segment_budget": a.segment_budget, "dataset": data, "kv_bytes": kv,
               "pask_max_total_tokens": n_pask, "full": full, "pask": {str(i): r for i, r in runs.items()},
               "ratio": {str(i): r for i, r in ratios.items()}, "repeat": a.repeat,
               "requests_per_s_ratio_by_round": {str(i): v for i, v in by_round.items()}}
    meta = run_meta(t0)
    text = "\n".join([
        f"# Shared-prefix tool serving, Full vs PASK@{a.budget:g}, radix cache on ({meta['date']})", "",
        f"`{meta['command']}` (code {meta['code']}, {meta['machine']}, {meta['wall_s']} s)", "",
        f"{n} requests: {a.blocks} tools blocks (system messages of {data['segment_tokens']} tokens) x "
        f"{a.per_block} queries (own prompt tokens {data['own_prompt_tokens_mean']} on average), "
        f"{a.output_len} output tokens each (ignore_eos), all sent at once. Same KV bytes: Full "
        f"{kv['full']} B ({a.full_tokens} tokens), PASK {kv['pask']} B ({n_pask} full ids, "
        f"{pools['unit_sizes']} slots per unit). Policy `{a.policy}`"
        f"{'' if a.segment_budget is None else f', segment budget {a.segment_budget:g}'}"
        f"{'' if a.own_budget is None else f', own tokens at budget {a.own_budget:g}'}"
        f"{'' if a.segment_prefill is None else f', segment prefill {a.segment_prefill}'}.", "",
        "| | completed | requests/s | output tok/s | max running | mean running | median TPOT ms | median TTFT ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *[f"| {name} | {r['completed']} | {r['request_throughput']:.3f} | {r['output_throughput']:.1f} | "
          f"{r['max_running_req']} | {r['mean_running_req']} | {r['median_tpot_ms']:.1f} | {r['median_ttft_ms']:.0f} |"
          for name, r in [("Full KV (stock SGLang)", full)]
          + [(f"PASK@{a.budget:g}, interval {i}", r) for i, r in runs.items()]],
        *[f"| ratio PASK (interval {i}) / Full | | {q['request_throughput']} | {q['output_throughput']} | "
          f"{q['max_running_req']} | {q['mean_running_req']} | {q['median_tpot_ms']} | {q['median_ttft_ms']} |"
          for i, q in ratios.items()], "",
        *([f"Each server ran {a.repeat} times, in rounds that start every server once in this order; a row "
           "is the median of its runs, a ratio the median of the rounds' ratios. Requests/s ratio by round: "
           + "; ".join(f"interval {i}: " + ", ".join(f"{x}x" for x in v) for i, v in by_round.items()) + ".", ""]
          if a.repeat > 1 else []),
        f"After the last PASK run of the first interval its tree held: {json.dumps(pask.get('tree'))}.", ""])
    write_outputs(a.out, results, meta, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
