"""Prompts longer than a KV unit pool holds whole, in a live server (issue 27; the rule:
:mod:`sglang_pask.methods.chunks`, the scheduler's part: :mod:`sglang_pask.srt.managers.chunked`).

Two servers of the tiny model with the tiny policy at b = 0.33 and ``--max-total-tokens 1200``
(per-unit pools of 396 slots), one with the chunked prefill rule at its default (chunks of a
quarter of a unit pool, 99 tokens), one with ``--pask-prefill-chunk 0``. A tool request whose
prompt is at least 1.5x a unit pool (built from train entries: the tools of consecutive entries
until it is that long):

* without the rule the server refuses it with the one-line message naming the unit pool;
* with it the server serves it, compressing at every chunk end (the counters say how many), and
  its kept positions at every compression (chunk ends, then prefill end) and its output tokens
  equal the reference runner's under the same :class:`~sglang_pask.methods.chunks.ChunkRule`;
* a short request in the same server is written whole (no chunk compression), so everything
  served before is served as before; every slot is free again when the server is idle.
"""

from __future__ import annotations

import math
import time

import pytest
from conftest import ROOT

openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")

from sglang_pask.testing import running_server  # noqa: E402
from srt_kit import long_tool_request  # noqa: E402

MODEL = ROOT / "models" / "pask-tiny-fc"
# the lookup 0.33 policy (the shipped 0.33 one adds a learned residual)
POLICY = ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.33.json"
BUDGET = 0.33
MAX_TOTAL = 1200
UNIT = math.ceil(BUDGET * MAX_TOTAL)
MAX_NEW = 48


def _pask(srv) -> dict:
    return requests.get(f"{srv.url}/server_info", timeout=30).json()["internal_states"][0]["pask"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoTokenizer

    logs = tmp_path_factory.mktemp("chunked")
    base = ["--pask-policy", str(POLICY), "--max-total-tokens", str(MAX_TOTAL), "--skip-server-warmup",
            "--sleep-on-idle"]
    specs = {"on": [*base, "--pask-kept-log", str(logs / "kept"), "--pask-tag-log", str(logs / "tags")],
             "off": [*base, "--pask-prefill-chunk", "0"]}
    managers = {k: running_server(str(MODEL), a) for k, a in specs.items()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(cm.__enter__) for k, cm in managers.items()}
    try:
        servers = {k: f.result() for k, f in futures.items()}
        tokenizer = AutoTokenizer.from_pretrained(str(MODEL))
        yield {"servers": servers, "logs": logs, "body": long_tool_request(tokenizer, math.ceil(1.5 * UNIT)),
               "tokenizer": tokenizer}
    finally:
        for k, cm in managers.items():
            if futures[k].exception() is None:
                cm.__exit__(None, None, None)


def _create(srv, body, **kw):
    client = openai.OpenAI(base_url=srv.base_url, api_key="none", timeout=300, max_retries=0)
    return client.chat.completions.create(model="default", messages=body["messages"], tools=body["tools"],
                                          tool_choice=body["tool_choice"], max_tokens=MAX_NEW, temperature=0,
                                          extra_body={"chat_template_kwargs": {"enable_thinking": False}}, **kw)


def test_refused_without_the_rule(setup):
    srv = setup["servers"]["off"]
    assert _pask(srv)["chunked_prefill"]["rule"] is None
    with pytest.raises(openai.BadRequestError) as err:
        _create(srv, setup["body"])
    msg = str(err.value)
    assert f"per-unit KV pool of {UNIT} slots" in msg, msg


def test_served_in_chunks_as_the_runner(setup):
    from sglang_pask.eval.parity import compare, runner_trace, server_traces
    from sglang_pask.hf import Runner
    from sglang_pask.methods.chunks import ChunkRule

    srv, body = setup["servers"]["on"], setup["body"]
    state = _pask(srv)
    rule = state["chunked_prefill"]["rule"]
    assert rule == {"size": UNIT // 4, "above": UNIT - 7, "room": UNIT - 2}, rule
    out = _create(srv, body)
    assert out.choices[0].message.tool_calls, out.choices[0].message
    prompt_tokens = out.usage.prompt_tokens
    assert prompt_tokens >= 1.5 * UNIT
    state = _pask(srv)
    ends = ChunkRule(**rule).ends(prompt_tokens)
    chunk_comps = state["chunked_prefill"]["chunk_compressions"]
    assert 0 < chunk_comps <= len(ends), state["chunked_prefill"]
    assert state["chunked_prefill"]["errors"] == 0 and state["compression"]["errors"] == 0
    time.sleep(1.0)  # the output record is written at release
    served = server_traces(str(setup["logs"] / "kept"), str(setup["logs"] / "tags"))
    runner = Runner(str(MODEL), method="pask", budget=BUDGET, policy=str(POLICY), grammar="sglang",
                    chunk_rule=ChunkRule(**rule))
    ref = runner_trace(runner, {**body, "chat_template_kwargs": {"enable_thinking": False}}, runner.groups, MAX_NEW)
    got = served.get(tuple(ref["prompt_ids"]))
    assert got is not None, "the server's record of the request is missing"
    at_ends = [c[1] for c in got["compressions"] if c[1] < prompt_tokens]  # chunk ends first, then prefill end
    assert len(at_ends) == chunk_comps and set(at_ends) <= set(ends) and got["compressions"][0][1] < prompt_tokens
    row = compare(got, ref)
    assert row["kept_equal"] and row["tokens_equal"], row
    print(f"prompt {prompt_tokens} tokens ({prompt_tokens / UNIT:.2f}x a unit pool of {UNIT}), chunks of "
          f"{rule['size']}: compressed at {at_ends} of the chunk ends {ends}; {row['compressions']} compressions "
          f"equal the runner's, {len(got['output_ids'])} output tokens equal; counters "
          f"{state['chunked_prefill']}")


def test_short_prompts_are_written_whole(setup):
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.tiny.examples import request_body

    srv = setup["servers"]["on"]
    before = _pask(srv)["chunked_prefill"]["chunk_compressions"]
    body = {**request_body(next(iter(generate("train", 1, profile="tiny"))))[0], "tool_choice": "required"}
    out = _create(srv, body)
    assert out.usage.prompt_tokens <= UNIT - 7
    state = _pask(srv)
    assert state["chunked_prefill"]["chunk_compressions"] == before
    deadline = time.monotonic() + 30
    while state["pools"]["unit_available"] != state["pools"]["unit_sizes"]:
        assert time.monotonic() < deadline, state["pools"]
        time.sleep(0.5)
        state = _pask(srv)
