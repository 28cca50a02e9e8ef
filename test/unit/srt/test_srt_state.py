"""One owner of the scheduler's state (srt/state.py, STYLE.md 25): every counter, log and cache is a
field of PaskState, read through one accessor, attached to the scheduler by the seam; no module of
srt/ keeps mutable state of its own."""

from __future__ import annotations

import ast
from types import SimpleNamespace

from conftest import ROOT
from sglang_pask.srt import seam
from sglang_pask.srt.state import PaskState, before_init_model_worker, reset, state

SRT = ROOT / "python" / "sglang_pask" / "srt"
#: module-level mutable names that are not a scheduler's state: the seam's apply-once guard (per
#: process, before any scheduler exists)
ALLOWED = {("seam.py", "_applied")}


def _mutable(value: ast.AST) -> bool:
    """An empty container, or one made by a call (``deque(...)``, ``set()``, ``dict()``, ``[None]``)."""
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts) or (
            isinstance(value, ast.List) and all(isinstance(e, ast.Constant) and e.value is None for e in value.elts))
    return isinstance(value, ast.Call) and ast.unparse(value.func) in ("deque", "set", "dict", "list", "defaultdict")


_MUTATORS = {"append", "appendleft", "extend", "update", "clear", "pop", "popleft", "setdefault", "add", "remove"}


def _mutated(tree: ast.Module, names: set[str]) -> dict[str, int]:
    """Module-level ``names`` written anywhere in the module: ``NAME[k] = / +=``, ``NAME.append(..)``."""
    out = {}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign) else []
        for t in targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names:
                out.setdefault(t.value.id, node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS
                and isinstance(node.func.value, ast.Name) and node.func.value.id in names):
            out.setdefault(node.func.value.id, node.lineno)
    return out


def test_no_module_of_srt_keeps_state():
    bad = []
    for path in SRT.rglob("*.py"):
        rel = path.relative_to(SRT).as_posix()
        if rel == "state.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                bad.append(f"{rel}:{node.lineno}: global {', '.join(node.names)}")
        top = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        for name, line in _mutated(tree, top).items():
            if (rel, name) not in ALLOWED:
                bad.append(f"{rel}:{line}: {name} is written")
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _mutable(node.value):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Name) and (rel, t.id) not in ALLOWED:
                        bad.append(f"{rel}:{node.lineno}: {t.id} = {ast.unparse(node.value)}")
    assert not bad, "module-level state in srt/ (it belongs to PaskState):\n" + "\n".join(bad)


def test_one_state_per_process_and_reset():
    first = reset()
    assert state() is first and state() is state()
    first.tags["tagged"] += 1
    second = reset()
    assert second is not first and state() is second and second.tags["tagged"] == 0


def test_the_seam_attaches_it_to_the_scheduler():
    hooks = [d for d in seam.DECLARED if isinstance(d, seam.Hook) and d.hook.endswith("state:before_init_model_worker")]
    assert [h.target for h in hooks] == ["sglang.srt.managers.scheduler.Scheduler.init_model_worker"]
    assert any(isinstance(d, seam.Stamp) and d.name == "_pask_state" for d in seam.DECLARED)
    scheduler = SimpleNamespace()
    before_init_model_worker(scheduler)
    assert scheduler._pask_state is state()


def test_record_is_what_server_info_shows():
    st = PaskState()
    st.compression["compressions"] = 3
    st.released.append({"rid": "a"})
    out = st.record(None, kernels="torch reference", batched=False)
    assert out["compression"] == {"compressions": 3, "requests_compressed": 0, "errors": 0, "batch_fallbacks": 0}
    assert out["compression_time"] == {"decode_steps": 0, "step_s": 0.0, "compress_s": 0.0, "batched": False}
    assert out["released"] == [{"rid": "a"}] and out["method"] is None and "pools" not in out
    assert out["decode_index"] == {"built": 0, "appended": 0}
    assert set(out) >= {"tags", "reconstruction", "segments", "demoted_rids", "chunked_prefill", "learned_scorer"}
