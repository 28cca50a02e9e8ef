"""The seam (srt/seam.py): one place declares every hook, registration, subclass and attribute
stamp on SGLang; the launcher refuses a plugin that does not fit the installed SGLang.

* the declarations cover the code: no ``HookRegistry.register`` / backend registration /
  ``apply_hooks`` outside the seam, every ``pask`` attribute the plugin stamps is declared;
* every declared name resolves in the installed SGLang, statically (the launcher's pre-flight,
  srt/preflight.py) and at run time (applied in a fresh process: every hook installed, the backend registered);
* a failure at run time stops the process that loads the plugin through SGLang's own
  ``load_plugins`` (which swallows ``Exception``): exit 1 with one line naming the target;
* the launcher refuses an unresolved target and another SGLang version in under 5 s, exit 1,
  one stderr line naming the target / both versions.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from sglang_pask.environ import envs
from sglang_pask.srt import preflight, seam

TEST_TARGET = envs.SGLANG_PASK_TEST_BOGUS_TARGET.name
TEST_VERSION = envs.SGLANG_PASK_TEST_SGLANG_VERSION.name
ALLOW_VERSION = envs.SGLANG_PASK_ALLOW_SGLANG_VERSION.name

SRC = ROOT / "python" / "sglang_pask"
MODEL = ROOT / "models" / "tiny-random-qwen3"
POLICY = ROOT / "policies" / "tiny-random-qwen3.prior.json"
BOGUS = "sglang.srt.managers.scheduler.Scheduler.pask_no_such_method"
#: the issue's bound on a refusal, for the launcher as the user runs it
REFUSAL_S = 5.0


def _sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py"))}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (TEST_TARGET, TEST_VERSION, ALLOW_VERSION)}
    return {**env, **extra}


# --- the declarations cover the code --------------------------------------------------------

def _calls(text: str) -> list[tuple[int, str]]:
    """(line, callee) of every call in ``text`` (parsed: docstrings do not count)."""
    return [(n.lineno, ast.unparse(n.func)) for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)]


def test_nothing_registers_with_sglang_outside_the_seam():
    names = ("HookRegistry.register", "apply_hooks", "register_radix_cache_backend", "plugin_hook",
             "exception_handler", "add_exception_handler")
    bad = [f"{path}:{line}: {callee}(...)" for path, text in _sources().items() if not path.endswith("srt/seam.py")
           for line, callee in _calls(text) if callee.endswith(names)]
    bad += [f"{path}: sets an app's exception_handlers" for path, text in _sources().items()
            if not path.endswith("srt/seam.py") and re.search(r"exception_handlers\[[^]]*\]\s*=(?!=)", text)]
    assert not bad, "registrations outside srt/seam.py:\n" + "\n".join(bad)
    assert any(c == "HookRegistry.register" for _l, c in _calls((SRC / "srt" / "seam.py").read_text()))


def test_every_stamped_attribute_is_declared():
    stamped = {m.group(1) for path, text in _sources().items() if "/srt/" in path
               for m in re.finditer(r"\b\w+\.(_?pask_\w+)\s*=(?!=)", text)}
    declared = {d.name for d in seam.DECLARED if isinstance(d, seam.Stamp)}
    assert stamped, "the scan found no stamp: the pattern is wrong"
    assert stamped <= declared, f"stamped but not declared in the seam: {sorted(stamped - declared)}"


def test_declarations_are_data():
    hooks = [d for d in seam.DECLARED if isinstance(d, seam.Hook)]
    assert {d.group for d in seam.DECLARED} == {seam.ALWAYS, seam.PASK}
    # without a policy only the flags, and the launcher's stop (a no-op outside sglang_pask.launch_server)
    assert {d.target.rsplit(".", 1)[1] for d in hooks if d.group == seam.ALWAYS} == {
        "add_cli_args", "from_cli_args", "kill_process_tree"}
    assert all(d.kind in ("before", "after", "around", "replace") for d in hooks)
    assert len({(d.target, d.hook) for d in hooks}) == len(hooks), "a hook declared twice"
    with pytest.raises(AttributeError):
        hooks[0].target = "x"  # frozen
    assert any(isinstance(d, seam.Registration) and d.name == seam.RADIX_BACKEND for d in seam.DECLARED)
    handlers = [d for d in seam.DECLARED if isinstance(d, seam.AppHandler)]
    assert [(d.app, d.exc, d.group) for d in handlers] == [
        ("sglang.srt.entrypoints.http_server.app", "fastapi.exceptions.RequestValidationError", seam.PASK)]


# --- everything resolves in the installed SGLang ------------------------------------------

def test_preflight_passes_on_the_installed_sglang(monkeypatch):
    for var in (TEST_TARGET, TEST_VERSION, ALLOW_VERSION):
        monkeypatch.delenv(var, raising=False)
    assert seam.installed_version() == seam.SGLANG_VERSION
    assert preflight.preflight() is None
    for d in seam.DECLARED:
        for name in d.names():
            assert preflight.static_error(name) is None, name


def test_the_static_check_names_what_is_missing():
    assert preflight.static_error(BOGUS) == (
        "sglang.srt.managers.scheduler.Scheduler has no attribute 'pask_no_such_method' "
        "(sglang.srt.managers.scheduler)")
    assert preflight.static_error("sglang.srt.server_args.ServerArgs.nope").startswith(
        "sglang.srt.server_args.ServerArgs has no attribute 'nope'")  # a class rebound by msgspec
    assert preflight.static_error("sglang.srt.no_such_module.f") == "no module sglang.srt.no_such_module"
    # a re-export is followed to its definition
    assert preflight.static_error("sglang.srt.managers.scheduler.ScheduleBatch.maybe_evict_swa") is None
    assert preflight.static_error("sglang.srt.managers.scheduler.ScheduleBatch.nope").startswith(
        "sglang.srt.managers.schedule_batch.ScheduleBatch has no attribute 'nope'")


def test_version(monkeypatch):
    monkeypatch.delenv(ALLOW_VERSION, raising=False)
    monkeypatch.setenv(TEST_VERSION, "0.5.22")
    assert seam.version_error() == (f"SGLang 0.5.22 is installed, the plugin is written for SGLang "
                                    f"{seam.SGLANG_VERSION} (set {ALLOW_VERSION}=1 to start anyway)")
    monkeypatch.setenv(ALLOW_VERSION, "1")
    assert seam.version_error() is None and preflight.preflight() is None


#: One fresh interpreter imports SGLang's plugin loader -- the first thing either case imports from
#: SGLang, with torch: ~10 s on 2 cores -- then forks a child per case (they run side by side) and
#: waits for them. A child is a process in which no plugin is loaded and no hook applied yet, as in a
#: fresh one; it runs its case with its own environment and its stdout/stderr in files, and exits as
#: that process would (an uncaught SystemExit included); the parent prints each exit status.
_FORKED = """
import json, os, sys
import sglang.srt.plugins  # imported, nothing loaded or applied: the state each case starts from
out_dir, cases = sys.argv[1], json.loads(sys.argv[2])
pids = {}
for name, (env, code) in cases.items():
    pid = os.fork()
    if pid == 0:
        for fd, ext in ((1, 'out'), (2, 'err')):
            os.dup2(os.open(os.path.join(out_dir, name + '.' + ext), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.environ.clear()
        os.environ.update(env)
        exec(compile(code, name, 'exec'), {'__name__': '__main__'})
        sys.exit(0)
    pids[name] = pid
print('STATUS ' + json.dumps({n: os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for n, p in pids.items()}))
"""


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """name -> (exit status, stdout, stderr) of each case in :data:`_CASES`, each run in a process
    where SGLang's plugin loader is imported and nothing is applied yet."""
    out = tmp_path_factory.mktemp("seam")
    cases = {name: (env(), code) for name, (env, code) in _CASES.items()}
    r = subprocess.run([sys.executable, "-c", _FORKED, str(out), json.dumps(cases)], env=_env(),
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0 and "STATUS " in r.stdout, r.stderr[-3000:]
    status = json.loads(r.stdout.split("STATUS ", 1)[1])
    return {n: (status[n], (out / f"{n}.out").read_text(), (out / f"{n}.err").read_text()) for n in cases}


_APPLIED = (
    "from sglang_pask.srt import seam\n"
    "seam.apply(seam.ALWAYS); seam.apply(seam.PASK)\n"
    "bad = [(d, seam.check(d)) for d in seam.declared() if seam.check(d)]\n"
    "assert not bad, bad\n"
    "from sglang.srt.mem_cache.registry import get_radix_cache_factory\n"
    "from sglang_pask.srt.mem_cache.radix_cache import pask_radix_cache_factory\n"
    "assert get_radix_cache_factory(seam.RADIX_BACKEND) is pask_radix_cache_factory\n"
    "from sglang.srt.mem_cache import common\n"
    "from sglang_pask.srt.managers import output_tags, persist_hooks\n"
    "assert seam._installed('sglang.srt.mem_cache.common.release_kv_cache', persist_hooks.around_release)\n"
    "assert seam._installed('sglang.srt.mem_cache.common.release_kv_cache', output_tags.around_release)\n"
    "assert not seam._installed('sglang.srt.mem_cache.common.release_kv_cache', seam._noop_after)\n"
    "from fastapi.exceptions import RequestValidationError\n"
    "from sglang.srt.entrypoints.http_server import app, validation_exception_handler\n"
    "from sglang_pask.srt.entrypoints import error_hooks\n"
    "held = app.exception_handlers[RequestValidationError]\n"
    "assert seam._in_chain(held, error_hooks.around_validation_handler)\n"
    "assert held.__wrapped__ is validation_exception_handler\n"
    "from sglang_pask.process import before_final_kill\n"
    "import sglang.srt.utils as utils, sglang.srt.utils.common as common\n"
    "assert seam._installed('sglang.srt.utils.common.kill_process_tree', before_final_kill)\n"
    "assert utils.kill_process_tree is common.kill_process_tree  # re-exports follow the hook\n"
    "print('ok', len(seam.declared()))\n"
)
_CHILD = "from sglang.srt.plugins import load_plugins\nload_plugins()\nprint('not reached')\n"
#: name -> (its environment, its code)
_CASES = {
    "applied": (_env, _APPLIED),
    "child": (lambda: _env(SGLANG_PASK_POLICY=str(POLICY), **{TEST_TARGET: f"pask:{BOGUS}"}), _CHILD),
}


def test_applied_in_a_fresh_process_everything_is_in_place(fresh):
    """Both groups applied as the plugin does (its own apply + check), then each declaration
    checked again here: every hook function is in the wrapper chain at its target, the backend
    reads back as ours, every subclass and stamp holds, and SGLang's app holds our validation
    handler around its own."""
    status, out, err = fresh["applied"]
    assert status == 0, err[-3000:]
    assert out.split() == ["ok", str(len(seam.DECLARED))]


def test_a_child_process_stops_loudly(fresh):
    """What a scheduler or detokenizer does first: SGLang's ``load_plugins()`` (which logs and
    swallows an ``Exception`` from a plugin). With a policy inherited and an unresolvable target,
    the process exits 1 with the target named on its last stderr line."""
    status, out, err = fresh["child"]
    assert status == 1 and "not reached" not in out, (status, err[-2000:])
    assert err.strip().splitlines()[-1] == (
        f"error: sglang_pask: SGLang target {BOGUS} does not resolve: "
        "sglang.srt.managers.scheduler.Scheduler has no attribute 'pask_no_such_method'")


# --- the launcher refuses, fast, with one line ------------------------------------------------

def _launch(env: dict) -> tuple[subprocess.CompletedProcess, float]:
    cmd = [sys.executable, "-m", "sglang_pask.launch_server", "--model-path", str(MODEL),
           "--pask-policy", str(POLICY), "--max-total-tokens", "4096", "--port", "1"]
    t = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    return r, time.monotonic() - t


@pytest.mark.parametrize("group", [seam.PASK, seam.ALWAYS])
def test_the_launcher_refuses_an_unresolved_target(group):
    r, took = _launch(_env(**{TEST_TARGET: f"{group}:{BOGUS}"}))
    print(f"refused an unresolved {group} target in {took:.2f} s")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"error: sglang_pask: SGLang target {BOGUS} does not resolve: sglang.srt.managers.scheduler.Scheduler "
        "has no attribute 'pask_no_such_method' (sglang.srt.managers.scheduler)"], r.stderr[-2000:]
    assert took < REFUSAL_S


def test_the_launcher_refuses_another_sglang_version():
    r, took = _launch(_env(**{TEST_VERSION: "0.5.22"}))
    print(f"refused SGLang 0.5.22 in {took:.2f} s")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"error: sglang_pask: SGLang 0.5.22 is installed, the plugin is written for SGLang {seam.SGLANG_VERSION} "
        f"(set {ALLOW_VERSION}=1 to start anyway)"], r.stderr[-2000:]
    assert took < REFUSAL_S


def test_the_preflight_as_a_command():
    r = subprocess.run([sys.executable, "-m", "sglang_pask.srt.preflight"], env=_env(), capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_the_registry_log_keeps_quiet_about_our_own_targets_only():
    """While the seam applies, SGLang's hook registry logs nothing per declared target (its
    "Applied" lines and the "Multiple AROUND hooks" warning: both our AROUND hooks call the
    original); lines about any other target, and other warnings, pass."""
    import logging

    ours = next(d.target for d in seam.DECLARED if isinstance(d, seam.Hook))
    quiet = seam._QuietOwnHooks({ours})

    def rec(msg, *args, level=logging.INFO):
        return logging.LogRecord("sglang.srt.plugins.hook_registry", level, __file__, 1, msg, args, None)

    assert not quiet.filter(rec("Applied %d hook(s) to %s (from: %s)", 1, ours, "unknown"))
    assert not quiet.filter(rec("Multiple AROUND hooks on '%s' (%d hooks, from: %s). If any ...", ours, 2, "x",
                                level=logging.WARNING))
    assert quiet.filter(rec("Applied %d hook(s) to %s (from: %s)", 1, "other.plugin.target", "unknown"))
    assert quiet.filter(rec("Multiple AROUND hooks on '%s' (%d hooks, from: %s).", "other.target", 2, "x"))
    assert quiet.filter(rec("Multiple REPLACE hooks on '%s': ...", ours, level=logging.WARNING))
