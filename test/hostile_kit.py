"""A hostile and careless client (test_server_hostile.py): the requests, sent over raw HTTP.

Each case is ``(name, path, body)`` where ``body`` is a JSON value (sent as JSON) or ``bytes``
(sent as is, ``Content-Type: application/json``). Built from a real prompt's ids so that a case is
refused for the one thing it gets wrong. None of them may get a 5xx or take the server down; every
one of them that the engine cannot run must get a 4xx.
"""

from __future__ import annotations

import json
from typing import Any

import requests

ACTION = "sglang_pask.tags"


def envelope(*actions: dict) -> dict:
    return {"protocol_version": "1", "message_id": "m", "actions": list(actions)}


def tags_action(n: int, runs, seg: int = 0, tracker: str = "qwen3_tools", version: str = "1", **extra) -> dict:
    payload = {"n": n, "runs": runs, "tracker": tracker, "seg": seg, **extra}
    return {"action_id": "c", "action_type": ACTION, "action_version": version, "payload": payload}


def generate(ids, max_new: int = 16, **extra) -> dict:
    return {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new, "temperature": 0}, **extra}


def cases(ids: list[int], vocab: int, chat: dict) -> list[tuple[str, str, Any]]:
    """The hostile requests for a prompt of ``ids`` (a model of ``vocab`` ids) and a valid chat
    body ``chat`` (messages + tools)."""
    n = len(ids)
    forged = [
        ("tags: all one protected class", tags_action(n, [[2, n]])),
        ("tags: a class past the enum", tags_action(n, [[250, n]])),
        ("tags: a negative class", tags_action(n, [[-1, n]])),
        ("tags: runs longer than the prompt", tags_action(n, [[0, 10 * n]])),
        ("tags: a segment of the whole prompt", tags_action(n, [[0, n]], seg=n - 1)),
        ("tags: a made-up signature", tags_action(n, [[0, n]], mac="00" * 32)),
        ("tags: another version", tags_action(n, [[0, n]], version="2")),
        ("tags: an unknown tracker", tags_action(n, [[0, n]], tracker="sql_but_not")),
        ("a future sglang_pask action", {"action_id": "b", "action_type": "sglang_pask.budget",
                                         "action_version": "1", "payload": {"budget": 1.0}}),
    ]
    out: list[tuple[str, str, Any]] = [
        (f"forged {name}", "/generate", generate(ids, kv_hints=envelope(action))) for name, action in forged
    ]
    out += [
        ("forged tags behind a foreign action", "/generate", generate(ids, kv_hints=envelope(
            {"action_id": "v", "action_type": "vendor.prefetch", "action_version": "1", "payload": {}},
            tags_action(n, [[3, n]])))),
        ("forged tags in one item of a batch", "/generate", {
            "input_ids": [ids, ids], "sampling_params": {"max_new_tokens": 8, "temperature": 0},
            "kv_hints": [None, envelope(tags_action(n, [[3, n]]))]}),
        ("a malformed kv_hints envelope", "/generate", generate(ids, kv_hints={"actions": "all"})),
        ("id = vocab size", "/generate", generate([*ids[:-1], vocab])),
        ("id = -1", "/generate", generate([-1, *ids[1:]])),
        ("id = 2**40", "/generate", generate([*ids[:3], 2 ** 40, *ids[3:]])),
        ("one bad id in a batch", "/generate", {"input_ids": [ids, [*ids[:-1], vocab + 7]],
                                                "sampling_params": {"max_new_tokens": 8, "temperature": 0}}),
        ("no ids at all", "/generate", generate([])),
        ("input embeddings of the wrong width", "/generate",
         {"input_embeds": [[0.1] * 3] * 5, "sampling_params": {"max_new_tokens": 4}}),
        ("top_logprobs_num past the vocabulary", "/generate",
         {**generate(ids, 2), "return_logprob": True, "top_logprobs_num": vocab * 10}),
        ("logprob_start_len = -5", "/generate", {**generate(ids, 2), "return_logprob": True, "logprob_start_len": -5}),
        ("ids as strings", "/generate", generate([str(i) for i in ids[:5]])),
        ("array body, chat", "/v1/chat/completions", b"[1, 2, 3]"),
        ("string body, chat", "/v1/chat/completions", b'"tools"'),
        ("null body, chat", "/v1/chat/completions", b"null"),
        ("number body, completions", "/v1/completions", b"7"),
        ("array body, generate", "/generate", b"[{\"input_ids\": [1, 2]}]"),
        ("truncated JSON", "/v1/chat/completions", json.dumps(chat).encode()[:-7]),
        ("messages not a list", "/v1/chat/completions", {**chat, "messages": "hi"}),
        ("a tool whose parameters are not a schema", "/v1/chat/completions",
         {**chat, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 7}}}]}),
        ("max_tokens = -5", "/v1/chat/completions", {**chat, "max_tokens": -5}),
        ("a logit bias on a token past the vocabulary", "/v1/chat/completions",
         {**chat, "logit_bias": {str(vocab + 3): 5}, "max_tokens": 8}),
        ("a stop token id past the vocabulary", "/generate",
         {"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "stop_token_ids": [vocab * 9]}}),
        ("temperature = -1", "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 8,
                                                                                   "temperature": -1}}),
        ("a regex that does not compile", "/generate",
         {"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "regex": "(["}}),
        ("a json_schema that is not JSON", "/generate",
         {"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "json_schema": "{"}}),
        ("a lone surrogate in a message", "/v1/chat/completions",
         b'{"model": "default", "messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 4}'),
    ]
    return out


def send(url: str, path: str, body) -> tuple[int | None, str]:
    """(status, first line of the response body); status None when the connection failed."""
    try:
        if isinstance(body, bytes):
            r = requests.post(f"{url}{path}", data=body, headers={"Content-Type": "application/json"}, timeout=120)
        else:
            r = requests.post(f"{url}{path}", json=body, timeout=120)
    except requests.RequestException as e:
        return None, f"{type(e).__name__}: {e}"
    return r.status_code, (r.text.strip().splitlines() or [""])[0][:300]
