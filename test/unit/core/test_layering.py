"""Layering (STYLE.md §14), read from the source: every module under ``python/sglang_pask`` is
parsed with ``ast`` and every import counted, function-level and ``TYPE_CHECKING`` ones included.

* ``structure/`` and ``policy/`` import nothing of ``eval/``, ``srt/``, ``hf/``;
* ``srt/`` (the SGLang plugin adapter) is imported by nothing outside it; inside it, modules live
  in subsystems as SGLang's own (``entrypoints``, ``managers``, ``mem_cache``, ``attention``,
  ``models``) beside the few that span them (:data:`SRT_TOP`), and the HTTP side, attention and
  memory import only downhill (:data:`SRT_FORBIDDEN`);
* ``rendering`` (the one rendering path) sits on ``structure/`` only;
* no module outside testing imports a ``testing`` module;
* the intra-package import graph has no cycle, module by module and package by package (every
  module collapsed to its subpackage, top-level modules each their own node): no package imports
  one above it in :data:`LAYERS`;
* one rendering path: outside ``structure/`` (the tagger) and ``rendering.py``, no production
  module applies a chat template or calls a prompt tagger's ``tag``.

Failure messages name the offending import as ``file:line: importer -> imported``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PKG = "sglang_pask"
SRC = ROOT / "python"

#: importer subpackage -> subpackages (of sglang_pask) it must not import
FORBIDDEN = {
    "structure": {"eval", "srt", "hf"},
    "policy": {"eval", "srt", "hf"},
    "rendering": {"eval", "srt", "hf", "tiny", "policy", "methods"},
    "eval": {"srt"},
    "tiny": {"srt"},
    "hf": {"srt"},
    "methods": {"srt"},
    "cli": {"srt"},
    "ops": {"srt", "methods", "eval", "hf", "policy", "structure"},
}
#: srt/ by subsystem (SGLang's layout): the top-level modules that span the subsystems
SRT_TOP = {"seam", "state", "plugin", "preflight", "serving"}
SRT_SUBSYSTEMS = {"entrypoints", "managers", "mem_cache", "attention", "models"}
#: importer subsystem -> subsystems it must not import: nothing imports the HTTP process's side,
#: attention reads pools and views but never the scheduler's rules, memory never attention
SRT_FORBIDDEN = {
    "managers": {"entrypoints"},
    "mem_cache": {"entrypoints", "attention"},
    "attention": {"entrypoints", "managers"},
}
#: where prompts may be rendered / tagged directly
RENDERERS = ("sglang_pask.rendering", "sglang_pask.structure")

#: The packages (subpackages and top-level modules of sglang_pask; ``sglang_pask`` is its
#: ``__init__``), lowest first: a package imports only packages of lower layers, none of its own
#: layer. ``cli`` is the command registry: every ``<sub>/commands.py`` imports it to register, and
#: it finds them by name at run time, so it sits below them (its own commands, ``env`` and ``tag``,
#: use ``rendering``). ``srt`` (the SGLang plugin) is imported by nothing; the launcher starts
#: SGLang, which loads ``srt`` as a plugin, so ``launch_server`` sits above it.
LAYERS: list[tuple[str, ...]] = [
    ("environ",),  # every environment variable and server flag, declared once (standard library only)
    # version + lazy API names, path checks, the CPU shim, process conventions (standard library only)
    ("sglang_pask", "paths", "cpu_shim", "process"),
    ("model_families",),  # the model-family table (its refusals word a bad path as `paths` does)
    ("ops",),  # csrc's compiled operators and their torch reference (numpy + torch only)
    ("structure",),  # structural classes, taggers, trackers, request validation
    ("rendering",),  # the one rendering path (SGLang's view of a request + the tagger)
    ("cli",),  # the command registry (env, tag)
    ("policy",),  # the policy file: schema, binding, prior
    ("methods",),  # KV methods (pask reads a policy)
    ("hf",),  # the transformers reference runner
    ("eval",),  # the harness, backends, reports (talks to a server over HTTP)
    ("tiny", "realmodel", "calibrate"),  # the tiny models, the real model's files; calibration
    ("srt",),  # the SGLang plugin
    ("launch_server",),  # the launcher
]


def _modules() -> dict[str, tuple[Path, bool]]:
    mods = {}
    for path in sorted((SRC / PKG).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return mods


MODS = _modules()


def _targets(mod: str, is_pkg: bool, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODS else target for a in node.names]
    out = []
    for name in names:
        if name != PKG and not name.startswith(PKG + "."):
            continue
        while name not in MODS:  # an attribute of a module, or a module this tree lacks
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def _edges() -> dict[str, dict[str, str]]:
    """importer -> {imported: "file:line"} (the first import of it)."""
    edges: dict[str, dict[str, str]] = {m: {} for m in MODS}
    for mod, (path, is_pkg) in MODS.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(mod, is_pkg, node):
                    if target != mod:
                        edges[mod].setdefault(target, f"{path.relative_to(SRC.parent)}:{node.lineno}")
    return edges


EDGES = _edges()


def _sub(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_testing(mod: str) -> bool:
    return mod.rsplit(".", 1)[-1] == "testing"


def _fmt(importer: str, imported: str) -> str:
    return f"{EDGES[importer][imported]}: {importer} -> {imported}"


def test_the_parser_sees_the_package():
    assert "sglang_pask.structure.prompt_tagger" in MODS and "sglang_pask.rendering" in MODS
    assert "sglang_pask.structure" in EDGES["sglang_pask.rendering"]
    # function-level imports count: tiny/examples.render imports rendering inside the function
    assert "sglang_pask.rendering" in EDGES["sglang_pask.tiny.examples"]


def test_no_upward_imports():
    bad = [_fmt(a, b) for a, targets in EDGES.items() for b in targets
           if _sub(b) in FORBIDDEN.get(_sub(a), ())]
    assert not bad, "upward imports (STYLE.md §14):\n" + "\n".join(bad)


def _srt_sub(mod: str) -> str | None:
    """``sglang_pask.srt.managers.persist`` -> ``managers``; None outside a subsystem of srt/."""
    parts = mod.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "srt" else None


def test_srt_is_laid_out_by_subsystem():
    srt = [m.split(".") for m in MODS if m.startswith(f"{PKG}.srt.")]
    top = {p[2] for p in srt if len(p) == 3} - SRT_SUBSYSTEMS
    assert top <= SRT_TOP, f"srt/ modules outside a subsystem: {sorted(top - SRT_TOP)} (SRT_TOP: {sorted(SRT_TOP)})"
    assert {p[2] for p in srt if len(p) > 3} <= SRT_SUBSYSTEMS


def test_srt_subsystems_import_downhill():
    bad = [_fmt(a, b) for a, targets in EDGES.items() for b in targets
           if _srt_sub(b) in SRT_FORBIDDEN.get(_srt_sub(a), ())]
    assert not bad, "srt/ subsystem imports against the direction:\n" + "\n".join(bad)


def test_production_code_imports_no_testing_module():
    bad = [_fmt(a, b) for a, targets in EDGES.items() if not _is_testing(a)
           for b in targets if _is_testing(b)]
    assert not bad, "production modules importing test helpers:\n" + "\n".join(bad)


def _cycle() -> list[str] | None:
    """One import cycle as a list of edges, or None."""
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(EDGES[v]):
            if state.get(w) == 1:
                loop = stack[stack.index(w):] + [w]
                return [_fmt(a, b) for a, b in zip(loop, loop[1:])]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(EDGES):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_no_import_cycles():
    cycle = _cycle()
    assert cycle is None, "import cycle:\n" + "\n".join(cycle or [])


def test_one_rendering_path():
    """Only ``rendering.render_chat`` turns a request into a prompt (via structure's tagger)."""
    bad = []
    for mod, (path, _) in MODS.items():
        if _is_testing(mod) or any(mod == r or mod.startswith(r + ".") for r in RENDERERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                f = node.func
                if f.attr == "apply_chat_template" or (
                        f.attr == "tag" and "tagger" in ast.unparse(f.value).lower()):
                    bad.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: {ast.unparse(f)}(...)")
    assert not bad, "renders a prompt outside sglang_pask.rendering.render_chat:\n" + "\n".join(bad)


# --- package level ---------------------------------------------------------------------------

def _package(mod: str) -> str:
    """``sglang_pask.structure.tools_tagger`` -> ``structure``; ``sglang_pask.cli`` -> ``cli``;
    ``sglang_pask`` -> ``sglang_pask``."""
    return _sub(mod) or mod


def _package_edges() -> dict[str, dict[str, str]]:
    """importer package -> {imported package: the first module import between them, formatted},
    testing modules left out (test helpers may import anything)."""
    edges: dict[str, dict[str, str]] = {}
    for a in sorted(EDGES):
        if _is_testing(a):
            continue
        for b in sorted(EDGES[a]):
            pa, pb = _package(a), _package(b)
            if pa != pb and not _is_testing(b):
                edges.setdefault(pa, {}).setdefault(pb, f"{_fmt(a, b)}  [{pa} -> {pb}]")
    return edges


PKG_EDGES = _package_edges()
LAYER = {p: i for i, layer in enumerate(LAYERS) for p in layer}


def _find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle of ``graph`` as the labels of its edges, or None."""
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, {})):
            if state.get(w) == 1:
                loop = stack[stack.index(w):] + [w]
                return [graph[a][b] for a, b in zip(loop, loop[1:])]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_package_graph_sees_the_packages():
    # function-level imports count at package level too (rendering -> structure is module-level,
    # tiny -> rendering function-level)
    assert "structure" in PKG_EDGES["rendering"] and "rendering" in PKG_EDGES["tiny"]
    assert "structure" not in PKG_EDGES.get("structure", {})  # intra-package edges collapse
    assert _find_cycle({"a": {"b": "a->b"}, "b": {"c": "b->c"}, "c": {"a": "c->a"}}) == ["a->b", "b->c", "c->a"]
    assert _find_cycle({"a": {"b": "a->b"}, "b": {}}) is None


def test_every_package_has_a_layer():
    packages = {_package(m) for m in MODS if not _is_testing(m)}
    assert packages == set(LAYER), (f"packages without a layer: {sorted(packages - set(LAYER))}; "
                                    f"layers naming no package: {sorted(set(LAYER) - packages)}")


def test_no_package_cycles():
    cycle = _find_cycle(PKG_EDGES)
    assert cycle is None, "package import cycle (one import per hop):\n" + "\n".join(cycle or [])


def test_packages_import_downhill():
    bad = [label for a, targets in PKG_EDGES.items() for b, label in targets.items()
           if LAYER.get(b, -1) >= LAYER.get(a, -1)]
    assert not bad, ("imports of a package of the same or a higher layer (LAYERS, lowest first: "
                     + " < ".join("/".join(layer) for layer in LAYERS) + "):\n" + "\n".join(bad))


def test_srt_is_imported_by_nothing():
    bad = [_fmt(a, b) for a, targets in EDGES.items() if _sub(a) != "srt" and not _is_testing(a)
           for b in targets if _sub(b) == "srt"]
    assert not bad, "srt (the SGLang plugin) imported from outside it:\n" + "\n".join(bad)
