"""Accuracy of many-blocks traffic under memory pressure: the grouped tiny eval (every 10 requests
share a tools block: 20 blocks at n = 200) sent in a shuffled order, ``--workers`` at a time, to
Full KV (stock SGLang, radix cache on, LRU) and to PASK's accurate radix mode with tiers
(``--pask-segment system --pask-own-budget 1 --pask-segment-prefill full`` with the segment
policy), both at the same small KV memory, so that blocks go cold, and PASK demotes them, between
their requests (issue 25). Scored by the project's checker (``sglang_pask.eval.harness``), the
same path as ``pask eval``.

Per server: accuracy, the radix hit rate (cached / (cached + computed) prompt tokens, from
SGLang's prefill log), and for PASK the demotions and the share of requests whose block had been
demoted when they hit it (their own tokens prefilled against the compressed block). The eval
split is only scored here: nothing is decided from it.

    .venv/bin/python bench/many_blocks_accuracy.py --out bench/results/pask-tiny-fc-many-blocks-accuracy-n200

Writes ``report.md``, ``results.json`` and ``meta.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from server_capacity import PREFILL_RE, pask_tokens_for, run_meta, write_outputs

SETTINGS = {"max_tokens": 128, "tool_choice": "required"}


def demoted_entries(model: str, entries, tag_dir: Path, rids: list[str]) -> set[int]:
    """Indices of ``entries`` whose request read a demoted block: the server's ``demoted_rids``
    matched through its tag log (prompt token ids) to each entry's rendered prompt."""
    from sglang_pask.eval.harness import Settings, build_request
    from sglang_pask.eval.hf_backend import runner_body
    from sglang_pask.rendering import render_chat
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    index = {tuple(render_chat(tok, runner_body(build_request(e, Settings(**SETTINGS))[0])).token_ids): i
             for i, e in enumerate(entries)}
    prompts = {}
    for path in tag_dir.glob("prompt-*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            prompts[rec["rid"]] = tuple(rec["token_ids"])
    return {index[prompts[r]] for r in rids if r in prompts and prompts[r] in index}


def run(model: str, flags: list[str], entries, workers: int) -> dict:
    from sglang_pask.eval.harness import Settings, score_entry
    from sglang_pask.eval.openai_backend import OpenAIBackend
    from sglang_pask.testing import running_server

    settings = Settings(**SETTINGS)
    with running_server(model, [*flags, "--skip-server-warmup", "--sleep-on-idle"]) as srv:
        backend = OpenAIBackend(srv.base_url)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            recs = list(pool.map(lambda e: score_entry(e, backend, settings), entries))
        with urllib.request.urlopen(f"{srv.url}/server_info", timeout=30) as r:
            pask = json.loads(r.read())["internal_states"][0].get("pask") or {}
        log = srv.log()
    prefills = [(int(a), int(b)) for a, b in PREFILL_RE.findall(log)]
    new, cached = sum(a for a, _ in prefills), sum(b for _, b in prefills)
    return {"valid": [bool(r["valid"]) for r in recs], "ids": [r["id"] for r in recs],
            "accuracy": round(100 * sum(r["valid"] for r in recs) / len(recs), 2),
            "cache_hit_rate": round(cached / (new + cached), 4) if new + cached else None,
            "tree": pask.get("tree"), "segments": pask.get("segments"), "demoted_rids": pask.get("demoted_rids", [])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default="experiments/policies/pask-tiny-fc.segment.b0.33.json")
    p.add_argument("--budget", type=float, default=0.33)
    p.add_argument("--data", default="synthetic:eval:200:tiny:group=10")
    p.add_argument("--full-tokens", type=int, default=1024, help="Full KV tokens (the shared KV memory)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from sglang_pask.eval.data import load_spec

    t0 = time.time()
    entries = load_spec(a.data)
    random.Random(a.seed).shuffle(entries)
    n_pask = pask_tokens_for(a.full_tokens, a.budget)
    accurate = ["--pask-segment", "system", "--pask-own-budget", "1", "--pask-segment-prefill", "full"]
    with tempfile.TemporaryDirectory(prefix="pask-tags-") as tags:
        res = {"full": run(a.model, ["--max-total-tokens", str(a.full_tokens)], entries, a.workers),
               "pask": run(a.model, ["--max-total-tokens", str(n_pask), "--pask-policy", a.policy,
                                     "--pask-budget", str(a.budget), "--pask-tag-log", tags, *accurate],
                           entries, a.workers)}
        demoted = sorted(demoted_entries(a.model, entries, Path(tags), res["pask"]["demoted_rids"]))
    f, q = res["full"], res["pask"]
    on = {k: round(100 * sum(res[k]["valid"][i] for i in demoted) / len(demoted), 1) if demoted else None
          for k in ("full", "pask")}
    both = sum(x and y for x, y in zip(f["valid"], q["valid"]))
    seg = q["segments"] or {}
    demoted_share = seg.get("views_on_demoted", 0) / max(seg.get("views", 0), 1)
    meta = run_meta(t0)
    lines = [f"# Accuracy of many-blocks traffic: Full KV (LRU) vs PASK's accurate mode with tiers ({meta['date']})",
             "", f"`{meta['command']}` (code {meta['code']}, {meta['machine']}, {meta['wall_s']} s)", "",
             f"`{a.data}` (every 10 requests share a tools block) in a shuffled order (seed {a.seed}), {a.workers} at "
             f"a time, tool_choice required, 128 tokens, greedy. Same KV bytes: Full KV {a.full_tokens} tokens, PASK "
             f"{n_pask} full ids at b = {a.budget:g} (`{a.policy}`, `{' '.join(accurate)}`).", "",
             "| server | accuracy | radix hit rate | demotions | requests on a demoted block |",
             "|---|---:|---:|---:|---:|",
             f"| Full KV | {f['accuracy']:.1f} | {100 * (f['cache_hit_rate'] or 0):.1f}% | | |",
             f"| PASK, tiers | {q['accuracy']:.1f} | {100 * (q['cache_hit_rate'] or 0):.1f}% | "
             f"{(q['tree'] or {}).get('demoted', 0)} | {seg.get('views_on_demoted', 0)} of {seg.get('views', 0)} "
             f"({100 * demoted_share:.1f}%) |", "",
             f"Both right: {both}; only Full KV right: {sum(x and not y for x, y in zip(f['valid'], q['valid']))}; "
             f"only PASK right: {sum(y and not x for x, y in zip(f['valid'], q['valid']))}.", "",
             f"The {len(demoted)} entries whose PASK request hit a demoted block (matched through the server's tag "
             f"log): PASK {on['pask']}, Full KV {on['full']} on the same entries.", ""]
    write_outputs(a.out, {"full": f, "pask": q, "pask_max_total_tokens": n_pask, "demoted_share": demoted_share,
                          "demoted_entries": demoted, "accuracy_on_demoted": on}, meta, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
