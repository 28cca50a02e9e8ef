"""Methods that read attention statistics, served for real: a live server (the trained tiny
model, radix cache off) answers three synthetic requests through the openai client, and the
reference runner generates for the same bodies at the same method, budget and schedule
(``bench/server_parity.py``, which starts and stops the server). SnapKV (per KV head, its default),
KVzip (its scores from the server's reconstruction forward), the sturdier calibration's 0.33 PASK
policy that blends KVzip's scores, AdaKV, the attention-informed PASK policy at 0.33 (one set per
group) and the same policy with ``head_split`` (one set per KV head in each group), and the ranked
calibration's 0.2 policy (four one-layer groups, its residual split across groups and KV heads by
one ranking of KVzip's scores blended with class order; each KV head keeps its own count) under
``prefill``: every compression keeps the same positions per unit in both engines -- for the
per-head methods, also each KV head's own set (the server's :mod:`sglang_pask.srt.attention.head_masks`) --
and the generated tokens are the same. KVzap (the shipped tiny-model scorer, ``--pask-scorer``)
at 0.33 and 0.2 on train-split requests (what the scorer was fitted on): its predictions come from
the prefill forward the server runs anyway, and their cost is in ``/server_info``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.server
ATTN = ROOT / "experiments/policies/pask-tiny-fc.attn.b0.33.json"
#: the sturdier calibration's 0.33 policy: its residual blends KVzip's reconstruction scores
KVZIP_INFORMED = ROOT / "experiments/policies/pask-tiny-fc.sturdy-attn.b0.33.json"
#: the ranked calibration's 0.2 policy (residual_split: scores, per KV head)
RANKED = ROOT / "experiments/policies/pask-tiny-fc.ranked.b0.2.json"

CASES = {
    "snapkv": ["--method", "snapkv"],
    "kvzip": ["--method", "kvzip"],
    "pask-kvzip-informed": ["--method", "pask", "--policy", str(KVZIP_INFORMED)],
    "adakv": ["--method", "adakv"],
    "pask-attention-informed": ["--method", "pask", "--policy", str(ATTN)],
    "pask-attention-informed-per-head": ["--method", "pask", "--policy", "{heads}"],
    "pask-ranked": ["--method", "pask", "--policy", str(RANKED)],
}
PER_HEAD = {"snapkv", "kvzip", "adakv", "pask-attention-informed-per-head", "pask-ranked"}
#: each case's budget (default 0.33): a calibrated policy at the budget it was calibrated for
BUDGET = {"pask-ranked": "0.2"}


@pytest.mark.parametrize("name", list(CASES))
def test_server_keeps_what_the_runner_keeps(name, tmp_path):
    out = tmp_path / "parity"
    heads = tmp_path / "attn-per-head.json"  # the calibrated policy, its residual split per KV head
    heads.write_text(json.dumps({**json.loads(ATTN.read_text()), "head_split": True}))
    args = [a.format(heads=heads) for a in CASES[name]]
    r = subprocess.run([sys.executable, "bench/server_parity.py", *args, "--n", "3",
                        "--budgets", BUDGET.get(name, "0.33"), "--schedule", "prefill", "--no-full",
                        "--max-tokens", "64", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (result,) = json.loads((out / "results.json").read_text())
    s = result["summary"]
    assert s["requests"] == 3 and s["compressions_compared"] == 3, s
    assert s["kept_identical"] == 3, result["rows"]
    assert s["tokens_identical"] == 3, result["rows"]
    assert s["per_head_compressions"] == (3 if name in PER_HEAD else 0), s


def test_kvzip_scores_prompts_whose_repeat_runs_past_the_models_positions(tmp_path):
    """Two requests padded with train-split tools to >= 1,100 prompt tokens: KVzip's repeat runs
    at positions up to about 2,250, past the tiny model's 2,048 (`max_position_embeddings`), so
    the server grows SGLang's rotary table as the runner computes RoPE; every request is
    compressed at prefill end (a failed scoring would leave it uncompressed: a difference) and
    keeps what the runner keeps."""
    out = tmp_path / "long"
    r = subprocess.run([sys.executable, "bench/server_parity.py", "--method", "kvzip", "--n", "2", "--budgets", "0.33",
                        "--schedule", "prefill", "--no-full", "--max-tokens", "32", "--min-prompt-tokens", "1100",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (result,) = json.loads((out / "results.json").read_text())
    s = result["summary"]
    assert s["compressions_compared"] == 2 and s["kept_identical"] == 2 and s["tokens_identical"] == 2, result["rows"]
    assert ">= 1100 prompt tokens" in (out / "report.md").read_text()


SCORER = ROOT / "policies/pask-tiny-fc.kvzap.safetensors"


@pytest.mark.parametrize("budget, schedule", [("0.33", "prefill"), ("0.2", "prefill"), ("0.33", "continuous")])
def test_kvzap_keeps_what_the_runner_keeps(budget, schedule, tmp_path):
    """Under ``continuous`` (every 4th decode step) the decode tokens are scored too, each in its
    own one-token forward, and rank exactly as the runner's (the scorer is row-stable)."""
    out = tmp_path / "kvzap"
    r = subprocess.run([sys.executable, "bench/server_parity.py", "--method", "kvzap", "--scorer", str(SCORER),
                        "--data", "synthetic:train:3:tiny", "--budgets", budget, "--schedule", schedule,
                        "--interval", "4", "--no-full", "--max-tokens", "64", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (result,) = json.loads((out / "results.json").read_text())
    s = result["summary"]
    n = s["compressions_compared"]
    assert s["requests"] == 3 and s["per_head_compressions"] == n, s
    assert n == 3 if schedule == "prefill" else n > 3, s
    assert s["kept_identical"] == 3 and s["tokens_identical"] == 3, result["rows"]
    cost = result["server_cost"]
    # every request compressed at prefill end (the server's warm-up request too), none failed
    assert cost["compression"]["errors"] == 0 and cost["compression"]["requests_compressed"] >= 3, cost
    scored = cost["learned_scorer"]  # every prompt token scored in its prefill forward; decode tokens when read
    assert scored["missed"] == 0 and scored["decode"] == (schedule != "prefill") and scored["tokens"] > 300, scored
    assert cost["reconstruction"]["forwards"] == 0  # no extra forward


@pytest.mark.parametrize("policy, budget", [("policies/pask-tiny-fc.b0.2.json", "0.2"),
                                            ("policies/pask-tiny-fc.b0.33.json", "0.33")])
def test_learned_policies_compress_batched_and_keep_what_the_runner_keeps(policy, budget, tmp_path):
    """PASK whose residual reads the learned scorer group-wide (the shipped 0.2 policy, the learned
    0.33 one): the server compresses the due requests together (their predictions read in one
    gather: ``compression_time.batched``, no fallback to one by one) and keeps, per unit, exactly
    what the runner keeps."""
    out = tmp_path / "learned"
    r = subprocess.run([sys.executable, "bench/server_parity.py", "--method", "pask", "--policy", str(ROOT / policy),
                        "--n", "4", "--budgets", budget, "--schedule", "prefill", "--no-full", "--max-tokens", "48",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (result,) = json.loads((out / "results.json").read_text())
    s, cost = result["summary"], result["server_cost"]
    assert s["compressions_compared"] == 4 and s["kept_identical"] == 4 and s["tokens_identical"] == 4, result["rows"]
    assert cost["compression_time"]["batched"] is True, cost
    assert cost["compression"]["errors"] == cost["compression"]["batch_fallbacks"] == 0, cost
    assert cost["learned_scorer"]["missed"] == 0
    # the decode steps between compressions grew the held-slot index from the step before (and the
    # tokens above equal the runner's): built whole after each compression, appended otherwise
    assert cost["decode_index"]["appended"] > 0 and cost["decode_index"]["built"] > 0, cost
