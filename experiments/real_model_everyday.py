"""Twelve everyday tool requests (bench/data/everyday_tool_requests.json) on the real model through
the reference runner, per KV method at one budget: how many exact calls (tool name and every
argument accepted by BFCL's rule: strings standardized, lists of acceptable values) each method makes. A smoke set for
reports, never for choosing anything (the BFCL calib split does that). Constrained
(``tool_choice="required"``), greedy, the prefill schedule for every method (as the budget table).
Writes report.md, results.json, meta.json into ``--out``.

    .venv/bin/python -m experiments.real_model_everyday --out experiments/results/qwen2.5-coder-0.5b-instruct-everyday
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sglang_pask.eval.checker import standardize_string

from bench.server_capacity import run_meta, write_outputs

ROOT = Path(__file__).resolve().parent.parent

DATA = ROOT / "bench" / "data" / "everyday_tool_requests.json"


def requests() -> list[tuple[dict, dict]]:
    """(OpenAI request body, gold call) per request."""
    doc = json.loads(DATA.read_text())
    out = []
    for r in doc["requests"]:
        tools = [{"type": "function", "function": {"name": n, **doc["tools"][n]}} for n in r["tools"]]
        out.append(({"messages": [{"role": "user", "content": r["query"]}], "tools": tools,
                     "tool_choice": "required"}, r["gold"]))
    return out


def _matches(value, accepted: list) -> bool:
    for a in accepted:
        if isinstance(a, str) and isinstance(value, str) and standardize_string(a) == standardize_string(value):
            return True
        if not isinstance(a, str) and type(a) is type(value) and a == value:
            return True
        if isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(value, (int, float)) \
                and not isinstance(value, bool) and float(a) == float(value):
            return True
    return False


def exact(calls: list, gold: dict) -> bool:
    """BFCL's rule for one call: the gold tool; every argument given is a gold argument with an
    accepted value (``gold["arguments"]``: name -> list of accepted values, "" = may be omitted);
    every gold argument not marked optional is given."""
    if len(calls) != 1:
        return False
    c = calls[0]
    name = c.get("name") if isinstance(c, dict) else getattr(c, "name", None)
    args = c.get("arguments") if isinstance(c, dict) else getattr(c, "arguments", None)
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return False
    if name != gold["name"] or not isinstance(args, dict):
        return False
    want = gold["arguments"]
    if set(args) - set(want) or any(k not in args and "" not in v for k, v in want.items()):
        return False
    return all(_matches(v, want[k]) for k, v in args.items())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/qwen2.5-coder-0.5b-instruct")
    p.add_argument("--budget", type=float, default=0.33)
    p.add_argument("--methods", default="full,streaming,snapkv:per_head=false,snapkv:per_head=true,pask",
                   help="comma list; pask once per --policies entry")
    p.add_argument("--policies", default="policies/qwen2.5-coder-0.5b-instruct.b0.33.json",
                   help="comma list of policies for pask")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import sglang_pask
    from sglang_pask.methods.options import parse_method_spec
    from sglang_pask.policy.document import load_policy

    t0 = time.time()
    runner = sglang_pask.load_runner(a.model)
    reqs = requests()
    cells = []
    for spec in a.methods.split(","):
        if spec == "pask":
            cells += [("pask", {}, pol) for pol in a.policies.split(",")]
        else:
            name, opts = parse_method_spec(spec)
            cells.append((name, opts, None))
    rows = []
    for name, opts, pol in cells:
        label = f"pask ({pol})" if pol else (name + "".join(f" {k}={v}" for k, v in opts.items()))
        kw = {"policy": load_policy(pol, model_dir=a.model)} if pol else {}
        outs = []
        for body, gold in reqs:
            res = sglang_pask.generate(runner, body, name, budget=None if name == "full" else a.budget,
                                       schedule="prefill", max_new_tokens=a.max_tokens, **opts, **kw)
            calls = [{"name": c["function"]["name"] if "function" in c else c.get("name"),
                      "arguments": c["function"]["arguments"] if "function" in c else c.get("arguments")}
                     for c in (res.tool_calls or [])]
            outs.append({"query": body["messages"][0]["content"], "calls": calls, "exact": exact(calls, gold),
                         "text": res.text})
        n = sum(o["exact"] for o in outs)
        rows.append({"method": label, "exact": n, "n": len(outs), "outputs": outs})
        print(f"{label}: {n}/{len(outs)} exact", flush=True)
    meta = run_meta(t0)
    lines = ["# Everyday tool requests on the real model (written by experiments/real_model_everyday.py)", "",
             f"Command: `{meta['command']}` ({meta['machine']}, {meta['code']}, {meta['date']}, "
             f"{meta['wall_s']:.0f} s). "
             f"`{a.model}`, reference runner, constrained, greedy, prefill schedule, budget {a.budget:g} "
             "(Full KV: none). Twelve hand-written requests (bench/data/everyday_tool_requests.json), each with "
             "three tools; exact = BFCL's rule: the gold tool, every argument accepted (strings standardized as "
             "BFCL does), none missing or extra.", "",
             "| method | exact calls |", "|---|---:|"]
    lines += [f"| {r['method']} | {r['exact']}/{r['n']} |" for r in rows]
    lines += ["", "Misses (first 6 per method):", ""]
    for r in rows:
        miss = [o for o in r["outputs"] if not o["exact"]][:6]
        lines += [f"- {r['method']}: " + "; ".join(f"`{json.dumps(o['calls'])[:140]}`" for o in miss)] if miss else []
    write_outputs(a.out, {"budget": a.budget, "rows": rows}, meta, "\n".join(lines) + "\n")
    print(f"wrote {a.out}/: report.md, results.json, meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
