"""Serving capacity and TPOT at a fixed KV memory, Full KV vs PASK@b, side by side in one run.

Every server is this project's launcher (``sglang_pask.testing.running_server``: the same binary
and default flags as the tests), stopped by PID also on failure; load is SGLang's own
``sglang.benchmark.serving`` (``python -m sglang_pask.cpu_shim.bench_serving``, backend
``sglang-oai-chat``, dataset ``openai``: JSON lines of chat requests with their tools, so every
request goes through ``/v1/chat/completions`` and is tagged as in production; fixed output
lengths, bench_serving's default ``ignore_eos``).

Part 1, capacity (``models/pask-tiny-fc``, ``--policy``): Full gets ``--max-total-tokens M``; PASK
gets the largest N whose per-unit pools hold ``ceil(b N) == M`` slots, i.e. the same KV bytes
(checked: the PASK pools' ``kv_bytes_capacity`` from ``/server_info`` against ``M x layers x
bytes per token and layer``). A third server, Full KV through the plugin's own backend
(``--pask-method full --pask-budget 1``: the same per-unit pools and batched decode attention as
PASK, nothing dropped, the same KV bytes), separates what the plugin's attention gains from what
compression gains (``--no-full-plugin`` leaves it out). All run without the radix cache (shared prefixes:
``server_shared_prefix.py``) and the overlap scheduler (a policy turns it off).
Long tool prompts (synthetic tiny-profile tools of the train split, added until
the rendered prompt reaches ``--prompt-tokens``), all sent at once. Measured: the most requests in
one decode batch (the scheduler's ``Decode batch, #running-req`` line, logged every step) and
bench_serving's output throughput.

Part 2, TPOT: a random-weight Qwen3 (shape :data:`TPOT_MODEL`, built into a temp dir by
``sglang_pask.tiny.build_random``) with a structure-prior policy for its shape (``pask policy
prior``), or ``--tpot-model`` (a model folder, with ``--tpot-policy``), prompts of ``--contexts``
tokens, a few concurrent requests; median TPOT Full vs PASK@b, each server sized for the same KV
bytes.

    .venv/bin/python bench/server_capacity.py --out bench/results/pask-tiny-fc-server-capacity
    .venv/bin/python bench/server_capacity.py --quick --out /tmp/sc      # a small smoke run
    make bench POLICY=policies/pask-tiny-fc.b0.33.json     # part 1 only, --requests 32, into out/bench-<time>/

Every run ends with one table of ratios PASK / Full (requests/s, output tokens/s, median TPOT and
TTFT, max and mean running requests, KV bytes of the KV cache) and the folder it wrote.

Writes ``report.md``, ``results.json``, ``server_capacity.png`` and ``meta.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Optional

from sglang_pask.policy.shipped import shipped_policy
from sglang_pask.testing import running_server

ROOT = Path(__file__).resolve().parents[1]
DECODE_RE = re.compile(r"Decode batch[^,]*, #running-req: (\d+)")
#: SGLang's prefill log line: tokens computed and tokens read from the radix cache
PREFILL_RE = re.compile(r"Prefill batch, #new-seq: \d+, #new-token: (\d+), #cached-token: (\d+)")
#: both servers of a pair: what a policy makes the plugin set, so Full runs the same scheduler
MATCHED = ["--disable-radix-cache", "--disable-overlap-schedule", "--decode-log-interval", "1",
           "--sleep-on-idle", "--log-level", "info"]
#: ``--ports``: the ports servers may listen on (empty: any free port, printed as each starts)
PORTS: list[int] = []
#: seconds per server run for the estimate printed before part 1 starts: start-up and stop, and
#: per output token of the workload (a 2-core machine, nothing else running; rough, from
#: this script's own runs: 32 requests x 64 output tokens ran ~45 s per server with start-up)
EST_START_S, EST_PER_TOKEN_S = 25.0, 0.01
#: the random Qwen3 of part 2: ~25M parameters, 8 layers, 4 KV heads x 128 dims
TPOT_MODEL = dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=128, max_position_embeddings=8192)
#: ``--tpot-shape``: the random models part 2 can build (``qwen3-4b``: Qwen3-4B's published shape,
#: ~4.0B parameters, for a GPU run -- bench/gpu_check.sh; far too slow for these CPUs)
SHAPES = {
    "27m": TPOT_MODEL,
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, max_position_embeddings=40960),
}


def tool_requests(tokenizer, n: int, prompt_tokens: int, seed: int) -> list[dict]:
    """n chat requests (train split's tiny-profile entries), each with its own tools plus others
    from the pool, in a shuffled order, until its rendered prompt holds >= prompt_tokens."""
    from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.rendering import render_chat

    entries = generate("train", max(n, 200), "tiny")
    pool = sorted({f["name"]: f for e in entries for f in e.functions}.values(), key=lambda f: f["name"])
    rng = random.Random(seed)
    out = []
    for e in entries[:n]:
        fs = list(e.functions)
        rest = [f for f in pool if f["name"] not in {g["name"] for g in fs}]
        rng.shuffle(rest)
        while True:
            tools, _ = bfcl_to_openai_tools(fs)
            req = {"messages": [dict(m) for m in e.messages], "tools": tools, "tool_choice": "auto"}
            n_tok = len(render_chat(tokenizer, req).token_ids)
            if n_tok >= prompt_tokens or not rest:
                break
            fs.insert(rng.randrange(len(fs) + 1), rest.pop())
        out.append({**req, "prompt_tokens": n_tok})
    return out


def write_dataset(path: Path, reqs: list[dict], out_len: int) -> dict:
    with open(path, "w") as f:
        for r in reqs:
            f.write(json.dumps({k: v for k, v in r.items() if k != "prompt_tokens"} | {"max_tokens": out_len}) + "\n")
    lens = [r["prompt_tokens"] for r in reqs]
    return {"requests": len(reqs), "output_tokens": out_len, "prompt_tokens_min": min(lens),
            "prompt_tokens_median": statistics.median(lens), "prompt_tokens_max": max(lens)}


def pask_tokens_for(slots: int, budget: float) -> int:
    """Largest N with ceil(b N) == slots per unit (the same KV bytes as Full with slots tokens)."""
    from sglang_pask.srt.mem_cache.pools import unit_size_for

    n = int(slots / budget) + 2
    while unit_size_for(n, budget) > slots:
        n -= 1
    return n


def server_info(srv) -> dict:
    with urllib.request.urlopen(f"{srv.url}/server_info", timeout=30) as r:
        return json.loads(r.read())


def bench_serving(srv, model: str, dataset: Path, n: int, conc: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "sglang_pask.cpu_shim.bench_serving", "--backend", "sglang-oai-chat",
           "--host", "127.0.0.1", "--port", str(srv.port), "--model", model, "--tokenizer", model,
           "--dataset-name", "openai", "--dataset-path", str(dataset), "--num-prompts", str(n),
           "--max-concurrency", str(conc), "--warmup-requests", "1", "--seed", "1", "--output-file", str(out)]
    out.unlink(missing_ok=True)
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        raise RuntimeError(f"bench_serving failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    row = json.loads(out.read_text().strip().splitlines()[-1])
    keys = ("completed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
            "output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms", "mean_e2e_latency_ms")
    return {k: row.get(k) for k in keys}


def serve_and_bench(name, model, flags, dataset, n, conc, work: Path, env: dict | None = None) -> dict:
    """Start one server (``env``: its environment, None: this process's), run bench_serving against
    it, read its log and counters, stop it."""
    t0 = time.monotonic()
    shown = " ".join(f"{f} {v}" for f, v in zip(flags, flags[1:]) if f.startswith("--pask-"))
    print(f"[{name}] starting the server ({shown or 'Full KV'}), then {n} requests, {conc} at a time", flush=True)
    with running_server(model, flags, env=env, ports=PORTS or None) as srv:
        print(f"[{name}] serving on 127.0.0.1:{srv.port} (log: {srv.log_path})", flush=True)
        info = server_info(srv)
        res = bench_serving(srv, model, dataset, n, conc, work / f"{name}.jsonl")
        pask = (server_info(srv)["internal_states"][0].get("pask") or {})
        log = srv.log()
    running = [int(x) for x in DECODE_RE.findall(log)]
    prefills = [(int(a), int(b)) for a, b in PREFILL_RE.findall(log)]
    new_tokens, cached = sum(a for a, _ in prefills), sum(b for _, b in prefills)
    res.update(name=name, flags=flags, wall_s=round(time.monotonic() - t0, 1),
               max_total_num_tokens=info.get("max_total_num_tokens"),
               max_running_req=max(running, default=0),
               mean_running_req=round(statistics.mean(running), 2) if running else 0,
               pools=pask.get("pools"), compression_errors=(pask.get("compression") or {}).get("errors"),
               operating_point=pask.get("operating_point"), compression=pask.get("compression"),
               compression_time=pask.get("compression_time"), learned_scorer=pask.get("learned_scorer"),
               tree=pask.get("tree"), segments=pask.get("segments"),
               prefill_tokens=new_tokens, cached_tokens=cached,
               cache_hit_rate=round(cached / (new_tokens + cached), 4) if new_tokens + cached else None)
    print(f"[{name}] max #running-req {res['max_running_req']}, output throughput "
          f"{res['output_throughput']:.1f} tok/s, median TPOT {res['median_tpot_ms']:.1f} ms", flush=True)
    return res


def equal_pools_copy(path: str) -> str:
    """A copy of the policy at ``path`` without its measured ``pools`` block (its scorer beside it),
    in a fresh temporary folder: the same policy served with every group's pool at b x N."""
    from sglang_pask.policy.document import load_policy, save_policy

    policy = load_policy(path)
    if policy.pools is None:
        raise ValueError(f"--points equal:{path}: the policy has no pools block (its pools are equal already)")
    out = Path(tempfile.mkdtemp(prefix="pask-equal-pools-")) / Path(path).name
    save_policy(policy.model_copy(update={"pools": None}), out)
    return str(out)


def parse_points(text: str, policy: Optional[str] = None) -> list[tuple[str, list[str]]]:
    """``--points``: comma list of ``policy`` (no schedule flags: the policy's own operating point,
    what ``make serve POLICY=...`` runs), ``SCHEDULE:INTERVAL`` (``--pask-schedule`` and
    ``--pask-interval`` override it), ``FILE.json`` (another policy, at its own operating point and
    ``--budget``: e.g. the lookup and the learned-scorer policy of one budget in one run), or
    ``equal`` / ``equal:FILE.json`` (``policy`` / that policy with its measured ``pools`` block left
    out: every group's pool at b x N, to show what sizing the pools by the shares buys). Returns
    (label, flags) per point, in order."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        if item == "policy":
            out.append(("policy", []))
            continue
        if item == "equal" or item.startswith("equal:"):
            path = item.partition(":")[2] or policy
            if not path:
                raise ValueError("--points equal: no policy to serve with equal pools")
            out.append((f"{Path(path).stem} (equal pools)", ["--pask-policy", equal_pools_copy(path)]))
            continue
        if item.endswith(".json"):  # another policy file at its own operating point (same budget)
            out.append((Path(item).stem, ["--pask-policy", item]))
            continue
        schedule, _, interval = item.partition(":")
        if schedule not in ("prefill", "continuous") or not interval.isdigit() or int(interval) < 1:
            raise ValueError(f"--points: {item!r} is neither 'policy', SCHEDULE:INTERVAL "
                             "(prefill|continuous, interval >= 1), a policy FILE.json nor equal[:FILE.json]")
        out.append((f"{schedule}:{interval}", ["--pask-schedule", schedule, "--pask-interval", interval]))
    if not out:
        raise ValueError("--points names no operating point")
    return out


def point_label(server: dict) -> str:
    """What a PASK row ran: the schedule and interval the server reported in ``/server_info``
    (``{"schedule": {"value", "source"}, ...}``) and where they came from."""
    point = server.get("operating_point") or {}
    if "schedule" not in point:
        return server.get("point", "?")
    sched, inter = point["schedule"], point["interval"]
    label = server.get("point") or "policy"
    file = f"{label}: " if label != "policy" and ":" not in label else ""  # a FILE.json point: its stem
    return f"{file}{sched['value']}, interval {inter['value']} ({sched['source']})"


#: the keys of a server's results that the ratio dictionaries compare
RATIO_KEYS = ("max_running_req", "mean_running_req", "output_throughput", "request_throughput", "median_tpot_ms")


def ratios(a: dict, b: dict, keys=RATIO_KEYS) -> dict:
    return {k: round(a[k] / b[k], 3) if b.get(k) else None for k in keys}


def median_run(runs: list[dict]) -> dict:
    """One server's rounds as one row: the last run's fields, each numeric measurement replaced
    by its median over the rounds; ``rounds`` keeps every run's measurements."""
    row = dict(runs[-1])
    if len(runs) > 1:
        for k, v in runs[-1].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and all(r.get(k) is not None for r in runs):
                row[k] = statistics.median(r[k] for r in runs)
        row["rounds"] = [{k: r.get(k) for k in (*RATIO_KEYS, "median_ttft_ms", "wall_s")} for r in runs]
    return row


def paired_ratios(runs_a: list[dict], runs_b: list[dict], keys=RATIO_KEYS,
                  per_round: str = "output_throughput") -> dict:
    """Per key, the median over rounds of round r's a / b (each round runs every server once, in
    the same order, so slow phases of a shared machine hit both); ``per_round_<per_round>``: that
    key's ratio in each round."""
    per = [ratios(a, b, keys) for a, b in zip(runs_a, runs_b)]
    out = {k: round(statistics.median(p[k] for p in per), 3) if all(p[k] is not None for p in per) else None
           for k in keys}
    out[f"per_round_{per_round}"] = [p[per_round] for p in per]
    return out


def pair(model, policy, budget, slots, dataset, n, conc, work, prefix, points=None, full_plugin=False,
         repeat: int = 1) -> dict:
    """Full with ``slots`` tokens vs PASK@budget at each operating point (:func:`parse_points`)
    with the same KV bytes; ``ratio``: the first point's PASK / Full, ``ratio_<k>`` the k-th's.
    ``full_plugin``: also Full KV through the plugin's own backend (``--pask-method full
    --pask-budget 1``: the same pools and batched attention as PASK, nothing dropped, the same KV
    bytes), and ``ratio_plugin``: the first point's PASK / that server. ``repeat`` rounds, each
    starting every server once in the same order; rows are medians over rounds
    (:func:`median_run`), ratios medians of the rounds' ratios (:func:`paired_ratios`)."""
    points = points or parse_points("continuous:1")
    n_pask = pask_tokens_for(slots, budget)
    servers = [("full", [*MATCHED, "--max-total-tokens", str(slots)])]
    if full_plugin:
        servers.append(("full_plugin", [*MATCHED, "--max-total-tokens", str(slots), "--pask-method", "full",
                                         "--pask-budget", "1"]))
    for i, (_label, flags) in enumerate(points):
        servers.append(("pask" if i == 0 else f"pask-{i}",
                        [*MATCHED, "--max-total-tokens", str(n_pask), "--pask-policy", str(policy),
                         "--pask-budget", str(budget), *flags]))
    runs = {name: [] for name, _ in servers}
    for r in range(repeat):
        for name, flags in servers:
            tag = f"{prefix}{name.replace('_', '-')}" + (f"-r{r + 1}" if repeat > 1 else "")
            runs[name].append(serve_and_bench(tag, model, flags, dataset, n, conc, work))
    out = {name: median_run(rs) for name, rs in runs.items()}
    out["pask_max_total_tokens"], out["repeat"] = n_pask, repeat
    for i, (label, _) in enumerate(points):
        name = "pask" if i == 0 else f"pask-{i}"
        out[name]["point"] = label
        out["ratio" if i == 0 else f"ratio_{i}"] = paired_ratios(runs[name], runs["full"])
    if full_plugin:
        out["ratio_plugin"] = paired_ratios(runs["pask"], runs["full_plugin"])
    pools = out["pask"]["pools"]
    out["kv_bytes"] = {"full": slots * sum(len(u) for u in pools["units"]) * pools["bytes_per_token_layer"],
                       "pask": pools["kv_bytes_capacity"],
                       # every point's own (pools sized by a policy's shares round down: <= the first's)
                       "points": [out["pask" if i == 0 else f"pask-{i}"]["pools"]["kv_bytes_capacity"]
                                  for i in range(len(points))]}
    return out


def calib_runner(a, bench: str):
    """``(policy, runner, entries, settings)`` for an accuracy table on ``a.data``, which must be a
    calib split (the table decides something): ``a.policy`` loaded for ``a.model``, the reference
    runner, the entries and the settings (``a.max_tokens``, tool_choice required)."""
    import sglang_pask
    from sglang_pask.eval.data import load_spec, parse_spec
    from sglang_pask.policy.document import load_policy

    if parse_spec(a.data).get("split") != "calib":
        raise SystemExit(f"{bench}: --data must be a calib split (the table decides something), got {a.data!r}")
    return (load_policy(a.policy, model_dir=a.model), sglang_pask.load_runner(a.model), load_spec(a.data),
            {"max_tokens": a.max_tokens, "tool_choice": "required"})


def command_argv() -> list[str]:
    """``sys.argv`` as typed from the repository root: a script by its relative path, a notebook
    module (``python -m experiments.X``) by its module name."""
    script = Path(sys.argv[0]).resolve()
    if script.is_relative_to(ROOT / "experiments") and script.suffix == ".py":
        return ["-m", f"experiments.{script.stem}", *sys.argv[1:]]
    return [str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else sys.argv[0], *sys.argv[1:]]


def run_meta(t0: float) -> dict:
    """``meta.json``: the command, code version, date, machine and wall time since ``t0``."""
    from sglang_pask.calibrate.pipeline import code_version

    return {"command": " ".join(["python", *command_argv()]), "code": code_version()[0],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "wall_s": round(time.time() - t0, 1)}


def write_outputs(out_dir: str, results: dict, meta: dict, text: str) -> Path:
    """Write ``results.json``, ``meta.json`` and ``report.md`` (printed too) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    (out / "report.md").write_text(text)
    print(text)
    return out


def pask_rows(res: dict) -> list[str]:
    return [k for k in res if k == "pask" or (k.startswith("pask-") and isinstance(res[k], dict))]


def part_capacity(a, work: Path) -> dict:
    from transformers import AutoTokenizer

    reqs = tool_requests(AutoTokenizer.from_pretrained(a.model), a.requests, a.prompt_tokens, a.seed)
    data = write_dataset(work / "capacity-data.jsonl", reqs, a.output_len)
    print(f"[capacity] {json.dumps(data)}", flush=True)
    res = pair(a.model, a.policy, a.budget, a.full_tokens, work / "capacity-data.jsonl", a.requests,
               a.requests, work, "capacity-", points=a.points, full_plugin=not a.no_full_plugin, repeat=a.repeat)
    return {"model": a.model, "policy": a.policy, "budget": a.budget, "full_max_total_tokens": a.full_tokens,
            "dataset": data, **res}


def part_tpot(a, work: Path) -> dict:
    from sglang_pask.tiny.build_random import build
    from transformers import AutoTokenizer

    if a.tpot_model:  # a model on disk with its own policy (the real model), not a random one
        mdir, policy = Path(a.tpot_model), a.tpot_policy or a.policy
        out = {"model": {"path": str(mdir), "policy": str(policy)}, "contexts": {}}
    else:
        mdir = work / "random-qwen3"
        shape = SHAPES[a.tpot_shape]
        params = build(str(mdir), seed=0, overrides=shape)
        policy = work / "random-qwen3.prior.json"
        subprocess.run([sys.executable, "-m", "sglang_pask.cli", "policy", "prior", "--model", str(mdir),
                        "--groups", "2", "--budget", str(a.budget), "--out", str(policy)], check=True,
                       capture_output=True)
        out = {"model": {"params": params, "shape": a.tpot_shape, **shape}, "contexts": {}}
    tok = AutoTokenizer.from_pretrained(str(mdir))
    for ctx in a.contexts:
        reqs = tool_requests(tok, a.tpot_requests, ctx, a.seed + ctx)
        ds = work / f"tpot-{ctx}.jsonl"
        data = write_dataset(ds, reqs, a.tpot_output_len)
        slots = a.tpot_requests * (data["prompt_tokens_max"] + a.tpot_output_len) + 256
        print(f"[tpot {ctx}] {json.dumps(data)}; Full KV slots {slots}", flush=True)
        res = pair(str(mdir), policy, a.budget, slots, ds, a.tpot_requests, a.tpot_requests, work, f"tpot{ctx}-")
        out["contexts"][str(ctx)] = {"dataset": data, "full_max_total_tokens": slots, **res}
    return out


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cap, tpot = results["capacity"], (results.get("tpot") or {}).get("contexts")
    fig, ax = plt.subplots(1, 3 if tpot else 2, figsize=(13 if tpot else 9, 3.8))
    for i, (key, title) in enumerate((("max_running_req", "max running requests"),
                                      ("output_throughput", "output throughput (tok/s)"))):
        names = ["full", *pask_rows(cap)]
        vals = [cap[n][key] for n in names]
        ax[i].bar(range(len(names)), vals, color=["#777777", "#d95f02", "#fdae6b", "#a6761d"][: len(names)])
        ax[i].set_xticks(range(len(names)), ["Full"] + [f"PASK@{cap['budget']:g}\n{point_label(cap[n]).split(' (')[0]}"
                                                         for n in names[1:]], fontsize=8, rotation=20, ha="right")
        ax[i].set_title(f"{title}\n{cap['full_max_total_tokens']} tokens of KV, {cap['dataset']['requests']} requests")
        ax[i].set_ylim(0, 1.15 * max(vals))  # room for the value labels under the title
        for x, v in enumerate(vals):
            ax[i].text(x, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    if not tpot:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        return
    ctxs = list(tpot)
    w = 0.38
    for j, (name, color) in enumerate((("full", "#777777"), ("pask", "#d95f02"))):
        ys = [tpot[c][name]["median_tpot_ms"] for c in ctxs]
        ax[2].bar([k + (j - 0.5) * w for k in range(len(ctxs))], ys, w, color=color,
                  label="Full" if name == "full" else f"PASK@{cap['budget']:g}")
    ax[2].set_xticks(range(len(ctxs)), [f"{c} ctx" for c in ctxs])
    m = results["tpot"]["model"]
    ax[2].set_title("median TPOT (ms), " + (Path(m["path"]).name if "path" in m else
                                            f"random Qwen3 {m['params'] / 1e6:.0f}M"))
    ax[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


#: the ratio table's rows: (label, key of a server's results)
RATIOS = (("requests/s", "request_throughput"), ("output tokens/s", "output_throughput"),
          ("median TPOT (lower is better)", "median_tpot_ms"), ("median TTFT (lower is better)", "median_ttft_ms"),
          ("max running requests", "max_running_req"), ("mean running requests", "mean_running_req"))


def compression_share(server: dict):
    """Seconds in compression / seconds of the decode loop, from the server's own timers
    (``/server_info`` ``compression_time``); None when it timed no decode step."""
    t = server.get("compression_time") or {}
    return t["compress_s"] / t["step_s"] if t.get("step_s") else None


def scorer_share(server: dict):
    """Seconds the learned scorer spent inside the forwards / seconds of the decode loop (the
    server's own timers, ``/server_info`` ``learned_scorer`` and ``compression_time``); None when
    the server runs no learned scorer or timed no decode step."""
    t, sc = server.get("compression_time") or {}, server.get("learned_scorer") or {}
    return sc["seconds"] / t["step_s"] if sc and t.get("step_s") else None


def ratio_table(cap: dict) -> list[str]:
    """Markdown lines: every PASK row of part 1 against Full, one column per operating point,
    plus the KV bytes each server's KV cache holds (the same by construction)."""
    rows = pask_rows(cap)
    head = "| PASK / Full | " + " | ".join(point_label(cap[r]) for r in rows) + " |"
    lines = [head, "|---|" + "---:|" * len(rows)]
    paired = [cap["ratio" if i == 0 else f"ratio_{i}"] for i in range(len(rows))]
    for label, key in RATIOS:
        cells = [f"{q[key]:.2f}x" if q.get(key) is not None else
                 f"{cap[r][key] / cap['full'][key]:.2f}x" if cap["full"].get(key) else "-"
                 for r, q in zip(rows, paired)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    shares = [compression_share(cap[r]) for r in rows]
    lines.append("| compression's share of the decode loop (not a ratio) | "
                 + " | ".join("-" if x is None else f"{100 * x:.1f}%" for x in shares) + " |")
    scorer = [scorer_share(cap[r]) for r in rows]
    if any(x is not None for x in scorer):
        lines.append("| learned scorer's share of the decode loop (not a ratio) | "
                     + " | ".join("-" if x is None else f"{100 * x:.2f}%" for x in scorer) + " |")
    kv = cap["kv_bytes"]
    if "points" in kv:
        lines.append("| KV bytes of the KV cache | " + " | ".join(
            f"{b / kv['full']:.3f}x ({b:,} / {kv['full']:,})" for b in kv["points"]) + " |")
    else:
        lines.append(f"| KV bytes of the KV cache | {kv['pask'] / kv['full']:.2f}x ({kv['pask']:,} / {kv['full']:,})"
                     + " |" * len(rows))
    return lines


def report(results: dict, meta: dict) -> str:
    cap = results["capacity"]
    r = cap["ratio"]
    lines = [f"# Serving at a fixed KV memory: Full KV vs PASK@{cap['budget']:g} (written by bench/server_capacity.py)",
             "", f"Command: `{meta['command']}` ({meta['machine']}, {meta['code']}, {meta['date']}, "
             f"{meta['wall_s']:.0f} s).", "",
             f"## Capacity: `{cap['model']}`, `{cap['policy']}`, {cap['full_max_total_tokens']} tokens of Full KV",
             "", f"KV bytes: Full {cap['kv_bytes']['full']:,}, PASK {cap['kv_bytes']['pask']:,} (per-unit pools "
             f"from /server_info; PASK --max-total-tokens {cap['pask_max_total_tokens']}). Workload: "
             f"{cap['dataset']['requests']} tool requests sent at once, prompts {cap['dataset']['prompt_tokens_min']}-"
             f"{cap['dataset']['prompt_tokens_max']} tokens, {cap['dataset']['output_tokens']} output tokens each.", "",
             "| server | max running req | mean running req | output tok/s | req/s | median TPOT ms | median TTFT ms |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name in ("full", *(["full_plugin"] if "full_plugin" in cap else []), *pask_rows(cap)):
        s = cap[name]
        label = {"full": "full (stock SGLang)", "full_plugin": "full (the plugin's backend, nothing dropped)"}.get(
            name, f"pask, {point_label(s)}")
        lines.append(f"| {label} | {s['max_running_req']} | {s['mean_running_req']} | {s['output_throughput']:.1f} | "
                     f"{s['request_throughput']:.3f} | {s['median_tpot_ms']:.1f} | {s['median_ttft_ms']:.0f} |")
    rounds = cap.get("repeat", 1)
    if rounds > 1:
        lines += ["", f"Each server ran {rounds} times, in rounds that start every server once in the order of the "
                  "table; a row is the median of its runs, a ratio the median of the rounds' ratios."]
    lines += ["", f"Ratios PASK / Full at the same KV bytes (above 1: PASK serves more): max running requests "
              f"**{r['max_running_req']}x**, output throughput **{r['output_throughput']}x**, mean running "
              f"{r['mean_running_req']}x; median TPOT {r['median_tpot_ms']}x (below 1: PASK's tokens come faster) "
              f"(PASK at {point_label(cap['pask'])})."
              + (f" Output throughput ratio by round: {', '.join(f'{x}x' for x in r['per_round_output_throughput'])}."
                 if rounds > 1 else "")]
    for i, name in enumerate(pask_rows(cap)[1:], 1):
        q = cap[f"ratio_{i}"]
        lines.append(f"At {point_label(cap[name])}: max running requests {q['max_running_req']}x, output "
                     f"throughput {q['output_throughput']}x, median TPOT {q['median_tpot_ms']}x (lower is better).")
    if "ratio_plugin" in cap:
        q = cap["ratio_plugin"]
        lines.append(f"Against Full KV through the plugin's own backend (the same per-unit pools and batched decode "
                     f"attention, `--pask-method full --pask-budget 1`): output throughput {q['output_throughput']}x, "
                     f"median TPOT {q['median_tpot_ms']}x (lower is better), max running requests "
                     f"{q['max_running_req']}x.")
    lines += ["", *ratio_table(cap), ""]
    t = results.get("tpot")
    if not t:
        return "\n".join(lines) + "\n"
    m = t["model"]
    title = (f"## TPOT: `{m['path']}`, policy `{m['policy']}`" if "path" in m else
             f"## TPOT: random-weight Qwen3, {m['params'] / 1e6:.1f}M parameters ({m['num_hidden_layers']} layers, "
             f"hidden {m['hidden_size']}, {m['num_key_value_heads']} KV heads x {m['head_dim']}), prior policy")
    lines += [title, "",
              "| context | requests | Full KV tokens | Full median TPOT ms | PASK median TPOT ms "
              "| PASK / Full (lower is better) |",
              "|---:|---:|---:|---:|---:|---:|"]
    for ctx, c in t["contexts"].items():
        lines.append(f"| {c['dataset']['prompt_tokens_median']:.0f} (target {ctx}) | {c['dataset']['requests']} | "
                     f"{c['full_max_total_tokens']} | {c['full']['median_tpot_ms']:.1f} | "
                     f"{c['pask']['median_tpot_ms']:.1f} | {c['ratio']['median_tpot_ms']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--budget", type=float, default=None, help="PASK's budget (default: the policy's own)")
    p.add_argument("--full-tokens", type=int, default=8192, help="Full KV tokens of part 1 (M)")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=1100)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--contexts", default="2048,4096")
    p.add_argument("--tpot-requests", type=int, default=4)
    p.add_argument("--tpot-output-len", type=int, default=32)
    p.add_argument("--points", default="policy,continuous:1",
                   help="PASK operating points of part 1, comma list: policy (the policy's own, as make serve "
                        "runs it), SCHEDULE:INTERVAL, FILE.json (another policy) or equal[:FILE.json] (a policy "
                        "without its measured pool shares) (the first is the headline row; default "
                        "policy,continuous:1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tpot-shape", default="27m", choices=tuple(SHAPES),
                   help="the random model of part 2 (default 27m; qwen3-4b for a GPU)")
    p.add_argument("--tpot-model", default=None,
                   help="part 2 on this model folder instead of a random one (with --tpot-policy, default --policy)")
    p.add_argument("--tpot-policy", default=None)
    p.add_argument("--server-args", default="",
                   help="extra flags for every server of both parts, e.g. '--attention-backend flashinfer "
                        "--cuda-graph-backend-prefill disabled' on a GPU (split on spaces)")
    p.add_argument("--quick", action="store_true", help="16 requests, 1 context of 1024: a smoke run")
    p.add_argument("--repeat", type=int, default=3,
                   help="rounds of part 1, each starting every server once in the same order (default 3): rows "
                        "are medians, ratios medians of the rounds' ratios (one run on a shared 2-core machine "
                        "varied by up to 40%%)")
    p.add_argument("--no-full-plugin", action="store_true",
                   help="part 1 without the row of Full KV through the plugin's backend")
    p.add_argument("--parts", default="capacity,tpot", help="capacity, tpot or both (default both)")
    p.add_argument("--ports", default="",
                   help="A-B: every server listens on the first free port of this range (default: any free port; "
                        "each is printed as its server starts)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    MATCHED.extend(a.server_args.split())
    if a.ports:
        try:
            lo, hi = (int(x) for x in a.ports.split("-"))
            assert 0 < lo <= hi < 65536
        except (ValueError, AssertionError):
            p.error(f"--ports must be A-B with 0 < A <= B < 65536, got {a.ports!r}")
        PORTS[:] = range(lo, hi + 1)
    if a.budget is None:
        from sglang_pask.policy.document import load_policy

        a.budget = float(load_policy(a.policy).budget)
    if a.quick:
        a.requests, a.contexts, a.tpot_requests, a.tpot_output_len, a.repeat = 16, "1024", 2, 16, 1
    a.contexts = [int(x) for x in a.contexts.split(",")]
    try:
        a.points = parse_points(a.points, a.policy)
    except ValueError as e:
        p.error(str(e))
    t0 = time.time()
    parts = [x for x in a.parts.split(",") if x]
    if "capacity" not in parts or not set(parts) <= {"capacity", "tpot"}:
        p.error(f"--parts must hold capacity (and may add tpot), got {a.parts!r}")
    runs = a.repeat * (1 + (not a.no_full_plugin) + len(a.points))
    est = runs * (EST_START_S + EST_PER_TOKEN_S * a.requests * a.output_len)
    print(f"[capacity] {runs} server runs ({a.repeat} rounds of {runs // a.repeat}: Full KV"
          f"{', Full KV through the plugin' if not a.no_full_plugin else ''} and PASK at {len(a.points)} operating "
          f"point(s)), {a.requests} requests each: about {est / 60:.0f} min on 2 idle cores"
          + ("; part 2 (TPOT) after it" if "tpot" in parts else ""), flush=True)
    with tempfile.TemporaryDirectory(prefix="pask-capacity-") as d:
        results = {"capacity": part_capacity(a, Path(d))}
        if "tpot" in parts:
            results["tpot"] = part_tpot(a, Path(d))
    meta = run_meta(t0)
    out = write_outputs(a.out, results, meta, report(results, meta))
    plot(results, out / "server_capacity.png")
    print(f"wrote {out}/: report.md (the tables above), results.json, meta.json, server_capacity.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
