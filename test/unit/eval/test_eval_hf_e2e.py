"""End to end: ``pask eval --backend hf`` (the in-process reference runner). On the tiny random model
it finishes and writes every output under PASK (prior policy) and a baseline, every record says
what the checker says of its raw output; on the shipped pask-tiny-fc, Full KV gets entries it is
known to answer right (measured: all of synthetic:eval:4:tiny, constrained) right."""

from __future__ import annotations

import json

import pytest
from conftest import DEFAULT_POLICY, ROOT, TINY_RANDOM
from eval_checks import recheck
from sglang_pask import cli
from sglang_pask.eval.data import load_spec


def _run(tmp_path, argv: list[str]) -> tuple[list[dict], dict]:
    out = tmp_path / "run"
    assert cli.main([*argv, "--no-progress", "--out", str(out)]) == 0
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return results, json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("method_args", [["--method", "pask", "--policy", str(DEFAULT_POLICY)],
                                         ["--method", "streaming", "--budget", "0.33", "--tool-choice", "required"]],
                         ids=["pask-prior", "streaming-required"])
def test_hf_backend_writes_every_output(tmp_path, method_args):
    data = "synthetic:eval:8"
    results, summary = _run(tmp_path, ["eval", "--data", data, "--backend", "hf", "--model", str(TINY_RANDOM),
                                       "--max-tokens", "24", *method_args])
    assert len(results) == 8 and len({r["id"] for r in results}) == 8
    for r in results:
        assert r["raw"]["text"] is not None and r["meta"]["completion_tokens"] > 0
        assert r["meta"]["prompt_tokens"] > 100
        assert not r["valid"] and r["error_type"]  # random weights in 24 tokens: wrong, with a reason
    recheck(results, data)
    assert summary["complete"] and sum(c["n"] for c in summary["categories"].values()) == 8
    assert summary["config"]["backend"] == "hf" and summary["config"]["method"]["name"] == method_args[1]


def test_full_kv_on_the_shipped_model_answers_known_entries_right(tmp_path):
    data = "synthetic:eval:4:tiny"  # one entry per category; Full KV answers all four (measured)
    results, summary = _run(tmp_path, ["eval", "--data", data, "--backend", "hf", "--model",
                                       str(ROOT / "models" / "pask-tiny-fc"), "--method", "full",
                                       "--tool-choice", "required", "--max-tokens", "128"])
    assert sorted((r["id"], r["valid"]) for r in results) == sorted((e.id, True) for e in load_spec(data))
    recheck(results, data)
    assert summary["mean"] == 1.0
