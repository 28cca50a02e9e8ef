"""Methods that read attention statistics, served for real: a live server (the trained tiny
model, radix cache off) answers three synthetic requests through the openai client, and the
reference runner generates for the same bodies at the same method, budget and schedule
(``bench/server_parity.py``, which starts and stops the server). SnapKV (per layer) and the
attention-informed PASK policy at 0.33 under ``prefill``: every compression keeps the same
positions per unit in both engines, and the generated tokens are the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "snapkv": ["--method", "snapkv"],
    "pask-attention-informed": ["--method", "pask", "--policy", "policies/pask-tiny-fc.attn.b0.33.json"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_server_keeps_what_the_runner_keeps(name, tmp_path):
    out = tmp_path / "parity"
    r = subprocess.run([sys.executable, "bench/server_parity.py", *CASES[name], "--n", "3", "--budgets", "0.33",
                        "--schedule", "prefill", "--no-full", "--max-tokens", "64", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (result,) = json.loads((out / "results.json").read_text())
    s = result["summary"]
    assert s["requests"] == 3 and s["compressions_compared"] == 3, s
    assert s["kept_identical"] == 3, result["rows"]
    assert s["tokens_identical"] == 3, result["rows"]
