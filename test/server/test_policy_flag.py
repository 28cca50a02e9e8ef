"""--pask-policy: a missing file, invalid JSON, an unknown format, a schema violation or a policy
bound to another model each stop the launcher before SGLang is even imported, with one line naming
the file and the problem; so does --pask-tag-log without a policy. SGLang's own argument parsing
(the plugin, for ``python -m sglang.launch_server``) refuses with the same line and exit status,
and accepts a valid policy: it reaches ServerArgs and child processes, and only then are the PASK
hooks applied."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import DEFAULT_POLICY, TINY_RANDOM, run_python

#: a refusal before SGLang is imported (measured 0.2-1 s on 2 shared cores; an SGLang import is ~11 s)
REFUSAL_S = 5.0


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
    _assert_fails_fast(path, problem, equals=True)


def _launch(*argv: str):
    t0 = time.monotonic()
    r = run_python("-m", "sglang_pask.launch_server", "--model-path", str(TINY_RANDOM), "--port", "1", *argv)
    return r, time.monotonic() - t0


def _assert_fails_fast(path: Path, problem: str, equals: bool = False) -> str:
    """The launcher refuses ``path`` (``--pask-policy PATH``, or ``--pask-policy=PATH``) with one
    line, before SGLang loads; returns the line."""
    r, elapsed = _launch(f"--pask-policy={path}") if equals else _launch("--pask-policy", str(path))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == (1 if path.exists() else 2), (r.returncode, r.stderr[-2000:])  # 2: a path, as `pask`
    assert len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith(f"error: --pask-policy: policy file {str(path)!r}")
    assert problem in lines[0], lines[0]
    assert elapsed < REFUSAL_S, f"took {elapsed:.1f}s: SGLang was imported before the refusal?"
    return lines[0]


def test_tag_log_needs_policy(tmp_path):
    r, elapsed = _launch("--pask-tag-log", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == ["error: --pask-tag-log needs --pask-policy"]
    assert elapsed < REFUSAL_S, f"took {elapsed:.1f}s"


def test_the_launcher_reads_the_flags_as_argparse_does(tmp_path):
    """The launcher checks the policy against the model SGLang will serve (the last of
    --model-path / --model) and refuses every bad policy value given."""
    from sglang_pask.launch_server import _flag_error
    from sglang_pask.policy.flag import flag_error

    bad = tmp_path / "policy.json"
    bad.write_text(json.dumps(_other_shape()))
    other, tiny = "models/pask-tiny-fc", str(TINY_RANDOM)
    err = _flag_error(["--model-path", other, f"--model={tiny}", f"--pask-policy={bad}"])
    assert err is not None and err == flag_error(str(bad), tiny) != flag_error(str(bad), other)
    assert _flag_error(["--model", tiny, "--pask-policy", str(bad), "--pask-policy", str(DEFAULT_POLICY)]) == (
        flag_error(str(bad), tiny))
    assert _flag_error(["--model", tiny, "--pask-policy", str(DEFAULT_POLICY), "--pask-tag-log=x"]) is None
    assert _flag_error(["--model", tiny, "--pask-policy=", "--pask-tag-log=x"]) == (
        "error: --pask-tag-log needs --pask-policy")


def test_plugin_registered_as_entry_point():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert eps.get("pask") == "sglang_pask.srt.plugin:register"


#: SGLang's own argument parsing with the plugin loaded through its entry point, in one fresh
#: interpreter (each one imports SGLang, ~20 s on 2 cores): the PASK hooks are off without a
#: policy, the tag log is refused without one, a valid policy reaches ServerArgs, a pickled copy
#: (what child processes get) and the environment and turns the hooks on, and a later parse
#: without one carries none. Last, a bad policy, not caught: the process exits as the plugin
#: makes ``python -m sglang.launch_server`` exit.
_PLUGIN_PATH = """
import json, os, pickle, sys
from sglang.srt.plugins import load_plugins
from sglang.srt.server_args import prepare_server_args
model, policy, bad, tag_log = sys.argv[1:]
load_plugins()

def hooked():
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar
    import sglang.srt.mem_cache.common as common
    return [hasattr(XGrammarGrammar.accept_token, '__wrapped__'), hasattr(common.release_kv_cache, '__wrapped__')]

out = {}
sa0 = prepare_server_args(['--model-path', model])
out['without'] = [getattr(sa0, '_pask_policy', None), hooked()]
try:
    prepare_server_args(['--model-path', model, '--pask-tag-log', tag_log])
except SystemExit as e:
    out['tag_log'] = e.code
sa = prepare_server_args(['--model-path', model, '--pask-policy', policy])
out['with'] = [sa._pask_policy, pickle.loads(pickle.dumps(sa))._pask_policy, os.environ['SGLANG_PASK_POLICY'],
               hooked()]
out['after'] = getattr(prepare_server_args(['--model-path', model]), '_pask_policy', None)
print('RESULT ' + json.dumps(out), flush=True)
prepare_server_args(['--model-path', model, '--pask-policy', bad])
print('not reached')
"""


def test_sglang_parsing_with_the_plugin(tmp_path):
    bad = tmp_path / "policy.json"
    bad.write_text(json.dumps(_other_shape()))
    launcher_line = _assert_fails_fast(bad, "is for a model of shape")
    r = run_python("-c", _PLUGIN_PATH, str(TINY_RANDOM), str(DEFAULT_POLICY), str(bad), str(tmp_path),
                   env={"SGLANG_PASK_POLICY": ""})
    assert "RESULT " in r.stdout, r.stderr[-3000:]
    out = json.loads(r.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert out["without"] == [None, [False, False]]  # no policy: SGLang as stock
    assert out["tag_log"] == "error: --pask-tag-log needs --pask-policy"
    assert out["with"] == [str(DEFAULT_POLICY)] * 3 + [[True, True]]
    assert out["after"] is None
    # the plugin path refuses a bad policy as the launcher does: same line, byte for byte, status 1
    assert "not reached" not in r.stdout and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert (r.returncode, r.stderr.strip().splitlines()[-1]) == (1, launcher_line)



def test_wrong_model_names_the_policies_that_fit(tmp_path):
    """A policy for another model: the line names the policy files beside it that fit the model
    given (read as JSON: the model block's fingerprint), none when none does."""
    from sglang_pask.policy.binding import ModelBinding
    from sglang_pask.policy.flag import fitting_policies, flag_error

    fc = DEFAULT_POLICY.parent / "pask-tiny-fc.b0.33.json"
    line = flag_error(str(fc), str(TINY_RANDOM))
    fits = fitting_policies(str(fc.parent), str(TINY_RANDOM))
    want = ModelBinding.from_model(str(TINY_RANDOM)).fingerprint
    assert any(Path(p).name == DEFAULT_POLICY.name for p in fits)
    assert all(json.loads(Path(p).read_text())["model"]["fingerprint"] == want for p in fits)
    assert line.startswith("error: --pask-policy: ") and "\n" not in line
    assert line.endswith(f"; policies beside it for this model: {', '.join(fits)}")
    alone = tmp_path / "p.json"
    alone.write_text(fc.read_text())
    assert "beside it" not in flag_error(str(alone), str(TINY_RANDOM))
