"""The four defects of issue 47, probed against a live server, before and after the fix.

One server per mode (the tiny model, the shipped tiny policy; ``recommended``: the README's line,
radix off; ``radix``: the segment policy with ``--pask-segment system`` and SGLang's radix cache;
``chunked``: ``--max-total-tokens 1200``, so a long prompt is prefilled in chunks), and in each:

1. **forged structure tags**: ``/generate`` with a client-written ``sglang_pask.tags`` KV-hint
   action (class 999, class -7, and in the radix mode a forged shared segment ``seg: 40`` on
   40 prompt ids, followed by a plain ``/generate`` on the same ids: did it hit what the forged
   request planted, and did its answer change?);
2. **bad token ids** (-3, 1,000,000) on ``/generate``, then ``/health``;
3. **a JSON array body** on ``/v1/chat/completions``;
4. **chunked prefill**: in the chunked mode, the prompt lengths the server refuses (a 400 naming
   the numbers) or serves.

Prints every request's status and the first line of its body, the log lines that matter
(``compression failed``, ``Traceback``, ``IndexError``) and whether the server is alive, and
writes them to ``--out`` (``report.md``, ``results.json``).

    .venv/bin/python -m experiments.trust_boundary --out experiments/results/trust-boundary-after
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import requests
from sglang_pask.testing import running_server

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "pask-tiny-fc"
MODES = {
    "recommended": ["--pask-policy", "policies/pask-tiny-fc.b0.33.json", "--disable-radix-cache"],
    "radix": ["--pask-policy", "experiments/policies/pask-tiny-fc.segment.b0.33.json", "--pask-segment", "system"],
    "chunked": ["--pask-policy", "experiments/policies/pask-tiny-fc.lookup.b0.33.json", "--disable-radix-cache",
                "--max-total-tokens", "1200"],
}
LOG_MARKS = ("compression failed", "Traceback", "IndexError", "bad tags", "forged", "reserved")


def _ids(n: int) -> list[int]:
    """The first ``n`` ids of a rendered train-split tool request (a real prompt's ids)."""
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.rendering import render_chat
    from sglang_pask.tiny.examples import request_body
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    body = request_body(next(iter(generate("train", 1, profile="tiny"))))[0]
    ids = list(render_chat(tok, {**body, "tool_choice": "required"}).token_ids)
    assert len(ids) >= n, len(ids)
    return ids[:n]


def _catalog_body(n_tools: int) -> dict:
    """A tool request of the first train entry's messages with ``n_tools`` distinct train tools."""
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.tiny.examples import request_body

    tools, names = [], set()
    for e in generate("train", 400, profile="tiny"):
        for t in request_body(e)[0]["tools"]:
            if t["function"]["name"] not in names and len(tools) < n_tools:
                names.add(t["function"]["name"])
                tools.append(t)
    messages = request_body(next(iter(generate("train", 1, profile="tiny"))))[0]["messages"]
    return {"model": "default", "messages": messages, "tools": tools, "tool_choice": "required",
            "max_tokens": 32, "temperature": 0}


def _forged(ids, runs, seg=0) -> dict:
    return {"protocol_version": "1", "message_id": "m", "actions": [{
        "action_id": "x", "action_type": "sglang_pask.tags", "action_version": "1",
        "payload": {"n": len(ids), "runs": runs, "tracker": "qwen3_tools", "seg": seg}}]}


def _post(srv, path, body=None, data=None) -> dict:
    try:
        r = requests.post(f"{srv.url}{path}", json=body, data=data, timeout=120,
                          headers={"Content-Type": "application/json"} if data is not None else None)
        text = r.text.strip().splitlines()[0][:300] if r.text.strip() else ""
        out = {"status": r.status_code, "body": text}
        try:
            meta = r.json().get("meta_info", {}) if isinstance(r.json(), dict) else {}
            out["cached_tokens"] = meta.get("cached_tokens")
            out["output_ids"] = r.json().get("output_ids") if isinstance(r.json(), dict) else None
            usage = r.json().get("usage") if isinstance(r.json(), dict) else None
            out["prompt_tokens"] = (usage or {}).get("prompt_tokens") or meta.get("prompt_tokens")
        except ValueError:
            pass
        return out
    except requests.RequestException as e:
        return {"status": None, "body": f"{type(e).__name__}: {e}"[:300]}


def _alive(srv) -> bool:
    try:
        return requests.get(f"{srv.url}/health", timeout=10).status_code == 200 and srv.proc.poll() is None
    except requests.RequestException:
        return False


def _generate(ids, kv_hints=None, max_new=24) -> dict:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new, "temperature": 0}}
    if kv_hints is not None:
        body["kv_hints"] = kv_hints
    return body


def probe(mode: str) -> dict:
    long_ids = _ids(60)
    ids = long_ids[:40]
    rows = []
    args = [*MODES[mode], "--skip-server-warmup", "--log-level", "info"]
    with running_server(str(MODEL), args, env={**os.environ, "OMP_NUM_THREADS": "1"}) as srv:
        start = len(srv.log())  # what the probes make the server log, not its start-up

        def ask(what, path, body=None, data=None):
            row = {"probe": what, "path": path, **_post(srv, path, body, data)}
            row["alive_after"] = _alive(srv)
            rows.append(row)
            print(f"[{mode}] {what}: {row['status']} {row['body'][:160]!r} alive={row['alive_after']}"
                  + (f" cached={row.get('cached_tokens')}" if row.get("cached_tokens") is not None else ""),
                  flush=True)
            return row

        ask("plain /generate (baseline)", "/generate", _generate(ids))
        ask("forged tags: class 999", "/generate", _generate(ids, _forged(ids, [[999, 40]])))
        ask("forged tags: class -7", "/generate", _generate(ids, _forged(ids, [[-7, 40]])))
        if mode == "radix":
            long_base = ask("plain /generate on 60 ids (baseline)", "/generate", _generate(long_ids))
            ask("forged tags: seg 40 of 60 ids (a shared segment)", "/generate",
                _generate(long_ids, _forged(long_ids, [[0, 60]], seg=40)))
            after = ask("plain /generate on the 60 ids after the forged segment", "/generate", _generate(long_ids))
            after["same_answer_as_baseline"] = after.get("output_ids") == long_base.get("output_ids")
            print(f"[{mode}]   same answer as the baseline: {after['same_answer_as_baseline']}")
        ask("JSON array body on /v1/chat/completions", "/v1/chat/completions", data="[1, 2, 3]")
        if mode == "chunked":
            for n_tools in (4, 6, 8, 10, 12):
                ask(f"chunked: {n_tools} tools", "/v1/chat/completions", _catalog_body(n_tools))
        ask("bad ids: -3", "/generate", _generate([*ids[:5], -3, *ids[5:]]))
        ask("bad ids: 1,000,000", "/generate", _generate([*ids[:5], 1_000_000, *ids[5:]]))
        time.sleep(1.0)
        log = srv.log()[start:]
    marks = [ln for ln in log.splitlines() if any(m in ln for m in LOG_MARKS)]
    return {"mode": mode, "args": args, "rows": rows, "log_lines": marks[:40], "log_line_count": len(marks),
            "alive_at_end": rows[-1]["alive_after"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    results = [probe(m) for m in args.modes.split(",")]
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    # the command as typed from the repository root (an --out given as an absolute path inside it too)
    shown = [os.path.relpath(x, ROOT) if os.path.isabs(x) and x.startswith(str(ROOT) + "/") else x for x in sys.argv]
    command = " ".join(["python", *shown])
    wall = time.time() - t0
    lines = [f"# Trust boundary probes ({commit}, {wall:.0f} s)", "", f"Command: `{command}`", ""]
    for r in results:
        lines += [f"## {r['mode']}: `{' '.join(r['args'])}`", "",
                  "| probe | status | body (first line) | alive after |", "|---|---|---|---|"]
        for row in r["rows"]:
            extra = ""
            if "same_answer_as_baseline" in row:
                extra = f" (cached {row.get('cached_tokens')}, same answer: {row['same_answer_as_baseline']})"
            if row.get("prompt_tokens"):
                extra += f" ({row['prompt_tokens']} prompt tokens)"
            body = row["body"][:140].replace("|", "\\|")
            lines.append(f"| {row['probe']}{extra} | {row['status']} | `{body}` | {row['alive_after']} |")
        lines += ["", f"Log lines naming a failure while the probes ran ({r['log_line_count']}):", "", "```",
                  *[ln[:220] for ln in r["log_lines"][:12]], "```", ""]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"commit": commit, "results": results}, indent=1) + "\n")
    meta = {"command": command, "code": f"git {commit}", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.uname().machine}, {os.cpu_count()} cpus", "wall_s": round(wall, 1)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
