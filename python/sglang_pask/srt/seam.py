"""The one seam between the plugin and SGLang: every hook target, every registration into an
SGLang registry, every SGLang class we subclass and every attribute we stamp on SGLang objects,
declared here as data (:data:`DECLARED`), applied here and checked here.

Two groups: :data:`ALWAYS` (the CLI flag hooks, in every process) and :data:`PASK` (only with a
policy). :func:`apply` registers a group's hooks with SGLang's ``HookRegistry``, applies them,
registers its backends, and then checks -- itself, since ``HookRegistry.apply_hooks`` only logs a
target that fails to resolve -- that the installed SGLang is :data:`SGLANG_VERSION`, that every
declared name resolves, that every hook function is really installed on its target, and that
every registration reads back. Any failure raises :class:`SeamError` (a ``SystemExit``: SGLang's
plugin loader catches ``Exception`` only) with one line naming it; so no process runs PASK
half-applied.

The launcher runs :func:`preflight` before it imports SGLang (seconds): the same version check
and a static resolution of every declared SGLang name in the installed sources, so a mismatch
is refused in well under 5 s with the same line.

Test hooks (environment, read here only): ``SGLANG_PASK_TEST_BOGUS_TARGET=[group:]dotted.path``
adds an AFTER hook on that target (group default ``pask``); ``SGLANG_PASK_TEST_SGLANG_VERSION``
stands in for the installed version.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("sglang_pask")

#: the SGLang release this plugin is written and tested against
SGLANG_VERSION = "0.5.23"
ENV_ALLOW_VERSION = "SGLANG_PASK_ALLOW_SGLANG_VERSION"
ENV_TEST_VERSION = "SGLANG_PASK_TEST_SGLANG_VERSION"
ENV_TEST_TARGET = "SGLANG_PASK_TEST_BOGUS_TARGET"
ALWAYS, PASK = "always", "pask"
#: the radix cache backend name (``--radix-cache-backend pask``)
RADIX_BACKEND = "pask"


class SeamError(SystemExit):
    """The plugin cannot run on this SGLang: one line, exit status 1."""

    def __init__(self, problem: str):
        super().__init__(f"error: sglang_pask: {problem}")


@dataclass(frozen=True)
class Hook:
    """``hook`` (ours, ``module:function``) installed on ``target`` (SGLang, dotted) as ``kind``
    (``HookType`` name: before, after, around, replace)."""
    target: str
    kind: str
    hook: str
    group: str = PASK

    def names(self) -> tuple[str, ...]:
        return (self.target,)


@dataclass(frozen=True)
class Registration:
    """``factory`` (ours) registered as ``name`` through SGLang's ``register`` and read back
    through its ``lookup`` (both dotted)."""
    name: str
    register: str
    lookup: str
    factory: str
    group: str = PASK

    def names(self) -> tuple[str, ...]:
        return (self.register, self.lookup)


@dataclass(frozen=True)
class Subclass:
    """``cls`` (ours, ``module:Class``) subclasses SGLang's ``base`` (dotted); ``why``."""
    base: str
    cls: str
    why: str
    group: str = PASK

    def names(self) -> tuple[str, ...]:
        return (self.base,)


@dataclass(frozen=True)
class Stamp:
    """Attribute ``name`` set on instances of SGLang's class ``on`` (dotted). ``ours``: an
    attribute of our own (must not clash with SGLang's, instances must take new attributes);
    otherwise an SGLang field we write."""
    name: str
    on: str
    why: str
    ours: bool = True
    group: str = PASK

    def names(self) -> tuple[str, ...]:
        return (self.on,)


_CHAT = "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat"
_XGRAMMAR = "sglang.srt.constrained.xgrammar_backend.XGrammarGrammar"
_CFG = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
_COMMON = "sglang.srt.mem_cache.common"
_SRT = "sglang_pask.srt"

DECLARED: tuple[Hook | Registration | Subclass | Stamp, ...] = (
    # -- always: the CLI flags (plugin) --
    Hook("sglang.srt.server_args.ServerArgs.add_cli_args", "after", f"{_SRT}.plugin:_add_flag", ALWAYS),
    Hook("sglang.srt.server_args.ServerArgs.from_cli_args", "around", f"{_SRT}.plugin:_capture", ALWAYS),
    Stamp("_pask_policy", "sglang.srt.server_args.ServerArgs",
          "the policy path, pickled with the server args into child processes", group=ALWAYS),
    # -- tags (tag_hooks, request_tags) --
    Hook(f"{_CHAT}._convert_to_internal_request", "after", f"{_SRT}.tag_hooks:after_convert"),
    Hook(f"{_XGRAMMAR}.accept_token", "around", f"{_SRT}.tag_hooks:around_accept"),
    Hook(f"{_XGRAMMAR}.rollback", "around", f"{_SRT}.tag_hooks:around_rollback"),
    Hook(f"{_COMMON}.release_kv_cache", "around", f"{_SRT}.tag_hooks:around_release"),
    Hook(f"{_CHAT}._validate_request", "after", f"{_SRT}.error_hooks:after_validate"),
    Stamp("_pask_prompt_tagger", _CHAT, "the prompt tagger, built once per HTTP process"),
    Stamp("_pask_tracker", _XGRAMMAR, "the request's output structure tracker"),
    Stamp("_pask_vocab", _XGRAMMAR, "xgrammar's decoded vocabulary, for the tracker"),
    Stamp("_pask_tags", "sglang.srt.managers.schedule_batch.Req", "the request's structure tags"),
    Stamp("rid", "sglang.srt.managers.io_struct.GenerateReqInput", "set when absent", ours=False),
    Stamp("kv_hints", "sglang.srt.managers.io_struct.GenerateReqInput", "carries the tags", ours=False),
    Stamp("extra_key", "sglang.srt.managers.io_struct.GenerateReqInput",
          "the shared segment's radix namespace", ours=False),
    # -- per-unit KV pools and compression (persist_hooks, segments) --
    Hook(f"{_CFG}._build_mha_kv_pool", "around", f"{_SRT}.persist_hooks:around_build_pool"),
    Hook(f"{_CFG}._build_token_to_kv_pool_allocator", "around", f"{_SRT}.persist_hooks:around_build_allocator"),
    Hook(f"{_CFG}.configure", "around", f"{_SRT}.persist_hooks:around_configure"),
    Hook("sglang.srt.layers.attention.attention_registry.attn_backend_wrapper", "around",
         f"{_SRT}.persist_hooks:around_attn_wrapper"),
    Hook("sglang.srt.managers.schedule_batch.ScheduleBatch.maybe_evict_swa", "around",
         f"{_SRT}.persist_hooks:around_evict"),
    Hook("sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController."
         "_add_memory_usage", "after", f"{_SRT}.persist_hooks:after_memory_usage"),
    Hook(f"{_COMMON}.release_kv_cache", "around", f"{_SRT}.persist_hooks:around_release"),
    Hook("sglang.srt.managers.schedule_policy.PrefillAdder._select_prefill_admission", "around",
         f"{_SRT}.segments:around_select_admission"),
    Hook(f"{_COMMON}.checkpoint_kv_cache", "around", f"{_SRT}.segments:around_checkpoint"),
    Subclass("sglang.srt.mem_cache.memory_pool.KVCache", f"{_SRT}.pools:PaskKVPool", "per-unit KV pool"),
    Subclass("sglang.srt.mem_cache.allocator.token.TokenToKVPoolAllocator", f"{_SRT}.pools:PaskAllocator",
             "full ids + per-unit slots"),
    Subclass("sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend",
             f"{_SRT}.attention:PaskTorchNativeAttnBackend", "attention over per-unit pools (CPU)"),
    Subclass("sglang.srt.layers.attention.base_attn_backend.AttentionBackend",
             f"{_SRT}.flashinfer_backend:PaskFlashInferAttnBackend", "attention over per-unit pools (GPU)"),
    # -- the radix cache of shared segments (radix_cache, radix_tags) --
    Registration(RADIX_BACKEND, "sglang.srt.mem_cache.registry.register_radix_cache_backend",
                 "sglang.srt.mem_cache.registry.get_radix_cache_factory",
                 f"{_SRT}.radix_cache:pask_radix_cache_factory"),
    Subclass("sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache", f"{_SRT}.radix_cache:PaskRadixCache",
             "sizes in schedulable tokens, compresses the segment it inserts"),
    Subclass("sglang.srt.mem_cache.unified_cache.components.full.FullComponent",
             f"{_SRT}.radix_tags:PaskFullComponent", "FULL with structure classes (component override)"),
    Stamp("pask_segment", "sglang.srt.mem_cache.base_prefix_cache.InsertParams", "the segment cap and stamp"),
    Stamp("pask_classes", "sglang.srt.mem_cache.base_prefix_cache.InsertParams", "classes of inserted tokens"),
    Stamp("metadata", "sglang.srt.mem_cache.unified_cache.components.base.ComponentData",
          "pask_runs / pask_segment keys of a tree node", ours=False),
)


def _noop_after(result, *args, **kwargs):  # the hook of a test-injected target
    return None


def declared(group: str | None = None) -> tuple:
    """The declarations of ``group`` (all with None), plus the test-injected target if any."""
    out = list(DECLARED)
    if bogus := os.environ.get(ENV_TEST_TARGET):
        g, _, target = bogus.rpartition(":")
        out.append(Hook(target, "after", f"{__name__}:_noop_after", g or PASK))
    return tuple(d for d in out if group is None or d.group == group)


# --- version ------------------------------------------------------------------------------

def installed_version() -> str:
    try:
        return os.environ.get(ENV_TEST_VERSION) or importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def version_error() -> str | None:
    have = installed_version()
    if have == SGLANG_VERSION:
        return None
    if os.environ.get(ENV_ALLOW_VERSION) == "1":
        logger.warning("sglang_pask: SGLang %s is installed, the plugin is written for %s (%s=1)",
                       have, SGLANG_VERSION, ENV_ALLOW_VERSION)
        return None
    return (f"SGLang {have} is installed, the plugin is written for SGLang {SGLANG_VERSION} "
            f"(set {ENV_ALLOW_VERSION}=1 to start anyway)")


# --- static pre-flight (no SGLang import) ----------------------------------------------------

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


def preflight(groups: tuple[str, ...] = (ALWAYS, PASK)) -> str | None:
    """The first reason the plugin cannot run on the installed SGLang, checked without importing
    it (the launcher's check, well under a second); None when all is in order."""
    if err := version_error():
        return err
    for d in declared():
        if d.group in groups:
            for name in d.names():
                if err := static_error(name):
                    return f"SGLang target {name} does not resolve: {err}"
    return None


# --- run time ------------------------------------------------------------------------------

def resolve(dotted: str):
    """``dotted`` (``module.attr.attr`` or ``module:attr``), imported; raises LookupError with
    the part that is missing."""
    if ":" in dotted:
        return pkgutil.resolve_name(dotted)
    parts = dotted.split(".")
    i = len(parts)
    while i > 1 and _find_spec(".".join(parts[:i])) is None:
        i -= 1
    obj = importlib.import_module(".".join(parts[:i]))
    for k in range(i, len(parts)):
        if not hasattr(obj, parts[k]):
            raise LookupError(f"{'.'.join(parts[:k])} has no attribute {parts[k]!r}")
        obj = getattr(obj, parts[k])
    return obj


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _installed(target: str, fn) -> bool:
    """Whether ``fn`` is in the wrapper chain now bound at ``target`` (HookRegistry's wrappers
    close over their hook and keep the wrapped function as ``__wrapped__``)."""
    owner_path, attr = target.rsplit(".", 1)
    owner = resolve(owner_path)
    raw = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if isinstance(raw, (classmethod, staticmethod)):
        raw = raw.__func__
    seen = 0
    while raw is not None and seen < 64:
        if any(_cell(c) is fn for c in getattr(raw, "__closure__", None) or ()):
            return True
        raw, seen = getattr(raw, "__wrapped__", None), seen + 1
    return False


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def check(d) -> str | None:
    """Why the (applied) declaration ``d`` is not in force in this process, or None."""
    try:
        if isinstance(d, Hook):
            resolve(d.target)
            if not _installed(d.target, resolve(d.hook)):
                return f"hook {d.hook} is not installed on {d.target}"
        elif isinstance(d, Registration):
            if resolve(d.lookup)(d.name) is not resolve(d.factory):
                return f"{d.register}({d.name!r}) did not register {d.factory}"
        elif isinstance(d, Subclass):
            if not issubclass(resolve(d.cls), resolve(d.base)):
                return f"{d.cls} is not a subclass of {d.base}"
        else:
            cls = resolve(d.on)
            if d.ours and not cls.__dictoffset__:
                return f"cannot stamp {d.name} on {d.on}: its instances take no new attributes"
            if d.ours and (hasattr(cls, d.name) or _sglang_uses(cls, d.name)):
                return f"cannot stamp {d.name} on {d.on}: SGLang uses that name"
            fields = getattr(cls, "__dataclass_fields__", {})
            if not d.ours and d.name not in fields and not hasattr(cls, d.name):
                return f"{d.on} has no field {d.name!r}"
    except Exception as e:  # ImportError, LookupError, AttributeError, ...
        return f"SGLang target {_first_name(d)} does not resolve: {e}"
    return None


def _sglang_uses(cls, name: str) -> bool:
    """Whether the source of ``cls`` or an SGLang base of it mentions ``.name`` (an instance
    attribute set in a method is not on the class)."""
    import inspect

    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == "sglang":
            try:
                if re.search(rf"\.{re.escape(name)}\b", inspect.getsource(klass)):
                    return True
            except (OSError, TypeError):
                continue
    return False


def _first_name(d) -> str:
    return d.names()[0]


_applied: set[str] = set()


def apply(group: str) -> None:
    """Register and apply ``group``'s hooks and registrations (once per process), then check
    every declaration of the group; raises :class:`SeamError` naming the first failure."""
    if group in _applied:
        return
    _applied.add(group)
    if err := version_error():
        raise SeamError(err)
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    items = declared(group)
    for d in items:
        if isinstance(d, Hook):
            try:
                fn = resolve(d.hook)
            except Exception as e:
                raise SeamError(f"hook {d.hook} does not resolve: {e}") from None
            HookRegistry.register(d.target, fn, HookType[d.kind.upper()])
    HookRegistry.apply_hooks()
    for d in items:
        if isinstance(d, Registration):
            try:
                if resolve(d.lookup)(d.name) is None:
                    resolve(d.register)(d.name, resolve(d.factory))
            except Exception as e:
                raise SeamError(f"SGLang target {d.register} does not resolve: {e}") from None
    for d in items:
        if err := check(d):
            raise SeamError(err)
    logger.info("sglang_pask: seam %r applied and checked (%d declarations, SGLang %s)",
                group, len(items), installed_version())


def main() -> int:
    """``python -m sglang_pask.srt.seam``: the pre-flight as a command, every group (the launcher
    runs it before it imports SGLang). Prints one line and exits 1 when the plugin cannot run on
    the installed SGLang; silent and 0 otherwise."""
    import sys

    if err := preflight():
        print(f"error: sglang_pask: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
