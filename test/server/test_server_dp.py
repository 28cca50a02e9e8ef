"""Scale-out on SGLang's own machinery: ``--dp-size 2`` with a policy runs two schedulers (SGLang's
DataParallelController, round-robin), each applying the seam in its own process, holding its own
per-unit pools and compressing its own requests. ``/server_info`` has one
``internal_states`` entry per DP rank; both must report compressions and no error.

On CPU, SGLang binds each rank to a NUMA node and refuses more ranks than nodes unless
``SGLANG_CPU_OMP_THREADS_BIND`` splits the cores (one ``|``-separated group per rank); the test
sets it when it is not set.
"""

from __future__ import annotations

import os

import pytest
from conftest import ROOT

openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")

from sglang_pask.testing import running_server  # noqa: E402

MODEL = ROOT / "models" / "pask-tiny-fc"
POLICY = ROOT / "policies" / "pask-tiny-fc.b0.33.json"
DP = 2


def _cpu_bind(ranks: int) -> str:
    """``0-3|4-7``: the cores this process may use, split into ``ranks`` groups."""
    cores = sorted(os.sched_getaffinity(0))
    size = max(len(cores) // ranks, 1)
    groups = [cores[min(r * size, len(cores) - 1):][:size] for r in range(ranks)]
    return "|".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups)


def test_cpu_bind():
    bind = _cpu_bind(2)
    assert bind.count("|") == 1 and all(part for part in bind.split("|"))


def test_two_data_parallel_workers_each_compress():
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.tiny.examples import request_body

    bodies = [request_body(e)[0] for e in generate("eval", 12, profile="tiny", start=0) if len(e.ground_truth) == 1][:4]
    env = {} if os.environ.get("SGLANG_CPU_OMP_THREADS_BIND") else {"SGLANG_CPU_OMP_THREADS_BIND": _cpu_bind(DP)}
    args = ["--pask-policy", str(POLICY), "--dp-size", str(DP), "--max-total-tokens", "8192", "--sleep-on-idle"]
    with running_server(str(MODEL), extra_args=args, env=env) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="none")
        for body in bodies:  # sequential: the controller's round robin gives each rank two
            resp = client.chat.completions.create(
                model="default", messages=body["messages"], tools=body["tools"], tool_choice="required",
                parallel_tool_calls=False, max_tokens=64, temperature=0)
            assert resp.choices[0].message.tool_calls, resp.choices[0].message
        info = requests.get(f"{srv.url}/server_info", timeout=30).json()
    states = info["internal_states"]
    print("per rank:", [s["pask"]["compression"] for s in states])
    assert len(states) == DP, f"{len(states)} internal states for --dp-size {DP}"
    for rank, state in enumerate(states):
        pask = state["pask"]
        assert pask["compression"]["compressions"] > 0 and pask["compression"]["errors"] == 0, (rank, pask)
        assert pask["pools"]["dropped_total"] > 0, (rank, pask["pools"])
