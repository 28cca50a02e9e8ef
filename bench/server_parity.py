"""Parity of the SGLang server's KV persistence with the reference runner (the oracle).

For N synthetic entries (constrained, greedy; ``--radix off``: radix cache off, the whole prompt
compressed per request; ``--radix on``: radix cache on, so the server caches each request's
shared segment -- the system/tools message -- compressed once, and the runner runs
``segment="system"``, the same rule; use grouped data, e.g. ``--data
synthetic:eval:100:tiny:group=10``, so that most requests hit a cached segment), one server with
``--pask-policy P --pask-budget B --pask-schedule S --pask-interval I --pask-kept-log
--pask-tag-log`` answers every request through the openai client (sequentially);
then the reference runner (``grammar="sglang"``) generates for the same bodies at the same
method, budget, schedule and interval. Per request: identical kept positions per unit at every
compression point (and at every one made from identical inputs: up to the first differing
generated token), identical generated tokens (:mod:`sglang_pask.eval.parity`). A first pass with
method ``full`` on both (``--no-full`` skips it) measures how often the engines' tokens differ
with no compression at all.

    .venv/bin/python bench/server_parity.py --n 100 --budgets 0.5,0.33,0.2 \
        --out bench/results/pask-tiny-fc-server-parity-n100
    .venv/bin/python bench/server_parity.py --radix on --data synthetic:eval:100:tiny:group=10 \
        --budgets 0.33 --out bench/results/pask-tiny-fc-server-parity-radix-n100

A method that reads a learned scorer (``kvzap``) takes its file from ``--scorer`` (the server's
``--pask-scorer``, the runner's ``scorer=`` option)::

    .venv/bin/python bench/server_parity.py --method kvzap --scorer policies/pask-tiny-fc.kvzap.safetensors \
        --budgets 0.33 --schedule prefill --no-full --out bench/results/pask-tiny-fc-server-parity-kvzap-n100

Writes ``report.md``, ``results.json`` (per budget: summary and per-request rows) and
``meta.json`` (command, commit, date, wall times) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import urllib.request

import openai
from sglang_pask.calibrate.pipeline import code_version
from sglang_pask.eval.data import load_spec, stratified
from sglang_pask.eval.harness import Settings, build_request
from sglang_pask.eval.hf_backend import runner_body
from sglang_pask.eval.parity import compare, runner_trace, server_traces, summarize
from sglang_pask.policy.operating_point import SegmentRule
from sglang_pask.policy.shipped import shipped_policy
from sglang_pask.testing import running_server
from tqdm import tqdm


def server_side(model, policy, budget, schedule, interval, bodies, max_tokens, method, workdir, radix, scorer=None):
    kept, tags = os.path.join(workdir, "kept"), os.path.join(workdir, "tags")
    args = ["--pask-policy", policy, "--pask-method", method, "--pask-budget", str(budget),
            "--pask-schedule", schedule, "--pask-interval", str(interval),
            "--pask-kept-log", kept, "--pask-tag-log", tags, "--log-level", "warning"]
    args += ["--pask-scorer", scorer] if scorer else []
    args += ["--pask-segment", "system"] if radix == "on" else ["--disable-radix-cache"]
    with running_server(model, args) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="none")
        for body in tqdm(bodies, desc=f"server {method}@{budget:g}", unit="req", file=sys.stderr):
            client.chat.completions.create(model="default", max_tokens=max_tokens, temperature=0,
                                           **body)
        time.sleep(1.0)  # the scheduler writes the output record when the KV is released
        with urllib.request.urlopen(f"{srv.url}/server_info", timeout=30) as r:
            pask = json.load(r)["internal_states"][0].get("pask") or {}
    # what the server's own timers say (seconds inside the compression hook; the learned scorer's
    # scoring inside the forwards, for a method that reads one)
    cost = {k: pask.get(k) for k in ("compression", "compression_time", "reconstruction", "learned_scorer",
                                      "decode_index")}
    return server_traces(kept, tags), cost


def openai_kwargs(body: dict) -> dict:
    return {"messages": body["messages"], "tools": body["tools"], "tool_choice": body["tool_choice"],
            "extra_body": {"chat_template_kwargs": body["chat_template_kwargs"]}}


def reference_runner(model, policy, method, budget, schedule, interval, radix, scorer=None):
    """(the reference runner at the server's method, budget and operating point, its units: the
    policy's groups for a per-group method, else one layer each, as the server's pools)."""
    from sglang_pask.hf import Runner

    options = {"schedule": schedule, "interval": interval, **({"scorer": scorer} if scorer else {})}
    runner = Runner(model, method=method, budget=budget, policy=policy if method == "pask" else None,
                    grammar="sglang", method_options=options,
                    segment_rule=SegmentRule("system" if radix == "on" else "none"))
    return runner, runner.groups if runner.method.per_group else [[layer] for layer in range(runner.num_layers)]


def pad_tools(bodies: list[dict], model: str, min_tokens: int) -> list[dict]:
    """Each body with tools of the synthetic train split added after its own (names it lacks,
    in the pool's order) until its rendered prompt holds ``min_tokens`` tokens or more: long
    prompts of the same task (the answer stays one of the body's own tools)."""
    from sglang_pask.rendering import render_chat
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    pool = {}
    for e in load_spec("synthetic:train:400:tiny"):
        for t in build_request(e, Settings())[0].tools:
            pool.setdefault(t["function"]["name"], t)
    out = []
    for body in bodies:
        body = {**body, "tools": list(body["tools"])}
        have = {t["function"]["name"] for t in body["tools"]}
        extra = iter([t for name, t in pool.items() if name not in have])
        while len(render_chat(tok, body).token_ids) < min_tokens:
            tool = next(extra, None)
            if tool is None:
                raise SystemExit(f"--min-prompt-tokens {min_tokens}: the train split's tools run out")
            body["tools"].append(tool)
        out.append(body)
    return out


def run_budget(a, budget, entries, method=None):
    method = method or a.method
    scorer = a.scorer if method == a.method else None  # the Full KV pass reads no scorer
    settings = Settings(max_tokens=a.max_tokens, tool_choice=a.tool_choice)
    bodies = [runner_body(build_request(e, settings)[0]) for e in entries]
    if a.min_prompt_tokens:
        bodies = pad_tools(bodies, a.model, a.min_prompt_tokens)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pask-parity-") as d:
        served, cost = server_side(a.model, a.policy, budget, a.schedule, a.interval,
                                   [openai_kwargs(b) for b in bodies], a.max_tokens, method, d, a.radix, scorer)
    t_server = time.perf_counter() - t0
    runner, units = reference_runner(a.model, a.policy, method, budget, a.schedule, a.interval, a.radix, scorer)
    rows = []
    for e, body in tqdm(list(zip(entries, bodies)), desc=f"runner {method}@{budget:g}", unit="req", file=sys.stderr):
        ref = runner_trace(runner, body, units, a.max_tokens)
        got = served.get(tuple(ref["prompt_ids"]))
        if got is None:
            rows.append({"id": e.id, "tokens_equal": False, "kept_equal": False, "compressions": 0,
                         "kept_equal_until_divergence": False, "first_diff": None, "missing": True})
            continue
        rows.append({"id": e.id, **compare(got, ref)})
    return {"method": method, "budget": budget, "summary": summarize(rows), "rows": rows, "server_cost": cost,
            "wall_s": {"server": round(t_server, 1), "runner": round(time.perf_counter() - t0 - t_server, 1)}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--method", default="pask")
    p.add_argument("--data", default=None, help="default synthetic:eval:N:tiny")
    p.add_argument("--n", type=int, default=None,
                   help="entries (default 100); with --data, the first N round-robin over its categories")
    p.add_argument("--budgets", default="0.5,0.33,0.2")
    p.add_argument("--schedule", default="continuous")
    p.add_argument("--interval", type=int, default=1)
    p.add_argument("--tool-choice", default="required")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--radix", choices=("off", "on"), default="off",
                   help="on: radix cache on (server) and segment 'system' (runner)")
    p.add_argument("--no-full", action="store_true",
                   help="skip the Full KV pass (--pask-method full on the server, method full on the runner): "
                        "how often the two engines' generated tokens differ with no compression at all")
    p.add_argument("--min-prompt-tokens", type=int, default=0,
                   help="add tools of the train split to each request until its prompt holds this many tokens")
    p.add_argument("--scorer", default=None,
                   help="the learned scorer file of a method that reads one (kvzap): --pask-scorer on the server, "
                        "the method option scorer= on the runner")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    entries = load_spec(a.data) if a.data else load_spec(f"synthetic:eval:{a.n or 100}:tiny")
    if a.data and a.n is not None:
        entries = stratified(entries, a.n)
    t0 = time.time()
    results = [] if a.no_full else [run_budget(a, 1.0, entries, method="full")]
    results += [run_budget(a, float(b), entries) for b in a.budgets.split(",")]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    cut = f" (the first {a.n} round-robin over its categories)" if a.data and a.n else ""
    if a.min_prompt_tokens:
        cut += f", each padded with tools of the train split to >= {a.min_prompt_tokens} prompt tokens"
    lines = [f"# Server vs reference runner: {a.method}, schedule {a.schedule}, interval {a.interval}",
             "", f"{len(entries)} entries of `{a.data or f'synthetic:eval:{a.n or 100}:tiny'}`{cut}, tool_choice="
             f"{a.tool_choice}, max_tokens {a.max_tokens}, greedy, " + (
                 "radix cache on (server: cached, compressed shared segments; runner: segment 'system')"
                 if a.radix == "on" else "radix cache off") + ". Kept positions are compared "
             "per unit at every compression point; 'until divergence' compares the compressions both engines "
             "made from identical inputs (decode steps up to the first differing generated token, after which "
             "the classes and lengths they see differ). The full row compresses nothing: how often the two "
             "engines' tokens differ from numerics alone (fp32, different attention kernels). A per-KV-head "
             "method's compressions also compare each head's own set ('per head').", "",
             "| method | budget | requests | identical kept positions (every compression) | "
             "identical kept positions until divergence | identical tokens | compressions compared (per head) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        s = r["summary"]
        lines.append(f"| {r['method']} | {r['budget']:g} | {s['requests']} | {s['kept_identical']} "
                     f"({s['kept_identical_pct']}%) | {s['kept_identical_until_divergence']} "
                     f"({s['kept_identical_until_divergence_pct']}%) | {s['tokens_identical']} "
                     f"({s['tokens_identical_pct']}%) | {s['compressions_compared']} "
                     f"({s.get('per_head_compressions', 0)}) |")
    for r in results:
        if (ls := (r.get("server_cost") or {}).get("learned_scorer")):
            ct = r["server_cost"].get("compression_time") or {}
            lines += ["", f"{r['method']}@{r['budget']:g}, the server's own timers: the learned scorer scored "
                      f"{ls['tokens']} tokens in {ls['forwards']} forwards ({ls['missed']} unscored) in "
                      f"{ls['seconds']:.4f} s ({1e6 * ls['seconds'] / max(ls['tokens'], 1):.1f} us/token), inside "
                      f"the forwards that ran; compression {ct.get('compress_s', 0):.4f} s of "
                      f"{ct.get('step_s', 0):.2f} s over {ct.get('decode_steps', 0)} decode steps."]
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    commit = code_version()[0]
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump({"command": " ".join([sys.executable.split("/")[-1], *sys.argv]), "commit": commit,
                   "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                   "wall_s": round(time.time() - t0, 1),
                   "per_budget_wall_s": {f"{r['method']}@{r['budget']:g}": r["wall_s"] for r in results}}, f,
                  indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
