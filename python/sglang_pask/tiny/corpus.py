"""Deterministic text for training the tiny models' byte-level BPE tokenizers.

The mix mirrors what the tokenizer must encode cheaply: rendered tool schemas (JSON with
``"type"``, ``"properties"``, ``"enum"`` ...), English requests, numbers, dates and tool calls.
Same seed -> same lines.
"""

from __future__ import annotations

import json
import random
from typing import Iterator

WORDS = (
    "get set find list create delete update send book search check convert calculate schedule "
    "cancel add remove open close play stop read write fetch order track compute estimate weather "
    "city country unit temperature date time location user email message file folder event meeting "
    "flight hotel restaurant movie song playlist account balance payment invoice price stock symbol "
    "currency amount distance route map recipe ingredient calendar reminder task note contact phone "
    "number name title description query limit offset page size format language region category "
    "status priority type value key id count total max min average rating review product item cart "
    "the a an of to for in on with from by and or please what is my can you I need want would like "
    "tomorrow today next last week month year morning evening Berlin Paris Tokyo London Madrid Rome "
    "Oslo Cairo Lima Boston celsius fahrenheit kelvin euro dollar yen small medium large red green "
    "blue high low true false null required optional string integer number boolean object array"
).split()

TYPES = ("string", "integer", "number", "boolean", "array", "object")


def _schema(rng: random.Random) -> dict:
    props = {}
    for _ in range(rng.randint(1, 4)):
        name = "_".join(rng.sample(WORDS[:60], rng.randint(1, 2)))
        t = rng.choice(TYPES)
        prop: dict = {"type": t, "description": " ".join(rng.choices(WORDS, k=rng.randint(2, 8)))}
        if t == "string" and rng.random() < 0.4:
            prop["enum"] = rng.sample(WORDS[150:190], rng.randint(2, 4))
        if t == "array":
            prop["items"] = {"type": rng.choice(TYPES[:4])}
        props[name] = prop
    return {
        "type": "function",
        "function": {
            "name": "_".join(rng.sample(WORDS[:40], 2)),
            "description": " ".join(rng.choices(WORDS, k=rng.randint(4, 12))),
            "parameters": {"type": "object", "properties": props, "required": sorted(props)[:1]},
        },
    }


def _value(rng: random.Random):
    return rng.choice(
        [
            rng.randint(-1000, 100000),
            round(rng.uniform(-100, 1000), rng.randint(1, 3)),
            rng.choice(WORDS),
            f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            rng.random() < 0.5,
        ]
    )


#: Fixed text of the tools chat template, so its header costs few tokens.
TEMPLATE_TEXT = (
    "system\nuser\nassistant\n# Tools\n\nYou may call one or more functions to assist with the user "
    "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call>"
)


def lines(seed: int = 0, n: int = 4000) -> Iterator[str]:
    """Yield ``n`` training lines for a tokenizer, deterministically from ``seed``."""
    rng = random.Random(seed)
    for i in range(n):
        if i % 50 == 0:
            yield TEMPLATE_TEXT
        kind = i % 4
        if kind == 0:
            yield json.dumps(_schema(rng), ensure_ascii=False)
        elif kind == 1:
            yield " ".join(rng.choices(WORDS, k=rng.randint(5, 20))).capitalize() + "."
        elif kind == 2:
            args = {rng.choice(WORDS[:80]): _value(rng) for _ in range(rng.randint(1, 4))}
            call = {"name": "_".join(rng.sample(WORDS[:40], 2)), "arguments": args}
            yield "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"
        else:
            n, x, v, w = rng.randint(0, 99999), rng.uniform(0, 1000), _value(rng), rng.choice(WORDS)
            yield f'{n} {x:.2f} {v} {{"{w}": [1, 2, 3]}}'
