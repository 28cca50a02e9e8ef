"""The in-process scoring API: ``sglang_pask.score`` gives exactly the records ``pask eval`` writes
(4 entries, one per category, pask-tiny-fc, streaming at 0.33, 32 new tokens: two calls pass and
two fail), run.json records what ran, and ``gold_nll`` is the plain-forward NLL at budget 1.0 and
grows when the cache is cut."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

FC = ROOT / "models" / "pask-tiny-fc"
DATA = "synthetic:eval:4:tiny"
N = 4


def _strip(rec: dict) -> dict:
    return {**rec, "meta": {k: v for k, v in rec["meta"].items() if k != "latency_s"}}


def test_score_in_process_equals_pask_eval(tmp_path):
    import sglang_pask

    out = tmp_path / "run"
    cli = subprocess.run(
        [str(Path(sys.executable).parent / "pask"), "eval", "--data", DATA, "--backend", "hf", "--model", str(FC),
         "--method", "streaming", "--budget", "0.33", "--schedule", "continuous", "--tool-choice", "required",
         "--max-tokens", "32", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert cli.returncode == 0, cli.stderr[-2000:]
    # in this process, from the model directory as the CLI was given it
    in_process = sglang_pask.score(str(FC), "streaming", DATA, budget=0.33,
                                   settings={"max_tokens": 32, "tool_choice": "required"})
    in_process = json.loads(json.dumps(in_process))  # as results.jsonl holds them
    on_disk = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(in_process) == N
    by_id = {r["id"]: _strip(r) for r in on_disk}
    assert [_strip(r) for r in in_process] == [by_id[r["id"]] for r in in_process]
    assert 0 < sum(r["valid"] for r in in_process) < N  # a measurement, not a constant

    run = json.loads((out / "run.json").read_text())
    assert run["method"]["name"] == "streaming" and run["method"]["budget"] == 0.33
    assert {"schedule", "interval", "sinks"} <= set(run["method"])  # every field of the method
    assert run["schedule"] == "continuous" and run["policy"] is None and run["method_options"] == {}
    assert run["model"]["path"] == str(FC) and run["model"]["fingerprint"].startswith("sha256:")
    assert run["data_spec"] == {"spec": DATA, "kind": "synthetic", "split": "eval", "n": N, "profile": "tiny"}
    assert run["tool_choice"] == "required" and run["max_tokens"] == 32
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["method"] == run["method"]


def test_method_options_are_parsed_and_recorded(tmp_path):
    from sglang_pask import cli

    out = tmp_path / "run"
    argv = ["eval", "--data", "synthetic:eval:1:tiny", "--backend", "hf", "--model", str(FC), "--method", "h2o",
            "--budget", "0.5", "--method-opt", "normalize=true", "--schedule", "prefill", "--max-tokens", "4",
            "--no-progress", "--out", str(out)]
    assert cli.main(argv) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["method"]["normalize"] is True and run["method"]["schedule"] == "prefill"
    assert run["method_options"] == {"normalize": True} and run["schedule"] == "prefill"
    assert cli.main([*argv[:-2], "--method-opt", "no_such_option=1", "--out", str(tmp_path / "bad")]) == 2


def test_parse_option_values():
    from sglang_pask.eval.records import method_label, parse_method_spec, parse_option

    assert parse_option("normalize=true") == ("normalize", True)
    assert parse_option("beta=5") == ("beta", 5) and parse_option("r=0.5") == ("r", 0.5)
    assert parse_option("pool=max") == ("pool", "max")
    assert parse_method_spec("snapkv:window=32:per_head=true") == ("snapkv", {"window": 32, "per_head": True})
    assert method_label("h2o", {"normalize": True}) == "h2o[normalize=true]"
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_option("normalize")


@pytest.fixture(scope="module")
def fc_runner():
    import sglang_pask

    return sglang_pask.load_runner(str(FC))


def _plain_nll(entry) -> tuple[float, int]:
    """NLL of the forced gold answer by one plain transformers forward over prompt + answer."""
    import torch
    from sglang_pask.eval.gold import forced_answer_text
    from sglang_pask.eval.harness import Settings, build_request
    from sglang_pask.eval.hf_backend import runner_body
    from sglang_pask.rendering import render_chat
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(FC))
    model = AutoModelForCausalLM.from_pretrained(str(FC), dtype=torch.float32).eval()
    request, _ = build_request(entry, Settings(tool_choice="required"))
    prompt = render_chat(tok, runner_body(request)).token_ids
    answer = tok(forced_answer_text(entry), add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + answer])).logits[0].double()
    logp = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
    return float(-logp[torch.arange(len(answer)), torch.tensor(answer)].sum()), len(answer)


def test_gold_nll_at_full_budget_is_the_plain_forward_and_grows_when_cut(fc_runner):
    import sglang_pask
    from sglang_pask.eval.data import load_spec

    entry = load_spec("synthetic:eval:4:tiny")[3]  # parallel_multiple: 2 docs, 3 calls
    settings = {"tool_choice": "required"}
    total, n = _plain_nll(entry)
    full = sglang_pask.gold_nll(fc_runner, "streaming", entry, budget=1.0, settings=settings)
    assert full.tokens == n and full.compressions == 0
    assert abs(full.total - total) < 1e-4 and abs(float(full) - total / n) < 1e-4
    cut = sglang_pask.gold_nll(fc_runner, "streaming", entry, budget=0.2, settings=settings)
    assert cut.mean > full.mean + 0.1 and math.isfinite(cut.total)
    once = sglang_pask.gold_nll(fc_runner, "streaming", entry, budget=0.2, schedule="prefill", settings=settings)
    assert once.compressions == 1 and cut.compressions > 1  # prefill compresses once, continuous keeps going
    assert once.total != cut.total


def test_prefill_schedule_teacher_forcing_in_one_forward_equals_the_loop(fc_runner):
    """Under ``prefill`` nothing is compressed after prefill end, so teacher forcing feeds the answer
    in one forward; ``continuous`` with an interval longer than the answer compresses at the same
    single point (step 0) and runs the token-by-token loop: the NLLs agree to float rounding."""
    import sglang_pask
    from sglang_pask.eval.data import load_spec

    settings = {"tool_choice": "required"}
    for entry in load_spec("synthetic:eval:4:tiny"):
        for method in ("snapkv", "streaming"):
            one = sglang_pask.gold_nll(fc_runner, method, entry, budget=0.33, schedule="prefill", settings=settings)
            loop = sglang_pask.gold_nll(fc_runner, method, entry, budget=0.33, schedule="continuous",
                                        interval=10_000, settings=settings)
            assert one.compressions == loop.compressions == 1 and one.tokens == loop.tokens > 1
            assert abs(one.total - loop.total) < 1e-4, (entry.id, method, one, loop)  # measured: <= 1.1e-5
