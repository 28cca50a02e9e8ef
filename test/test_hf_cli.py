"""``pask generate`` in-process on the committed tiny random model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sglang_pask.cli import main

TINY = str(Path(__file__).resolve().parent.parent / "models" / "tiny-random-qwen3")
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
