"""The registry of environment variables and server flags (``sglang_pask.environ``), read from the
sources: every ``SGLANG_PASK_*`` variable and ``--pask-*`` flag the repository names is declared
there once; no other module reads a variable itself or at import time; the plugin's parser holds
exactly the declared flags; ``pask env --vars`` prints them all."""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys

import pytest
from conftest import ROOT
from sglang_pask.environ import CATEGORIES, SERVER_FLAGS, EnvVar, envs

PKG = ROOT / "python" / "sglang_pask"
REGISTRY = PKG / "environ.py"
#: where the repository names variables and flags (bench/'s result folders are data, not sources)
TEXT = [*ROOT.glob("python/**/*.py"), *ROOT.glob("test/**/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("bench/*.sh"),
        *ROOT.glob(".ci/*"), *ROOT.glob("docs/*.md"), ROOT / "Makefile", ROOT / "setup.py", ROOT / "README.md",
        ROOT / "csrc" / "README.md"]
VAR = re.compile(r"\bSGLANG_PASK_[A-Z0-9_]*[A-Z0-9]")
FLAG = re.compile(r"--pask-[a-z][a-z-]*[a-z]")


def _named(pattern: re.Pattern) -> dict[str, str]:
    """Every match in the sources -> the first file naming it."""
    out: dict[str, str] = {}
    for path in TEXT:
        if path.is_file():
            for m in pattern.findall(path.read_text(encoding="utf-8", errors="replace")):
                out.setdefault(m, str(path.relative_to(ROOT)))
    return out


def test_every_variable_named_is_declared():
    missing = {v: where for v, where in _named(VAR).items() if v not in envs}
    assert not missing, f"SGLANG_PASK_* variables not declared in sglang_pask/environ.py: {missing}"


def test_every_flag_named_is_declared():
    declared = {f.name for f in SERVER_FLAGS}
    missing = {f: where for f, where in _named(FLAG).items() if f not in declared}
    assert not missing, f"--pask-* flags not declared in sglang_pask/environ.py: {missing}"


def test_declarations_are_typed_and_categorised():
    for v in envs:
        assert v.type in (bool, str) and v.category in CATEGORIES and v.doc and "\n" not in v.doc, v
    assert len({v.name for v in envs}) == len(list(envs))
    for f in SERVER_FLAGS:
        assert f.type in (str, int, float) and f.category in CATEGORIES and f.doc, f
    assert len({f.name for f in SERVER_FLAGS}) == len(SERVER_FLAGS)


def _reads_env(node: ast.AST) -> bool:
    """``os.environ.get(..)``, ``os.getenv(..)``, ``os.environ[..]`` (read) or ``.. in os.environ``
    with a ``SGLANG_PASK_*`` name."""
    def named(arg) -> bool:
        return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("SGLANG_PASK_")

    if isinstance(node, ast.Call) and node.args and named(node.args[0]):
        return ast.unparse(node.func) in ("os.environ.get", "os.getenv", "environ.get", "getenv")
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and named(node.slice):
        return ast.unparse(node.value) in ("os.environ", "environ")
    if isinstance(node, ast.Compare) and named(node.left):
        return any(ast.unparse(c) in ("os.environ", "environ") for c in node.comparators)
    return False


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_no_variable_is_read_outside_the_registry():
    """Production code (the package, setup.py) names no variable in code at all -- each comes from
    ``envs`` -- and nothing (tests and benches included) reads one from ``os.environ`` directly."""
    bad = []
    production = [p for p in PKG.rglob("*.py") if p != REGISTRY] + [ROOT / "setup.py"]
    for path in production + [*ROOT.glob("test/**/*.py"), *ROOT.glob("bench/*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        docs, is_production = _docstrings(tree), path in production
        for node in ast.walk(tree):
            if _reads_env(node):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
            elif (is_production and isinstance(node, ast.Constant) and id(node) not in docs
                  and isinstance(node.value, str) and VAR.fullmatch(node.value)):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: the name {node.value!r} "
                           f"(use sglang_pask.environ.envs.{node.value})")
    assert not bad, "environment variables read outside sglang_pask/environ.py:\n" + "\n".join(bad)


def _import_time_calls(body: list[ast.stmt]):
    """Calls that run when a module (or a class body in it) is imported: not inside a function."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(stmt, ast.ClassDef):
            yield from _import_time_calls(stmt.body)
            continue
        stack = [stmt]
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, ast.Call):
                yield node
            stack.extend(ast.iter_child_nodes(node))


def test_nothing_reads_a_variable_at_import_time():
    bad = []
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for call in _import_time_calls(tree.body):
            f = ast.unparse(call.func)
            if f.startswith("envs.") and f.endswith((".get", ".is_set")) or f in ("os.getenv", "os.environ.get"):
                bad.append(f"{path.relative_to(ROOT)}:{call.lineno}: {ast.unparse(call)}")
    assert not bad, "environment read at import time:\n" + "\n".join(bad)


def test_a_variable_is_read_when_asked(monkeypatch):
    v = envs.SGLANG_PASK_BATCHED_COMPRESSION
    monkeypatch.delenv(v.name, raising=False)
    assert v.get() is True
    monkeypatch.setenv(v.name, "0")
    assert v.get() is False
    monkeypatch.setenv(v.name, "maybe")
    with pytest.raises(ValueError, match=v.name):
        v.get()
    ops = envs.SGLANG_PASK_OPS
    monkeypatch.setenv(ops.name, "fast")
    with pytest.raises(ValueError, match="csrc, reference"):
        ops.get()
    assert EnvVar("SGLANG_PASK_" + "UNDECLARED", str, None, "test", "x").get() is None  # (not a name the scan sees)


def test_the_plugin_adds_exactly_the_declared_flags():
    from sglang_pask.srt import plugin

    parser = argparse.ArgumentParser()
    plugin._add_flag(None, parser)
    added = {s: a for a in parser._actions for s in a.option_strings if s.startswith("--pask-")}
    assert set(added) == {f.name for f in SERVER_FLAGS}
    for f in SERVER_FLAGS:
        assert added[f.name].type is f.type and added[f.name].dest == f.dest, f


def test_pask_env_vars_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "sglang_pask.cli", "env", "--vars"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, check=True).stdout.splitlines()
    assert out[0].split() == ["NAME", "TYPE", "DEFAULT", "CATEGORY", "DOC"]
    names = [line.split()[0] for line in out[1:]]
    assert names == [v.name for v in envs] + [f.name for f in SERVER_FLAGS]
