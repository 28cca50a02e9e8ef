"""End to end against a live server (the shared session ``pask_server``: tiny random model,
started on a free port and stopped by PID by sglang_pask.testing): `pask eval --backend openai`
finishes and writes every output. Random weights: accuracy is whatever it is (near zero)."""

import json

from eval_checks import recheck
from sglang_pask import cli
from sglang_pask.testing import free_port


def test_openai_backend_synthetic(pask_server, tmp_path):
    out = tmp_path / "run"
    argv = [
        "eval",
        "--data",
        "synthetic:eval:4",
        "--backend",
        "openai",
        "--base-url",
        pask_server.base_url,
        "--max-tokens",
        "16",
        "--workers",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert cli.main(argv) == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 4
    for rec in map(json.loads, lines):
        assert rec["raw"] is not None and rec["meta"]["completion_tokens"] <= 16
        assert not rec["valid"] and rec["error_type"]  # random weights in 16 tokens: wrong, with a reason
    recheck([json.loads(line) for line in lines], "synthetic:eval:4")
    s = json.loads((out / "summary.json").read_text())
    assert s["complete"] and sum(v["n"] for v in s["categories"].values()) == 4
    assert s["config"]["backend"] == "openai" and s["config"]["model"]
    assert (out / "summary.md").read_text().startswith("**data=synthetic:eval:4")
    # resume: nothing left to do, files unchanged
    assert cli.main(argv) == 0
    assert len((out / "results.jsonl").read_text().splitlines()) == 4


def test_openai_backend_no_server(tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    argv = [
        "eval",
        "--data",
        "synthetic:eval:2",
        "--backend",
        "openai",
        "--base-url",
        url,
        "--no-progress",
        "--out",
        str(tmp_path / "run"),
    ]
    assert cli.main(argv) == 2
    assert "cannot reach the server" in capsys.readouterr().err


def test_openai_backend_hints_v1(pask_server, tmp_path, capsys):
    """A base URL without /v1 gets the hint, in one line."""
    argv = ["eval", "--data", "synthetic:eval:2", "--backend", "openai", "--base-url", pask_server.url,
            "--no-progress", "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"answered HTTP 404 (OpenAI-compatible servers answer under /v1: try --base-url "
                        f"{pask_server.url}/v1)") and len(err.splitlines()) == 1, err
