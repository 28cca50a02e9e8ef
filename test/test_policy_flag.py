"""--pask-policy through SGLang's own argument parsing: accepted when valid, and a missing file,
invalid JSON, an unknown format, a schema violation or a policy bound to another model each stop
the launcher before anything starts, with one line naming the file and the problem."""

from __future__ import annotations

import json
import time

import pytest
from conftest import DEFAULT_POLICY, TINY_RANDOM, run_python


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        (json.dumps({"format": "pask-policy/99"}),
         "has unknown format 'pask-policy/99' (supported: pask-policy/2, pask-policy/1)"),
        (json.dumps({"name": "x"}), "has no \"format\" field"),
        (json.dumps([1, 2]), "must hold a JSON object, got list"),
    ],
    ids=["missing", "invalid-json", "unknown-format", "no-format", "not-object"],
)
def test_bad_policy_fails_fast(tmp_path, content, problem):
    path = tmp_path / "policy.json"
    if content is not None:
        path.write_text(content)
    _assert_fails_fast(path, problem)


def _default_doc() -> dict:
    return json.loads(DEFAULT_POLICY.read_text())


def _other_shape() -> dict:
    doc = _default_doc()
    doc["model"] = {**doc["model"], "num_layers": 8, "num_kv_heads": 4}
    doc["groups"] = [[0, 1, 2, 3], [4, 5, 6, 7]]
    return doc


def _bad_floor() -> dict:
    doc = _default_doc()
    doc["floor"][1]["TOOL_NAME"] = 1.5
    return doc


@pytest.mark.parametrize(
    "make, problem",
    [
        (_other_shape, "is for a model of shape layers=8 kv_heads=4 head_dim=32 vocab=4096, but model "
                       f"{str(TINY_RANDOM)!r} has shape layers=4 kv_heads=2 head_dim=32 vocab=4096"),
        (_bad_floor, 'floor[1]["TOOL_NAME"] = 1.5 is outside [0, 1]'),
    ],
    ids=["other-model-shape", "schema-floor"],
)
def test_policy_schema_and_binding_fail_fast(tmp_path, make, problem):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(make()))
    _assert_fails_fast(path, problem)


def _assert_fails_fast(path, problem):
    t0 = time.monotonic()
    r = run_python(
        "-m", "sglang_pask.launch_server", "--model-path", str(TINY_RANDOM),
        "--port", "1", "--pask-policy", str(path),
    )
    elapsed = time.monotonic() - t0
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --pask-policy: policy file ")
    assert str(path) in last and problem in last, last
    assert "Traceback" not in r.stderr
    assert elapsed < 60, f"took {elapsed:.1f}s: not fast"


def test_valid_policy_reaches_server_args_and_subprocesses():
    code = (
        "import os, pickle, sys\n"
        "from sglang.srt.plugins import load_plugins\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "load_plugins()\n"
        f"sa = prepare_server_args(['--model-path', {str(TINY_RANDOM)!r}, '--pask-policy', {str(DEFAULT_POLICY)!r}])\n"
        "sa2 = pickle.loads(pickle.dumps(sa))\n"
        "print(sa._pask_policy); print(sa2._pask_policy); print(os.environ['SGLANG_PASK_POLICY'])\n"
        f"sa3 = prepare_server_args(['--model-path', {str(TINY_RANDOM)!r}])\n"
        "print(getattr(sa3, '_pask_policy', None))\n"
    )
    r = run_python("-c", code, env={"SGLANG_PASK_POLICY": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()[-4:]
    assert lines == [str(DEFAULT_POLICY)] * 3 + ["None"]


def test_plugin_registered_as_entry_point():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert eps.get("pask") == "sglang_pask.srt.plugin:register"


@pytest.mark.parametrize("with_policy", [False, True], ids=["no-policy", "policy"])
def test_pask_hooks_only_with_policy(with_policy):
    argv = ["--model-path", str(TINY_RANDOM)] + (["--pask-policy", str(DEFAULT_POLICY)] if with_policy else [])
    code = (
        "from sglang.srt.plugins import load_plugins\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "load_plugins()\n"
        f"prepare_server_args({argv!r})\n"
        "from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar\n"
        "import sglang.srt.mem_cache.common as common\n"
        "print(hasattr(XGrammarGrammar.accept_token, '__wrapped__'), hasattr(common.release_kv_cache, '__wrapped__'))\n"
    )
    r = run_python("-c", code, env={"SGLANG_PASK_POLICY": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == f"{with_policy} {with_policy}"


def test_tag_log_needs_policy(tmp_path):
    r = run_python("-m", "sglang_pask.launch_server", "--model-path", str(TINY_RANDOM),
                   "--pask-tag-log", str(tmp_path))
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == "error: --pask-tag-log needs --pask-policy"
