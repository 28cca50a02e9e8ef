"""Live: with a policy on, a request's prompt and output tags read back from the running server
(its tag log) equal ``pask tag`` on the same request and the same generated tokens."""

from __future__ import annotations

import contextlib
import io
import json
import time

import pytest
from conftest import TINY_RANDOM

from .test_server_openai import COLOR_SCHEMA, WEATHER_TOOL

openai = pytest.importorskip("openai")


def _record(folder: str, rid: str, timeout: float = 20.0) -> dict:
    from sglang_pask.srt.managers import tag_log

    deadline = time.monotonic() + timeout
    while True:
        rec = tag_log.read(folder).get(rid, {})
        if "prompt" in rec and "output" in rec or time.monotonic() > deadline:
            return rec
        time.sleep(0.2)


def _pask_tag(tmp_path, body: dict, output_ids: list[int]) -> list[dict]:
    from sglang_pask.cli import main

    req = tmp_path / "req.json"
    req.write_text(json.dumps(body))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["tag", "--model", str(TINY_RANDOM), "--request", str(req),
                   "--output-ids", json.dumps(output_ids), "--format", "json"])
    assert rc == 0
    return [json.loads(line) for line in buf.getvalue().splitlines()]


BODIES = {
    "tool_call": {
        "messages": [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "Weather in Paris for 3 days, in celsius?"}],
        "tools": [WEATHER_TOOL], "tool_choice": "required", "parallel_tool_calls": False,
    },
    "json_schema": {
        "messages": [{"role": "user", "content": "Pick a color and a count of 4."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "pick", "schema": COLOR_SCHEMA}},
    },
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_server_tags_equal_pask_tag(pask_server, no_whitespace_bias, tmp_path, kind):
    from sglang_pask.structure import StructClass

    body = BODIES[kind]
    client = openai.OpenAI(base_url=pask_server.base_url, api_key="none", timeout=120)
    r = client.chat.completions.create(model="default", max_tokens=48, temperature=0,
                                       logit_bias=no_whitespace_bias, **body)
    rec = _record(pask_server.tag_log, r.id)
    assert set(rec) == {"prompt", "output"}, f"no complete tag record for {r.id}: {rec}"
    prompt, output = rec["prompt"], rec["output"]
    assert "token ids differ from the ids SGLang runs" not in prompt["notes"]
    assert len(prompt["classes"]) == len(prompt["token_ids"]) == r.usage.prompt_tokens
    # The grammar saw every generated token but possibly the last (EOS after termination, or the
    # token that hit max_tokens); the record says exactly which.
    assert output["output_ids"][: len(output["token_ids"])] == output["token_ids"]
    assert len(output["token_ids"]) >= len(output["output_ids"]) - 1
    assert len(output["classes"]) == len(output["token_ids"])

    rows = _pask_tag(tmp_path, body, output["token_ids"])
    cli_prompt = [row["class"] for row in rows if row["part"] == "prompt"]
    cli_output = [row["class"] for row in rows if row["part"] == "output"]
    assert cli_prompt == [StructClass(c).name for c in prompt["classes"]]
    assert cli_output == [StructClass(c).name for c in output["classes"]]
    # Sanity: the structure is really there.
    if kind == "tool_call":
        assert "TOOL_NAME" in cli_prompt and "PARAM_NAME" in cli_prompt
        assert "OUT_FUNC_NAME" in cli_output
    else:
        assert "OUT_ARG_KEY" in cli_output
