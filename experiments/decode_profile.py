"""Where one decode step's time goes, at 16 and 64 running requests: stock Full KV, PASK with
decode attention request by request (``SGLANG_PASK_BATCHED_DECODE=0``, the path before batching)
and PASK batched (the default), side by side in one run (written by this script: report.md,
results.json, meta.json into ``--out``).

Each server is this project's launcher (stock Full KV: no policy; PASK: ``--pask-policy`` at the
policy's own operating point) with KV for every request at once (PASK gets ``--max-total-tokens``
divided by its budget, so its per-unit pools hold the same prompts and all ``N`` requests run
together: this compares steps of the same batch, not capacity). The same ``N`` tool requests
(~1,100 prompt tokens, ``--output-len`` tokens each, ``ignore_eos``) are sent at once through
SGLang's ``bench_serving``. Once the scheduler logs a decode step with all ``N`` running, py-spy
(``requirements/test.txt``) samples the scheduler process for ``--seconds`` and every sample is
put in the first category its stack reaches, root first (:data:`CATEGORIES`). The step time is
the median over the window's decode log lines of ``#running-req / gen throughput``
(``--decode-log-interval 1``: one line per step). The samples stay in ``--out``/py-spy/ (py-spy's
raw format: one collapsed stack and its count per line).

    .venv/bin/python -m experiments.decode_profile --out experiments/results/decode-profile
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from sglang_pask.policy.shipped import shipped_policy
from sglang_pask.testing import running_server

from bench.server_capacity import MATCHED, bench_serving, run_meta, tool_requests, write_dataset, write_outputs

#: (category, regex on one py-spy frame ``function (file:line)``), tried root first: a sample
#: counts in the first category any of its frames matches; the rest of a forward is "model,
#: other" and the rest outside it "scheduler"
_FILE = r" \((?:[^()]*/)?"  # py-spy writes ``function (path/file.py:line)``
CATEGORIES = (
    ("compression", r"^(compress_batch|maybe_evict_swa|around_evict)" + _FILE),
    ("attention metadata", r"^init_forward_metadata" + _FILE),
    ("attention", r"^forward_decode" + _FILE + r"(attention|torch_native_backend)\.py"),
    ("linear layers", r"^apply" + _FILE + r"unquant\.py|^forward" + _FILE + r"linear\.py"),
    ("logits and sampling", _FILE + r"(logits_processor|sampler)\.py"),
    ("model, other", r"^_execute_decode" + _FILE),
)
#: (key: its files' names, label, launcher env, whether the server runs a policy)
VARIANTS = (("full", "Full KV (stock SGLang)", {}, False),
            ("request", "PASK, decode request by request", {"SGLANG_PASK_BATCHED_DECODE": "0"}, True),
            ("batched", "PASK, decode batched", {"SGLANG_PASK_BATCHED_DECODE": "1"}, True))
STEP_RE = re.compile(r"Decode batch[^,]*, #running-req: (\d+).*?gen throughput \(token/s\): ([\d.]+)")


def py_spy() -> str:
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(exe):
        raise SystemExit("py-spy is not installed (make install puts it in .venv/bin from requirements/test.txt)")
    return exe


def scheduler_pid(launcher_pid: int) -> int:
    import psutil

    for child in psutil.Process(launcher_pid).children(recursive=True):
        if "scheduler" in " ".join(child.cmdline()) or "scheduler" in child.name():
            return child.pid
    raise RuntimeError("no sglang::scheduler process under the launcher")


def categorize(raw: str) -> Counter:
    """py-spy ``raw`` output (``frame;frame;... count`` per line, root first) -> samples per category."""
    rules = [(name, re.compile(rx)) for name, rx in CATEGORIES]
    out = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        frames = stack.split(";")
        cat = next((name for name, rx in rules if any(rx.search(f) for f in frames)), "scheduler")
        out[cat] += int(n)
    return out


def one(model: str, policy: str, n: int, dataset: Path, variant: tuple, a, work: Path) -> dict:
    key, label, env_extra, pask = variant
    tokens = n * (a.prompt_tokens + 200 + a.output_len) + 512
    flags = [*MATCHED, "--max-running-requests", str(n)]
    if pask:
        from sglang_pask.policy import load_policy

        budget = load_policy(policy).budget
        flags += ["--max-total-tokens", str(int(tokens / budget) + 1), "--pask-policy", policy]
    else:
        flags += ["--max-total-tokens", str(tokens)]
    print(f"[{n} running, {label}] starting", flush=True)
    with running_server(model, flags, env={**os.environ, **env_extra}) as srv:
        result: dict = {}
        load = threading.Thread(target=lambda: result.update(
            bench_serving(srv, model, dataset, n, n, work / f"out-{n}-{key}.jsonl")))
        load.start()
        deadline = time.monotonic() + a.wait
        while not any(int(m.group(1)) >= n for m in STEP_RE.finditer(srv.log())):
            if time.monotonic() > deadline or not load.is_alive():
                load.join()
                raise RuntimeError(f"{label}: never {n} requests running at once")
            time.sleep(0.5)
        before = len(STEP_RE.findall(srv.log()))
        raw = Path(a.out) / "py-spy" / f"{n}-{key}.txt"
        raw.parent.mkdir(parents=True, exist_ok=True)
        for _attempt in range(3):  # py-spy 0.4.1 sometimes dies attaching (SIGSEGV): sample again
            spy = subprocess.run([py_spy(), "record", "-p", str(scheduler_pid(srv.pid)), "-d", str(a.seconds),
                                  "-r", str(a.rate), "-f", "raw", "-o", str(raw), "--nonblocking"],
                                 capture_output=True, text=True)
            if spy.returncode == 0:
                break
            print(f"[{n} running, {label}] py-spy exited {spy.returncode}; again", flush=True)
            before = len(STEP_RE.findall(srv.log()))
        else:
            raise RuntimeError(f"py-spy failed 3 times: {spy.stderr[-500:]}")
        steps = [(int(r), float(t)) for r, t in STEP_RE.findall(srv.log())[before:]]
        load.join()
    samples = categorize(raw.read_text())
    total = sum(samples.values())
    ms = [1e3 * r / t for r, t in steps if r == n and t > 0]
    row = {"running": n, "variant": label, "samples": total, "steps_in_window": len(ms),
           "ms_per_step": round(statistics.median(ms), 2) if ms else None,
           "shares": {c: round(samples[c] / total, 4) if total else None
                      for c in (*(name for name, _ in CATEGORIES), "scheduler")},
           "output_throughput": result.get("output_throughput"), "median_tpot_ms": result.get("median_tpot_ms")}
    share = {c: 100 * (v or 0) for c, v in row["shares"].items()}
    print(f"[{n} running, {label}] {row['ms_per_step']} ms per step; attention {share['attention']:.1f}%, "
          f"compression {share['compression']:.2f}%", flush=True)
    return row


def report(rows: list[dict], meta: dict, a) -> str:
    cats = [*(name for name, _ in CATEGORIES), "scheduler"]
    lines = ["# One decode step, profiled (written by experiments/decode_profile.py)", "",
             f"Command: `{meta['command']}` ({meta['machine']}, {meta['code']}, {meta['date']}, "
             f"{meta['wall_s']:.0f} s). `{a.model}`; PASK: `{a.policy}` at its own operating point; "
             f"{a.output_len} output tokens per request, all sent at once; py-spy at {a.rate} Hz for "
             f"{a.seconds} s once all requests run. Shares are of the scheduler's samples in that window.", "",
             "| running | server | ms per decode step | " + " | ".join(cats) + " |",
             "|---:|---|---:|" + "---:|" * len(cats)]
    for r in rows:
        lines.append(f"| {r['running']} | {r['variant']} | {r['ms_per_step']} | "
                     + " | ".join(f"{100 * r['shares'][c]:.1f}%" for c in cats) + " |")
    by = {(r["running"], r["variant"]): r for r in rows}
    lines.append("")
    for n in sorted({r["running"] for r in rows}):
        full, before, after = (by.get((n, v[1])) for v in VARIANTS)
        if full and before and after and all(x["ms_per_step"] for x in (full, before, after)):
            lines.append(f"- {n} running: a PASK step takes {after['ms_per_step'] / before['ms_per_step']:.2f}x "
                         f"the request-by-request one and {after['ms_per_step'] / full['ms_per_step']:.2f}x stock "
                         f"Full KV's; compression is {100 * after['shares']['compression']:.2f}% of it (goal <= 2%).")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/pask-tiny-fc")
    p.add_argument("--policy", default=shipped_policy("models/pask-tiny-fc"))
    p.add_argument("--running", default="16,64", help="requests sent at once, all running together")
    p.add_argument("--prompt-tokens", type=int, default=1100)
    p.add_argument("--output-len", type=int, default=512, help="long enough that the window sees decode only")
    p.add_argument("--seconds", type=int, default=5, help="py-spy's window")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--wait", type=float, default=600, help="seconds to wait for all requests to run")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    py_spy()
    from transformers import AutoTokenizer

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(a.model)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pask-decode-profile-") as d:
        work = Path(d)
        for n in (int(x) for x in a.running.split(",")):
            ds = work / f"data-{n}.jsonl"
            write_dataset(ds, tool_requests(tok, n, a.prompt_tokens, 0), a.output_len)
            rows += [one(a.model, a.policy, n, ds, v, a, work) for v in VARIANTS]
    meta = run_meta(t0)
    write_outputs(a.out, {"rows": rows}, meta, report(rows, meta, a))
    print(f"wrote {a.out}/: report.md, results.json, meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
