"""Errors without internals, on the session's live server (``pask_server``: the tiny random model
with a policy): every 4xx message is one line that names what is wrong -- never a traceback
fragment or a file path -- and a prompt refused for length names the limit that refused it
(srt/entrypoints/error_hooks.py and srt/managers/prompt_limits.py, installed through srt/seam.py).

The session server's pools (``--max-total-tokens`` of the test kit at the policy's budget) hold
more than the tiny model's context, so its prompts are bounded by the context length; the
per-unit pool's wording is tested without a server (test_srt_error_hooks.py).
"""

from __future__ import annotations

import re

import pytest

requests = pytest.importorskip("requests")

#: what a traceback fragment or a path in a message looks like
_INTERNALS = re.compile(r'File "|\.py\b|line \d+, in |Traceback|/site-packages/')


def _one_line(message: str) -> str:
    assert isinstance(message, str) and message, message
    assert "\n" not in message and not _INTERNALS.search(message), message
    return message


def _post(url: str, **kw) -> requests.Response:
    return requests.post(url, timeout=120, **kw)


def _chat(server, **body) -> requests.Response:
    return _post(f"{server.base_url}/chat/completions", json={"model": "default", **body})


def test_invalid_json_is_one_line(pask_server):
    body = '{"model": "default", "messages": ['
    r = _post(f"{pask_server.base_url}/chat/completions", data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    out = r.json()
    assert (out["object"], out["type"], out["code"]) == ("error", "Bad Request", 400)
    msg = _one_line(out["message"])
    assert msg.startswith("invalid JSON in the request body: ") and msg.endswith(f"(line 1, column {len(body) + 1})")
    # /v1/responses: SGLang's nested envelope, our message; /v1/messages: SGLang's Anthropic envelope
    r = _post(f"{pask_server.base_url}/responses", data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and _one_line(r.json()["error"]["message"]).startswith("invalid JSON"), r.text
    r = _post(f"{pask_server.base_url}/messages", data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["type"] == "error", r.text
    _one_line(r.json()["error"]["message"])


def test_a_missing_field_is_named(pask_server):
    r = _chat(pask_server, max_tokens=4)
    assert r.status_code == 400, r.text
    assert _one_line(r.json()["message"]) == "body.messages: Field required"
    r = _post(f"{pask_server.base_url}/chat/completions", data="{}", headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and "content-type" in _one_line(r.json()["message"]), r.text


def test_still_serves_after_bad_requests(pask_server):
    _post(f"{pask_server.base_url}/chat/completions", data="{", headers={"Content-Type": "application/json"})
    _chat(pask_server)
    r = _chat(pask_server, messages=[{"role": "user", "content": "hello"}], max_tokens=2, temperature=0)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] is not None


def _prompt_tokens(server, k: int) -> int:
    r = _chat(server, messages=[{"role": "user", "content": "hello " * k}], max_tokens=1, temperature=0)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens"]


def test_a_too_long_prompt_names_the_limit(pask_server):
    """SGLang refuses a prompt of ``max_req_input_len`` tokens or more (``min(context, pool) - 6``):
    one token under is served, the first refused one and a chat prompt in that window get a message
    naming the limit; a prompt past the context keeps SGLang's own message, which names it."""
    info = requests.get(f"{pask_server.url}/server_info", timeout=30).json()
    limit, pool = info["max_req_input_len"], info["max_total_num_tokens"]
    context = requests.get(f"{pask_server.base_url}/models", timeout=30).json()["data"][0]["max_model_len"]
    if pool < context:
        expected = (f" the server accepts at most {limit - 1} (the per-unit KV pool of {pool} slots holds a whole "
                    "prompt before it is compressed; raise --max-total-tokens)")
    else:
        expected = f"the server accepts at most {limit - 1} (the model's context length is {context} tokens)"

    def generate(n: int) -> requests.Response:
        body = {"input_ids": [5] * n, "sampling_params": {"max_new_tokens": 1}}
        return _post(f"{pask_server.url}/generate", json=body)

    assert generate(limit - 1).status_code == 200
    r = generate(limit)
    assert r.status_code == 400, r.text
    msg = _one_line(r.json()["error"]["message"])
    assert msg.startswith(f"the prompt has {limit} tokens; ") and msg.endswith(expected), msg

    # the same refusal through the chat endpoint: "hello " * k is a + b * k tokens
    a1, a2 = _prompt_tokens(pask_server, 1), _prompt_tokens(pask_server, 2)
    step, base = a2 - a1, a1 - (a2 - a1)
    k = -(-(limit - base) // step)
    assert limit <= base + step * k < context, (base, step, k)
    r = _chat(pask_server, messages=[{"role": "user", "content": "hello " * k}], max_tokens=1)
    assert r.status_code == 400, r.text
    assert _one_line(r.json()["message"]).startswith(f"the prompt has {base + step * k} tokens; ")
    r = _chat(pask_server, messages=[{"role": "user", "content": "hello " * (context // step + 1)}], max_tokens=1)
    assert r.status_code == 400 and f"context length ({context} tokens)" in _one_line(r.json()["message"]), r.text
