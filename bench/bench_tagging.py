"""Tagging cost: µs per generated token for the output trackers, ms per ~4k-token tools prompt.

    .venv/bin/python bench/bench_tagging.py [--model models/tiny-random-qwen3] [--reps 20]

Targets (issue 3): <= 10 µs/token for the tracker, <= 20 ms to tag a 4k-token tools prompt.
Token bytes come from xgrammar's decoded vocabulary, exactly as the live hook feeds them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def _tools(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"type": "function", "function": {
            "name": f"service_{i}.get_record",
            "description": f"Fetch record {i} from the \"archive\"; returns JSON with fields a, b and c.",
            "parameters": {"type": "object", "properties": {
                "record_id": {"type": "integer", "description": "Identifier of the record."},
                "unit": {"type": "string", "enum": ["metric", "imperial", "nautical"], "default": "metric"},
                "filters": {"type": "array", "items": {"type": "object", "properties": {
                    "field": {"type": "string"}, "value": {"type": ["string", "number"]}},
                    "required": ["field"]}},
                "verbose": {"type": "boolean", "description": "Include raw payloads."}},
                "required": ["record_id"]}}})
    return out


def _output(n_calls: int) -> str:
    blocks = []
    for i in range(n_calls):
        args = {"record_id": 1000 + i, "unit": "imperial", "verbose": i % 2 == 0,
                "filters": [{"field": "city", "value": "São Paulo"}, {"field": "temp", "value": -12.5}],
                "note": "line with \"quotes\" and \\ backslash", "missing": None}
        blocks.append('<tool_call>\n' + json.dumps({"name": f"service_{i}.get_record", "arguments": args})
                      + "\n</tool_call>")
    return "I'll look these up.\n" + "\n".join(blocks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(Path(__file__).resolve().parents[1] / "models" / "tiny-random-qwen3"))
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()

    from sglang_pask.structure import JsonTracker, SqlTracker, catalog_from_texts, make_prompt_tagger
    from sglang_pask.structure.token_bytes import token_bytes
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    tok.model_max_length = 1 << 30  # long synthetic streams; nothing is fed to a model

    # ---- output tracker ----
    out = _output(40)
    ids = tok(out, add_special_tokens=False)["input_ids"]
    pieces = token_bytes(tok, ids)
    assert b"".join(pieces) == out.encode()
    per_tok = []
    for _ in range(args.reps):
        tr = JsonTracker()
        t0 = time.perf_counter()
        for p in pieces:
            tr.feed(p)
        per_tok.append((time.perf_counter() - t0) / len(pieces) * 1e6)
    tr = JsonTracker()
    for p in pieces:
        tr.feed(p)
    t0 = time.perf_counter()
    for _ in range(args.reps):
        tr.rollback(8)
        for p in pieces[-8:]:
            tr.feed(p)
    rb = (time.perf_counter() - t0) / args.reps * 1e6
    print(f"output tracker (qwen3_tools): {len(pieces)} tokens, "
          f"{statistics.median(per_tok):.2f} µs/token median, {min(per_tok):.2f} min "
          f"(target <= 10); rollback(8)+refeed(8): {rb:.1f} µs")

    sql = ("SELECT u.name, COUNT(o.id) FROM users AS u JOIN orders AS o ON o.user_id = u.id "
           "WHERE o.total > 12.5 AND u.country = 'Brazil' GROUP BY u.name ORDER BY 2 DESC LIMIT 10;\n") * 20
    cat = catalog_from_texts(["CREATE TABLE users (id INT, name TEXT, country TEXT); "
                              "CREATE TABLE orders (id INT, user_id INT, total REAL)"])
    spieces = token_bytes(tok, tok(sql, add_special_tokens=False)["input_ids"])
    sq = []
    for _ in range(max(3, args.reps // 4)):
        tr = SqlTracker(cat)
        t0 = time.perf_counter()
        for p in spieces:
            tr.feed(p)
        sq.append((time.perf_counter() - t0) / len(spieces) * 1e6)
    print(f"output tracker (sql): {len(spieces)} tokens, {statistics.median(sq):.2f} µs/token median")

    # ---- prompt tagger on a ~4k-token tools prompt ----
    tagger = make_prompt_tagger(tok)
    n_tools, request, n_tokens = 1, None, 0
    query = "Get record 1042 in imperial units, filter city = 'São Paulo' since 2024-05-01."
    while n_tokens < 4000:
        n_tools += 1
        request = {"messages": [{"role": "system", "content": "You are a records assistant."},
                                {"role": "user", "content": query}], "tools": _tools(n_tools)}
        n_tokens = len(tagger.tag(request).token_ids)
    times, render, enc = [], [], []
    msgs, tools = request["messages"], request["tools"]
    for _ in range(args.reps):
        t0 = time.perf_counter()
        tags = tagger.tag(request)
        times.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        text = tagger._render(msgs, tools, {})
        render.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        tok(text, add_special_tokens=False, return_offsets_mapping=True)
        enc.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(times)
    print(f"prompt tagger: {len(tags.token_ids)} tokens, {n_tools} tools: {med:.1f} ms median "
          f"({med * 4096 / len(tags.token_ids):.1f} ms per 4096 tokens; target <= 20); of which "
          f"one template render {statistics.median(render):.1f} ms (done twice), "
          f"tokenize+offsets {statistics.median(enc):.1f} ms")


if __name__ == "__main__":
    main()
