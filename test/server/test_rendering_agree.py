"""One rendering path, shown live: for 50 requests (synthetic tiny-profile eval entries as OpenAI
bodies, ``tool_choice: "required"``), ``pask tag --format json``, ``pask generate --show-kept
--format json`` (method ``full``: every prompt token is kept, so every row is compared) and the tag
log of a real server (the session's ``pask_server``: the tiny random model with its prior policy
and ``--pask-tag-log``; one server fewer to start than a server of its own) agree token for token,
ids and classes; the server's log also says its ids are the ones SGLang ran and the usage
counts them, so ``pask generate`` and the server run the same prompt tokens.

The CLIs run in-process (one model, one tokenizer load per call) except one real subprocess each.
"""

from __future__ import annotations

import contextlib
import io
import json
import time

import pytest
from conftest import TINY_RANDOM, run_python

openai = pytest.importorskip("openai")

MODEL = TINY_RANDOM  # what the session's pask_server serves
N = 50


def _bodies() -> list[dict]:
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.tiny.examples import request_body

    out = []
    for k, entry in enumerate(generate("eval", N, profile="tiny")):
        body, _ = request_body(entry)
        body["tool_choice"] = "required"
        if k % 2:  # what the eval backends send; must reach the template (SGLang passes it)
            body["chat_template_kwargs"] = {"enable_thinking": False}
        out.append(body)
    return out


@pytest.fixture(scope="module")
def server_prompts(pask_server):
    """(bodies, per body: the tag log's prompt record and the usage's prompt_tokens)."""
    from sglang_pask.srt.managers import tag_log

    bodies = _bodies()
    client = openai.OpenAI(base_url=pask_server.base_url, api_key="none", timeout=120)
    sent = []
    for body in bodies:
        extra = {"chat_template_kwargs": body["chat_template_kwargs"]} if "chat_template_kwargs" in body else {}
        r = client.chat.completions.create(
            model="default", max_tokens=1, temperature=0, messages=body["messages"],
            tools=body["tools"], tool_choice=body["tool_choice"], extra_body=extra or None)
        sent.append((r.id, r.usage.prompt_tokens))
    deadline = time.monotonic() + 20
    while True:  # the shared log holds other tests' requests too: records are looked up by id
        records = tag_log.read(pask_server.tag_log)
        if all("prompt" in records.get(rid, {}) for rid, _ in sent) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return bodies, [(records.get(rid, {}).get("prompt"), n) for rid, n in sent]


def _main(argv: list[str]) -> str:
    from sglang_pask.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    assert rc == 0, argv
    return buf.getvalue()


def _first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"token {i}: {x} vs {y}"
    return f"lengths {len(a)} vs {len(b)}"


def test_pask_tag_pask_generate_and_the_server_agree(server_prompts, tmp_path):
    from sglang_pask.structure import StructClass

    bodies, prompts = server_prompts
    assert len(bodies) == N
    for k, (body, (rec, usage_tokens)) in enumerate(zip(bodies, prompts)):
        assert rec is not None, f"request {k}: no prompt record in the server's tag log"
        assert "token ids differ from the ids SGLang runs" not in rec["notes"], \
            f"request {k}: the server's tagged prompt is not the prompt SGLang ran"
        assert len(rec["token_ids"]) == len(rec["classes"]) == usage_tokens, f"request {k}"
        server = [(i, StructClass(c).name) for i, c in zip(rec["token_ids"], rec["classes"])]

        req = tmp_path / f"req{k}.json"
        req.write_text(json.dumps(body))
        tag_argv = ["tag", "--model", str(MODEL), "--request", str(req), "--format", "json"]
        gen_argv = ["generate", "--model", str(MODEL), "--request", str(req), "--method", "full",
                    "--max-new-tokens", "1", "--show-kept", "--format", "json"]
        if k == 0:  # one real subprocess of each CLI
            procs = [run_python("-m", "sglang_pask.cli", *argv, timeout=300) for argv in (tag_argv, gen_argv)]
            for p in procs:
                assert p.returncode == 0, p.stderr[-2000:]
            tag_out, gen_out = procs[0].stdout, procs[1].stdout
        else:
            tag_out, gen_out = _main(tag_argv), _main(gen_argv)

        rows = [json.loads(line) for line in tag_out.splitlines() if line.strip()]
        assert [r["i"] for r in rows] == list(range(len(rows))) and all(r["part"] == "prompt" for r in rows)
        tagged = [(r["id"], r["class"]) for r in rows]
        assert tagged == server, f"request {k}: pask tag vs server, {_first_difference(tagged, server)}"

        gen = json.loads(gen_out)
        assert gen["prompt_ids"] == rec["token_ids"], \
            f"request {k}: pask generate vs server prompt ids, {_first_difference(gen['prompt_ids'], rec['token_ids'])}"
        for group, kept in gen["kept_tokens"].items():
            kept_prompt = [{**r, "part": "prompt"} for r in kept if r["part"].endswith(", prompt")]
            assert kept_prompt == rows, \
                f"request {k}, group {group}: pask generate --show-kept vs pask tag, " \
                f"{_first_difference(kept_prompt, rows)}"
