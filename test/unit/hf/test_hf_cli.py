"""``pask generate`` in-process on the committed tiny random model."""

from __future__ import annotations

import json

import pytest
from conftest import TINY_RANDOM
from sglang_pask.cli import main

TINY = str(TINY_RANDOM)
REQ = {"messages": [{"role": "user", "content": "What is the weather in Paris in celsius?"}],
       "tools": [{"type": "function", "function": {
           "name": "get_weather", "description": "Current weather",
           "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["unit"]}}}],
       "tool_choice": "required", "max_tokens": 12}


@pytest.fixture()
def req(tmp_path):
    p = tmp_path / "req.json"
    p.write_text(json.dumps(REQ))
    return str(p)


def test_generate_json(req, capsys):
    assert main(["generate", "--model", TINY, "--request", req, "--method", "streaming",
                 "--budget", "0.33", "--format", "json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert set(obj) == {"text", "tool_calls", "kept", "tokens", "prompt_ids"}
    assert all(isinstance(i, int) for i in obj["prompt_ids"])
    assert obj["tokens"] == 12 and obj["text"].startswith("<tool_call>")
    groups = obj["kept"]
    assert set(groups) == {"0", "1", "2", "3"}  # 4 layers -> 4 default groups
    assert all(p == sorted(p) for p in groups.values())


def test_generate_show_kept_views(req, capsys):
    args = ["generate", "--model", TINY, "--request", req, "--method", "streaming", "--budget", "0.33",
            "--max-new-tokens", "4", "--show-kept"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "== group 0 (layer 0)" in out and "⋯" in out and "legend:" in out
    assert main(args + ["--format", "json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    rows = obj["kept_tokens"]["0"]
    assert [r["i"] for r in rows] == obj["kept"]["0"] and {"token", "class", "part"} <= set(rows[0])
    assert main(args + ["--format", "html"]) == 0
    assert capsys.readouterr().out.startswith("<!doctype html>")


def test_generate_errors(req, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["generate", "--model", TINY, "--request", str(bad)]) == 2
    assert main(["generate", "--model", TINY, "--request", req, "--method", "pask"]) == 2  # no policy
    assert main(["generate", "--model", TINY, "--request", req, "--method", "full", "--budget", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "must be a JSON object" in err and "needs a policy" in err and "budget is 1.0" in err
    with pytest.raises(SystemExit):  # argparse: choices come from the methods registry
        main(["generate", "--model", TINY, "--request", req, "--method", "nope"])


@pytest.mark.parametrize("schedule", ["prefill", "continuous"])
def test_generate_schedule_flag(req, capsys, schedule):
    """--schedule reaches the method: prefill keeps floor(b*L*P) prompt slots and every output
    token; continuous holds floor(b*L*T) slots of all T tokens at the end."""
    assert main(["generate", "--model", TINY, "--request", req, "--method", "streaming", "--budget", "0.33",
                 "--schedule", schedule, "--format", "json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    P, L = len(obj["prompt_ids"]), len(obj["kept"])
    T = P + obj["tokens"] - 1  # the last token is never forwarded
    kept = [set(k) for k in obj["kept"].values()]
    prompt_slots = sum(sum(1 for p in k if p < P) for k in kept)
    if schedule == "prefill":
        assert prompt_slots == int(0.33 * L * P + 1e-9)
        assert all(set(range(P, T)) <= k for k in kept)
    else:
        assert sum(map(len, kept)) == int(0.33 * L * T + 1e-9)


def test_generate_method_opt_errors(req, capsys):
    assert main(["generate", "--model", TINY, "--request", req, "--method", "snapkv", "--budget", "0.33",
                 "--method-opt", "kernel=3"]) == 2
    assert "has no option 'kernel' (its options:" in capsys.readouterr().err
    assert main(["generate", "--model", TINY, "--request", req, "--method-opt", "window"]) == 2
    assert "not KEY=VALUE" in capsys.readouterr().err
