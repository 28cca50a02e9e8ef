"""``bench/gpu_check.sh``'s dry run on this CPU machine: it names every step of the device check
(env, build, tests, throws, ops, serving, FlashInfer vs SDPA, CUDA graphs, FlashInfer's decode
timing) as RUN or SKIP with its reason, runs nothing, and writes its report and meta.json; and the
test file that carries the FlashInfer and CUDA-graph checks is one the device check hands pytest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import ROOT


def test_dry_run_names_every_step_and_runs_nothing(tmp_path):
    out = tmp_path / "dry"
    env = {**os.environ, "DRY_RUN": "1", "PY": sys.executable, "OUT": str(out)}
    r = subprocess.run(["bash", "bench/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    steps = re.findall(r"^  (RUN|SKIP|NEVER) +(\S+) +(.+)$", r.stdout, re.M)
    names = {name for _, name, _ in steps}
    assert {"env", "build", "tests", "throws", "ops", "serving", "fi-attn", "graphs"} <= names, steps
    assert not [s for s in steps if s[0] == "NEVER"], steps  # every step is in the script now
    fi = [s for s in steps if s[1] in ("fi-attn", "graphs")]
    assert all("test_srt_flashinfer_gpu.py" in why for _, _, why in fi), fi
    have_fi = subprocess.run([sys.executable, "-c", "import importlib.util as u, sys; "
                              "sys.exit(u.find_spec('flashinfer') is None)"]).returncode == 0
    assert all(kind == ("RUN" if have_fi else "SKIP") for kind, _, _ in fi), fi
    if not have_fi:
        assert all("flashinfer missing" in why for _, _, why in fi), fi
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "report.md"]  # nothing else ran
    assert json.loads((out / "meta.json").read_text())["command"].startswith("DRY_RUN=1 ")
    assert (ROOT / "test/unit/srt/test_srt_flashinfer_gpu.py").is_file()
