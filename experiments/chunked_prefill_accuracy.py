"""The accuracy cost of the chunked prefill rule (:mod:`sglang_pask.methods.chunks`), measured on the
**calib** split with the reference runner (the server keeps the same sets: ``test_chunked_prefill_server.py``).

PASK with ``--policy`` at its budget and operating point; each prompt written whole (the
calibrated rule), then under the rule a server applies with unit pools of each of ``--pools``
slots (:meth:`~sglang_pask.methods.chunks.ChunkRule.for_pool`: prompts the pool holds whole stay
whole; longer ones in chunks of a quarter of the pool, each chunk end compressing only as far as
the next chunk needs), and, as the strict variant, chunks of ``--strict`` tokens on every prompt,
each chunk end compressing to the method's budget. The tiny calib prompts are about 190 tokens, so
small pools stand in for long prompts. Per row: accuracy, entries that flip against the whole-prompt
row, the share of prompts written in chunks and their mean chunk ends.

    .venv/bin/python -m experiments.chunked_prefill_accuracy \
        --out experiments/results/pask-tiny-fc-chunked-prefill-calib

Writes ``report.md``, ``results.json`` and ``meta.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time

from sglang_pask.policy.shipped import shipped_policy

from bench.server_capacity import calib_runner, run_meta, write_outputs


def variants(a) -> list[tuple[str, object]]:
    from sglang_pask.methods.chunks import ChunkRule

    out = [("whole", ChunkRule())]
    out += [(f"pool of {c} slots", ChunkRule.for_pool(c, a.context)) for c in map(int, a.pools.split(","))]
    out += [(f"strict, chunks of {s}", ChunkRule(size=s, above=0)) for s in map(int, a.strict.split(","))]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--data", default="synthetic:calib:200:tiny")
    p.add_argument("--pools", default="192,160,128,96")
    p.add_argument("--strict", default="128,64")
    p.add_argument("--context", type=int, default=2048, help="the model's context length (the rule's bound)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import numpy as np
    import sglang_pask
    from sglang_pask.calibrate.search import accuracy

    t0 = time.time()
    policy, runner, entries, settings = calib_runner(a, "chunked_prefill_accuracy")
    rows, whole = [], None
    for label, rule in variants(a):
        t = time.time()
        recs = sglang_pask.score(runner, "pask", entries, budget=policy.budget, policy=policy, settings=settings,
                                 chunk_rule=rule)
        valid = np.array([bool(r["valid"]) for r in recs])
        prompts = [int(r["meta"].get("prompt_tokens", 0) or 0) for r in recs]
        ends = np.array([len(rule.ends(n)) for n in prompts])
        row = {"rule": label, "chunk_rule": rule.record(), "accuracy": round(100 * accuracy(recs), 2), "n": len(recs),
               "chunked_share": round(float((ends > 0).mean()), 3),
               "chunk_ends_mean": round(float(ends[ends > 0].mean()) if (ends > 0).any() else 0.0, 2),
               "prompt_tokens_mean": round(float(np.mean(prompts)), 1), "seconds": round(time.time() - t, 1)}
        if whole is None:
            whole = valid
        else:
            row["right_to_wrong"] = int((whole & ~valid).sum())
            row["wrong_to_right"] = int((~whole & valid).sum())
        rows.append(row)
        print(f"[chunked] {row}", flush=True)
    meta = run_meta(t0)
    point = policy.point.describe() if policy.point else "default"
    lines = ["# The accuracy cost of the chunked prefill rule (written by experiments/chunked_prefill_accuracy.py)", "",
             f"Command: `{meta['command']}` ({meta['machine']}, {meta['code']}, {meta['date']}, "
             f"{meta['wall_s']:.0f} s). `{a.model}`, `{a.policy}` at b = {policy.budget:g}, its operating point "
             f"({point}). Reference runner on `{a.data}` (calib), constrained, greedy, tool_choice required. "
             "A pool row is the rule a server with unit pools of that many slots applies (prompts it holds whole "
             "stay whole; a chunk end compresses only as far as the next chunk needs); a strict row compresses "
             "every prompt longer than one chunk at every chunk end to the method's budget.", "",
             "| prompt written | calib accuracy | right -> wrong | wrong -> right | prompts in chunks | "
             "chunk ends (chunked prompts) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['rule']} | {r['accuracy']:.1f} | {r.get('right_to_wrong', '')} | "
                     f"{r.get('wrong_to_right', '')} | {100 * r['chunked_share']:.0f}% | {r['chunk_ends_mean']:.2f} |")
    lines += ["", f"Prompt tokens: {rows[0]['prompt_tokens_mean']:.0f} on average."]
    write_outputs(a.out, {"rows": rows}, meta, "\n".join(lines) + "\n")
    print(f"wrote {a.out}/: report.md, results.json, meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
