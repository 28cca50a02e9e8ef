"""What the shipped real-model policies keep and lose, on a user's own requests, through the server.

The real model (``make real-model``) served three ways, one after the other, as ``make serve``
starts it: Full KV (no policy), then ``policies/qwen2.5-coder-0.5b-instruct.b0.33.json`` (0.33, its
prefill point) and its ``.b0.2.json``. Each gets the same requests (the README's weather request
and a few everyday ones over three tools whose descriptions ask for ISO codes and exact forms),
greedy, ``tool_choice="required"``; the table shows each call as the server returned it, and
whether it equals Full KV's. Examples for the README, not an accuracy measurement (that is
BFCL: ``bench/real_model_table.sh``).

    .venv/bin/python bench/real_model_examples.py --out bench/results/qwen2.5-coder-0.5b-instruct-examples
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import openai
from server_capacity import run_meta, write_outputs
from sglang_pask.testing import running_server

ROOT = Path(__file__).resolve().parent.parent

MODEL = "models/qwen2.5-coder-0.5b-instruct"
SERVERS = (("Full KV", []),
           ("PASK 0.33", ["--pask-policy", "policies/qwen2.5-coder-0.5b-instruct.b0.33.json"]),
           ("PASK 0.2", ["--pask-policy", "policies/qwen2.5-coder-0.5b-instruct.b0.2.json"]))


def _tool(name: str, description: str, props: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


WEATHER = _tool("get_weather", "Get the current weather in a city.",
                {"city": {"type": "string", "description": "City name"},
                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city", "unit"])
CURRENCY = _tool("convert_currency", "Convert an amount between currencies.",
                 {"amount": {"type": "number", "description": "Amount to convert"},
                  "from_currency": {"type": "string", "description": "ISO 4217 code of the source currency, e.g. USD"},
                  "to_currency": {"type": "string", "description": "ISO 4217 code of the target currency, e.g. EUR"}},
                 ["amount", "from_currency", "to_currency"])
FLIGHT = _tool("book_flight", "Book a one-way flight.",
               {"origin": {"type": "string", "description": "Departure city"},
                "destination": {"type": "string", "description": "Arrival city"},
                "date": {"type": "string", "description": "Date as YYYY-MM-DD"}}, ["origin", "destination", "date"])
REQUESTS = (
    ("weather (the README's)", [WEATHER], "What's the weather like in Paris right now, in fahrenheit?"),
    ("currency, names", [WEATHER, CURRENCY, FLIGHT], "How much is 250 euros in Japanese yen?"),
    ("currency, names 2", [WEATHER, CURRENCY, FLIGHT], "Convert 100 US dollars to British pounds."),
    ("flight", [WEATHER, CURRENCY, FLIGHT], "Book me a flight from Boston to Denver on 2026-03-14."),
)


def ask(srv) -> list[str]:
    client = openai.OpenAI(base_url=srv.base_url, api_key="none", timeout=600, max_retries=0)
    out = []
    for _, tools, query in REQUESTS:
        r = client.chat.completions.create(model="default", tools=tools, tool_choice="required", temperature=0,
                                           max_tokens=96, messages=[{"role": "user", "content": query}])
        calls = r.choices[0].message.tool_calls or []
        out.append("; ".join(f"{c.function.name} {c.function.arguments}" for c in calls) or "(no call)")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    t0 = time.time()
    if not (ROOT / MODEL / "config.json").exists():
        raise SystemExit(f"{MODEL}: not built (run `make real-model` first)")
    answers = {}
    for name, flags in SERVERS:
        print(f"[{name}] starting {' '.join(flags) or 'stock SGLang'}", flush=True)
        with running_server(MODEL, [*flags, "--skip-server-warmup", "--sleep-on-idle"], timeout=600) as srv:
            answers[name] = ask(srv)
        for (what, _, _), call in zip(REQUESTS, answers[name]):
            print(f"[{name}] {what}: {call}", flush=True)
    meta = run_meta(t0)
    lines = ["# The real model's policies on a user's requests (written by bench/real_model_examples.py)", "",
             f"Command: `{meta['command']}` ({meta['machine']}, {meta['code']}, {meta['date']}, "
             f"{meta['wall_s']:.0f} s). `{MODEL}` served by `make serve`'s launcher and flags, greedy, "
             "`tool_choice=\"required\"`; tools: `get_weather`, `convert_currency` (its parameters ask for ISO 4217 "
             "codes), `book_flight`. `=` marks a call equal to Full KV's.", "",
             "| request | " + " | ".join(n for n, _ in SERVERS) + " |", "|---|" + "---|" * len(SERVERS)]
    for i, (what, _, query) in enumerate(REQUESTS):
        full = answers["Full KV"][i]
        cells = [f"`{answers[n][i]}`" + (" =" if n != "Full KV" and answers[n][i] == full else "") for n, _ in SERVERS]
        lines.append(f"| {what}: {query} | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    write_outputs(a.out, {"requests": [q for _, _, q in REQUESTS], "answers": answers}, meta, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
