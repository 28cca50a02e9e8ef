"""Server-vs-reference-runner parity: the same requests, policy, budget and schedule through the
SGLang server (``--pask-kept-log``, ``--pask-tag-log``) and through :class:`~sglang_pask.hf.Runner`
(``grammar="sglang"``: the server's own constraint pipeline), compared request by request.

A trace is ``{"prompt_ids", "output_ids", "compressions": [(step, seq_len, {unit: kept})]}``,
``kept`` the logical positions a unit holds after that compression; after a per-KV-head selection,
``[kept]`` followed by each KV head's own positions (so both the union and every head's set are
compared). Alignment (both engines
compress with the KV of positions ``0 .. seq_len-1`` written, ``step`` = decode steps so far):
the runner also compresses once after forwarding the second-to-last token, which the server never
does (the request finishes when the last token is sampled), so the server's list must equal the
runner's list or the runner's list without its last entry.

Server log records (JSON lines; this module reads files, it does not import the plugin):
``kept-*.jsonl``: ``{"rid", "step", "seq_len", "kept": {unit: positions}}`` (per-head selections:
also ``"heads": {unit: [positions per KV head]}``);
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
        heads = r.get("heads", {})
        comps.setdefault(r["rid"], []).append(
            (r["step"], r["seq_len"], {int(u): [list(k), *heads[u]] if u in heads else list(k)
                                       for u, k in r["kept"].items()}))
    out = {}
    for rid, ids in prompts.items():
        if rid in outputs:
            out[tuple(ids)] = {"rid": rid, "prompt_ids": list(ids), "output_ids": list(outputs[rid]),
                               "compressions": comps.get(rid, [])}
    return out


def runner_trace(runner, body: dict, units: Sequence[Sequence[int]], max_new_tokens: int) -> dict:
    """The runner's trace for one chat request body (greedy)."""
    res = runner.generate(body, max_new_tokens=max_new_tokens)
    def unit_kept(c, layers):
        kept = [int(p) for p in c.kept[layers[0]]]
        if c.head_mask is None or c.head_mask[layers[0]] is None:
            return kept
        return [kept, *([int(p) for p in c.kept[layers[0]][m]] for m in c.head_mask[layers[0]])]

    comps = [(c.step, c.seq_len, {u: unit_kept(c, layers) for u, layers in enumerate(units)})
             for c in res.compressions]
    return {"prompt_ids": list(res.prompt_ids), "output_ids": list(res.token_ids), "compressions": comps}


def _aligned(s: list, r: list, outputs: int) -> bool:
    """The server's compressions ``s`` are the runner's ``r``, but for one more of the runner's at
    its last decode step (``>= outputs - 1``, ``outputs`` its generated tokens): the runner
    compresses after forwarding each token, the server only before a decode step it runs, and it
    runs none after the request's last token. A compression the server missed earlier -- at
    prefill end, say, when its scoring failed -- is a difference."""
    extra = r[len(s):]
    return r[:len(s)] == s and (not extra or (len(extra) == 1 and extra[0][0] >= outputs - 1))


def first_token_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first output index where the two differ (a length difference counts), None if equal."""
    d = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if d is None and len(a) != len(b):
        d = min(len(a), len(b))
    return d


def compare(server: dict, runner: dict) -> dict:
    """One request's two traces: ``tokens_equal``; ``kept_equal`` (every compression);
    ``kept_equal_until_divergence``: every compression both engines made from identical inputs,
    i.e. at decode steps ``<= token_diff`` (the first differing output token: a compression at step
    k sees output tokens 0..k-1), so a divergence of the generated tokens -- which changes the
    classes and lengths every later compression sees -- is not counted twice; ``first_diff``: the
    first differing compression (index), ``token_diff``; ``per_head_compressions``: the server's
    compressions that carry each KV head's set (compared with the runner's like the union)."""
    s, r = server["compressions"], runner["compressions"]
    outputs = len(runner["output_ids"])
    first = next((i for i, (a, b) in enumerate(zip(s, r)) if a != b), None)
    if first is None and not _aligned(s, r, outputs):
        first = min(len(s), len(r))
    d = first_token_diff(server["output_ids"], runner["output_ids"])
    if d is None:
        until = _aligned(s, r, outputs)
    else:
        until = [c for c in s if c[0] <= d] == [c for c in r if c[0] <= d]
    per_head = sum(any(k and isinstance(k[0], list) for k in c[2].values()) for c in s)
    return {"tokens_equal": d is None, "kept_equal": _aligned(s, r, outputs), "kept_equal_until_divergence": until,
            "compressions": len(s), "per_head_compressions": per_head, "first_diff": first, "token_diff": d,
            "output_tokens": [len(server["output_ids"]), len(runner["output_ids"])]}


def summarize(rows: list[dict]) -> dict:
    n = len(rows)

    def count(key):
        return sum(bool(r.get(key)) for r in rows)

    def pct(k):
        return round(100.0 * k / max(n, 1), 2)

    tok, kept, until = count("tokens_equal"), count("kept_equal"), count("kept_equal_until_divergence")
    return {"requests": n, "tokens_identical": tok, "kept_identical": kept, "kept_identical_until_divergence": until,
            "tokens_identical_pct": pct(tok), "kept_identical_pct": pct(kept),
            "kept_identical_until_divergence_pct": pct(until),
            "compressions_compared": sum(r["compressions"] for r in rows),
            # those whose units carry each KV head's own set (a per-head selection), compared too
            "per_head_compressions": sum(r.get("per_head_compressions", 0) for r in rows)}
