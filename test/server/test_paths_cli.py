"""A missing model folder, policy or request file is one line naming the flag, before anything
heavy loads (no torch, no SGLang imported), for ``pask`` and for the server launcher. The wall
time is printed (0.1-0.5 s on 2 cores); what the test asserts is that nothing heavy was imported."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import ROOT
from sglang_pask.paths import argv_values, file_error, model_dir_error

MODEL = str(ROOT / "models" / "pask-tiny-fc")
POLICY = str(ROOT / "policies" / "pask-tiny-fc.b0.33.json")

#: (argv after the interpreter, the flag the one line must name)
CASES = {
    "tag model": (["-m", "sglang_pask.cli", "tag", "--model", "/nonexistent", "--request", POLICY],
                  "--model /nonexistent"),
    "tag model typo": (["-m", "sglang_pask.cli", "tag", "--model", "models/pask-tiny-fcx", "--request", POLICY],
                       "--model models/pask-tiny-fcx: no such model folder"),
    "generate request": (["-m", "sglang_pask.cli", "generate", "--model", MODEL, "--request", "/tmp/none.json"],
                         "--request /tmp/none.json: no such file"),
    "generate policy": (["-m", "sglang_pask.cli", "generate", "--model", MODEL, "--request", POLICY,
                         "--method", "pask", "--policy", "nope.json"], "--policy nope.json: no such file"),
    "eval hf model": (["-m", "sglang_pask.cli", "eval", "--backend", "hf", "--model", "/nope",
                       "--data", "synthetic:eval:2:tiny", "--out", "/tmp/pask-never"], "--model /nope"),
    "launcher model": (["-m", "sglang_pask.launch_server", "--model-path", "/nonexistent"],
                       "--model-path /nonexistent: no such model folder"),
    "launcher policy": (["-m", "sglang_pask.launch_server", "--model-path", MODEL, "--pask-policy=/tmp/no.json"],
                        "--pask-policy: policy file '/tmp/no.json' does not exist"),
}
#: run after the command in the same interpreter: nothing heavy was imported
PROBE = ("import runpy, sys\nsys.argv = [{mod!r}, *{args!r}]\ntry:\n    runpy.run_module({mod!r}, "
         "run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\nheavy = [m for m in ('torch', "
         "'sglang', 'transformers') if m in sys.modules]\nprint('HEAVY', heavy, file=sys.stderr)\nsys.exit(code)\n")


@pytest.mark.parametrize("name", list(CASES))
def test_bad_path_is_one_line_before_heavy_imports(name):
    argv, expected = CASES[name]
    mod, args = argv[1], argv[2:]
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", PROBE.format(mod=mod, args=args)], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    wall = time.monotonic() - t0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    print(f"{name}: rc {r.returncode}, {wall:.2f} s: {lines[0] if lines else ''}")
    assert r.returncode == 2 and r.stdout == ""
    assert len(lines) == 2 and expected in lines[0] and "error:" in lines[0], r.stderr
    assert lines[1] == "HEAVY []", lines[1]  # what makes it fast: checked before torch/SGLang load
    assert wall < 10.0  # a sanity bound, not a speed target (measured: 0.1-0.5 s; printed above)


def test_path_rules(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    assert "no config.json" in model_dir_error(str(tmp_path / "m"))
    (tmp_path / "m" / "config.json").write_text("{}")
    assert model_dir_error(str(tmp_path / "m")) is None
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert "not in the local Hugging Face cache" in model_dir_error("Qwen/Qwen3-4B")  # nothing to load it from
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-4B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    assert model_dir_error("Qwen/Qwen3-4B") is not None  # a snapshot without config.json
    (snap / "config.json").write_text("{}")
    assert model_dir_error("Qwen/Qwen3-4B") is None  # a hub id the cache holds: left to the loader
    assert "no such model folder" in model_dir_error("models/typo")  # `models` is a local folder
    assert "not a folder" in model_dir_error(POLICY)
    assert file_error(POLICY, "--policy") is None and "is a folder" in file_error(str(tmp_path), "--policy")
    assert argv_values(["--a", "1", "--a=2", "--ab", "3"], "--a") == ["1", "2"]
