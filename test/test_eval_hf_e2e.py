"""End to end: ``pask eval --backend hf`` (the in-process reference runner) on the tiny random model
finishes and writes every output, under PASK with the prior policy and under a baseline."""

from __future__ import annotations

import json

import pytest
from conftest import DEFAULT_POLICY, TINY_RANDOM
from sglang_pask import cli


@pytest.mark.parametrize("method_args", [["--method", "pask", "--policy", str(DEFAULT_POLICY)],
                                         ["--method", "streaming", "--budget", "0.33", "--tool-choice", "required"]],
                         ids=["pask-prior", "streaming-required"])
def test_hf_backend_writes_every_output(tmp_path, method_args):
    out = tmp_path / "run"
    argv = ["eval", "--data", "synthetic:eval:8", "--backend", "hf", "--model", str(TINY_RANDOM),
            "--max-tokens", "24", "--no-progress", "--out", str(out), *method_args]
    assert cli.main(argv) == 0
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == 8 and len({r["id"] for r in results}) == 8
    for r in results:
        assert r["raw"]["text"] is not None and r["meta"]["completion_tokens"] > 0
        assert r["meta"]["prompt_tokens"] > 100
        assert r["valid"] or r["error_type"]  # random weights: invalid, with a reason
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and sum(c["n"] for c in summary["categories"].values()) == 8
    assert summary["config"]["backend"] == "hf" and summary["config"]["method"] == method_args[1]
