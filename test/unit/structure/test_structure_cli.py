"""``pask tag`` end to end (in-process) with the tiny model. That its tokens and classes equal the
server's rendering is shown against a live server in ``test_rendering_agree.py``."""

import json

import pytest
from sglang_pask import cli
from sglang_pask.structure.testing import TINY_MODEL

REQUEST = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Weather in \"Paris\" in celsius?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get weather",
               "parameters": {"type": "object", "properties": {
                   "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "f"]}},
                   "required": ["city"]}}}],
}
OUTPUT = 'Ok.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'


@pytest.fixture()
def req_file(tmp_path):
    p = tmp_path / "req.json"
    p.write_text(json.dumps(REQUEST))
    return p


def _run(args, capsys):
    rc = cli.main(["tag", "--model", str(TINY_MODEL)] + args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_format_one_row_per_token(req_file, capsys):
    rc, out, _ = _run(["--request", str(req_file), "--output", OUTPUT, "--format", "json"], capsys)
    assert rc == 0
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [r["i"] for r in rows] == list(range(len(rows)))
    assert set(rows[0]) == {"i", "id", "token", "start", "end", "class", "part"}
    assert all(isinstance(r["id"], int) for r in rows)
    outs = [r for r in rows if r["part"] == "output"]
    assert "".join(r["token"] for r in outs) == OUTPUT
    by_token = {r["token"]: r["class"] for r in outs}
    assert by_token["Paris"] == "OUT_VALUE_STR" and by_token["<tool_call>"] == "OUT_TOOL_TAG"
    prompt = [r for r in rows if r["part"] == "prompt"]
    assert any(r["class"] == "TOOL_NAME" for r in prompt)


def test_text_and_html_formats(req_file, capsys):
    rc, out, _ = _run(["--request", str(req_file), "--format", "text"], capsys)
    assert rc == 0 and "\x1b[48;2;" in out and "legend:" in out and "TOOL_NAME" in out
    rc, out, _ = _run(["--request", str(req_file), "--output", OUTPUT, "--format", "html"], capsys)
    assert rc == 0 and out.startswith("<!doctype html>") and "OUT_FUNC_NAME" in out


def test_bad_request_names_the_path(tmp_path, capsys):
    bad = dict(REQUEST, tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "dict"}}}}}])
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    rc, _, err = _run(["--request", str(p)], capsys)
    assert rc == 2 and "tools[0].function.parameters.properties.x.type" in err
    p.write_text("{not json")
    rc, _, err = _run(["--request", str(p)], capsys)
    assert rc == 2 and "cannot read request" in err

