"""Server-vs-reference-runner parity: the same requests, policy, budget and schedule through the
SGLang server (``--pask-kept-log``, ``--pask-tag-log``) and through :class:`~sglang_pask.hf.Runner`
(``grammar="sglang"``: the server's own constraint pipeline), compared request by request.

A trace is ``{"prompt_ids", "output_ids", "compressions": [(step, seq_len, {unit: kept})]}``,
``kept`` the logical positions a unit holds after that compression. Alignment (both engines
compress with the KV of positions ``0 .. seq_len-1`` written, ``step`` = decode steps so far):
the runner also compresses once after forwarding the second-to-last token, which the server never
does (the request finishes when the last token is sampled), so the server's list must equal the
runner's list or the runner's list without its last entry.

Server log records (JSON lines; this module reads files, it does not import the plugin):
``kept-*.jsonl``: ``{"rid", "step", "seq_len", "kept": {unit: positions}}``;
``prompt-*.jsonl`` / ``output-*.jsonl``: ``{"rid", "token_ids"}`` / ``{"rid", "output_ids"}``.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Sequence


def _lines(pattern: str) -> list[dict]:
    out = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out


def server_traces(kept_dir: str, tag_dir: str) -> dict[tuple, dict]:
    """``{prompt ids: trace}`` of every request the server logged (the last one wins when a
    prompt was sent twice)."""
    prompts = {r["rid"]: r["token_ids"] for r in _lines(os.path.join(tag_dir, "prompt-*.jsonl"))}
    outputs = {r["rid"]: r["output_ids"] for r in _lines(os.path.join(tag_dir, "output-*.jsonl"))}
    comps: dict[str, list] = {}
    for r in _lines(os.path.join(kept_dir, "kept-*.jsonl")):
        comps.setdefault(r["rid"], []).append(
            (r["step"], r["seq_len"], {int(u): list(k) for u, k in r["kept"].items()}))
    out = {}
    for rid, ids in prompts.items():
        if rid in outputs:
            out[tuple(ids)] = {"rid": rid, "prompt_ids": list(ids), "output_ids": list(outputs[rid]),
                               "compressions": comps.get(rid, [])}
    return out


def runner_trace(runner, body: dict, units: Sequence[Sequence[int]], max_new_tokens: int) -> dict:
    """The runner's trace for one chat request body (greedy)."""
    res = runner.generate(body, max_new_tokens=max_new_tokens)
    comps = [(c.step, c.seq_len, {u: [int(p) for p in c.kept[layers[0]]] for u, layers in enumerate(units)})
             for c in res.compressions]
    return {"prompt_ids": list(res.prompt_ids), "output_ids": list(res.token_ids), "compressions": comps}


def compare(server: dict, runner: dict) -> dict:
    """``{"tokens_equal", "kept_equal", "first_diff"}`` for one request's two traces."""
    s, r = server["compressions"], runner["compressions"]
    aligned = len(r) - len(s) in (0, 1) and r[:len(s)] == s
    first = next((i for i, (a, b) in enumerate(zip(s, r)) if a != b), None)
    if first is None and not aligned:
        first = min(len(s), len(r))
    return {"tokens_equal": server["output_ids"] == runner["output_ids"], "kept_equal": aligned,
            "compressions": len(s), "first_diff": first}


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    tok = sum(r["tokens_equal"] for r in rows)
    kept = sum(r["kept_equal"] for r in rows)
    return {"requests": n, "tokens_identical": tok, "kept_identical": kept,
            "tokens_identical_pct": round(100.0 * tok / max(n, 1), 2),
            "kept_identical_pct": round(100.0 * kept / max(n, 1), 2),
            "compressions_compared": sum(r["compressions"] for r in rows)}
