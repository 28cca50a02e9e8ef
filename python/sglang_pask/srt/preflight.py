"""The launcher's pre-flight: whether the plugin's :mod:`.seam` fits the installed SGLang, checked
without importing SGLang (``import sglang`` alone takes seconds; this takes a fraction of one).

* the installed SGLang is the version the plugin is written for (:func:`.seam.version_error`);
* every SGLang name the seam declares resolves in the installed sources: modules by path,
  attributes by a text scan of the module (a ``def``/``class``/assignment at column 0, a member at
  the class body's indent), else by ``ast`` (bindings inside ``if``/``try``, re-exports followed,
  bases defined in the same module). A name the module does not spell at all is a miss without
  parsing.

Static on purpose and so a best effort (a member inherited from a base in another module reads
as missing); the run-time check in every process (:func:`.seam.apply`) is the authoritative one.
``python -m sglang_pask.srt.preflight`` prints the first problem as one line and exits 1.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from pathlib import Path

from sglang_pask.srt.seam import declared, version_error


def _module_file(parts: list[str], root: Path) -> tuple[Path | None, int]:
    """The source file of the longest module prefix of ``parts`` (under ``root``, the package
    directory of ``parts[0]``) and how many parts it spans."""
    path, i = root, 1
    while i < len(parts):  # Python's order: a package, a module, a namespace package
        if (path / parts[i] / "__init__.py").is_file():
            path, i = path / parts[i], i + 1
        elif (path / f"{parts[i]}.py").is_file():
            return path / f"{parts[i]}.py", i + 1
        elif (path / parts[i]).is_dir():
            path, i = path / parts[i], i + 1
        else:
            break
    return (path / "__init__.py" if (path / "__init__.py").is_file() else None), i


def _defined(scope: dict, name: str) -> bool:
    return isinstance(scope.get(name), (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))


def _bindings(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body binds (also inside ``if`` / ``try``), to the binding node."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):  # a rebinding keeps the class (msgspec.defstruct(...))
            out.update({t.id: node for t in node.targets if isinstance(t, ast.Name) and not _defined(out, t.id)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if not _defined(out, node.target.id):
                out[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        elif isinstance(node, (ast.If, ast.Try)):
            for block in (node.body, node.orelse, *(h.body for h in getattr(node, "handlers", ()))):
                out.update(_bindings(block))
    return out


@functools.lru_cache(maxsize=None)
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def _module_bindings(path: Path) -> dict[str, ast.AST]:
    return _bindings(ast.parse(_text(path)).body)


def _quick_found(text: str, names: list[str]) -> bool:
    """The fast path (a text scan, ~100x quicker than ``ast.parse`` on SGLang's large modules):
    ``names[0]`` is defined at column 0, and ``names[1]`` is a def or assignment at the first
    indent of that class's body. False means "not seen this way" (``ast`` decides then)."""
    n0 = re.escape(names[0])
    m = re.search(rf"^(?:(?:async\s+)?def|class)\s+{n0}\b|^{n0}\s*[:=]", text, re.M)
    if m is None or len(names) == 1:
        return m is not None
    if len(names) > 2 or not m.group(0).startswith("class"):
        return False
    end = re.compile(r"^(?![\s#)\]])", re.M).search(text, text.index("\n", m.end()) + 1)
    body = text[m.end():end.start() if end else len(text)]
    indent = re.search(r"^([ \t]+)(?=[^\s#)])", body[body.index("\n") + 1:], re.M)
    n1 = re.escape(names[1])
    return indent is not None and re.search(
        rf"^{indent.group(1)}(?:(?:async\s+)?def\s+{n1}\b|{n1}\s*[:=])", body, re.M) is not None


def static_error(dotted: str, depth: int = 0) -> str | None:
    """Why ``dotted`` (``sglang.``...) cannot resolve in the installed sources, read as text
    or with ``ast`` (nothing imported); None when it does. Attributes inherited from a base class are
    followed only within the same module."""
    parts = dotted.split(".")
    spec = importlib.util.find_spec(parts[0])
    if spec is None or not spec.submodule_search_locations:
        return f"{parts[0]} is not installed"
    path, i = _module_file(parts, Path(spec.submodule_search_locations[0]))
    if path is None:
        return None if i == len(parts) else f"no module {'.'.join(parts[:i + 1])}"
    module = ".".join(parts[:i])
    rest, text = parts[i:], _text(path)
    if rest and _quick_found(text, rest):
        return None
    # certain misses, without parsing: a name the module does not even spell (a class's member
    # may only come from a base in another module, which ast does not follow either)
    if rest and not re.search(rf"\b{re.escape(rest[0])}\b", text):
        return f"{module} has no attribute {rest[0]!r} ({module})"
    if len(rest) > 1 and re.search(rf"^class\s+{re.escape(rest[0])}\b", text, re.M) \
            and not re.search(rf"\b{re.escape(rest[1])}\b", text):
        return f"{module}.{rest[0]} has no attribute {rest[1]!r} ({module})"
    scope = _module_bindings(path)
    top = scope
    for k, name in enumerate(parts[i:]):
        node = scope.get(name)
        if node is None:
            return f"{'.'.join(parts[:i + k])} has no attribute {name!r} ({module})"
        if isinstance(node, ast.ImportFrom) and k + 1 < len(parts[i:]):  # re-exported: follow it
            package = parts[:i] if path.name == "__init__.py" else parts[:i - 1]
            source = ".".join(package[:len(package) - node.level + 1] if node.level else [])
            source = ".".join(p for p in (source, node.module or "") if p)
            orig = next(a.name for a in node.names if (a.asname or a.name) == name)
            if source.split(".")[0] != parts[0] or depth > 8:
                return None  # outside SGLang: resolved at run time
            return static_error(".".join([source, orig, *parts[i + k + 1:]]), depth + 1)
        if k + 1 == len(parts[i:]):
            return None
        if not isinstance(node, ast.ClassDef):
            return None  # attribute of a non-class binding: resolved at run time
        scope = _bindings(node.body)
        for base in node.bases:  # inherited members, from bases defined in this module
            if isinstance(base, ast.Name) and isinstance(top.get(base.id), ast.ClassDef):
                scope = {**_bindings(top[base.id].body), **scope}
    return None


def preflight() -> str | None:
    """The first reason the plugin cannot run on the installed SGLang, checked without importing
    it (the launcher's check, well under a second): every declaration of both groups; None when
    all is in order."""
    if err := version_error():
        return err
    for d in declared():
        for name in d.names():
            if err := static_error(name):
                return f"SGLang target {name} does not resolve: {err}"
    return None


def main() -> int:
    import sys

    if err := preflight():
        print(f"error: sglang_pask: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
