"""The one seam between the plugin and SGLang: every hook target, every registration into an
SGLang registry, every SGLang class we subclass, every attribute we stamp on SGLang objects, every exception
handler we wrap on SGLang's FastAPI app and every middleware we add to it, declared here as data
(:data:`DECLARED`), applied here and checked here.

Two groups: :data:`ALWAYS` (the CLI flag hooks, in every process) and :data:`PASK` (only with a
policy). :func:`apply` registers a group's hooks with SGLang's ``HookRegistry``, applies them,
registers its backends, wraps its app handlers, and then checks -- itself, since
``HookRegistry.apply_hooks`` only logs a target that fails to resolve -- that the installed SGLang
is :data:`SGLANG_VERSION`, that every declared name resolves, that every hook function is really
installed on its target, that every registration reads back and that the app holds every
handler (in the process that serves HTTP). Any failure raises :class:`SeamError` (a
``SystemExit``: SGLang's plugin loader catches ``Exception`` only) with one line naming it; so no
process runs PASK half-applied.

The launcher runs :mod:`.preflight` before it imports SGLang (that takes seconds): the same
version check and a static resolution of every declared SGLang name in the installed sources,
so a mismatch is refused in well under 5 s with the same line.

Test hooks (:mod:`sglang_pask.environ`): ``SGLANG_PASK_TEST_BOGUS_TARGET=[group:]dotted.path``
adds an AFTER hook on that target (group default ``pask``); ``SGLANG_PASK_TEST_SGLANG_VERSION``
stands in for the installed version.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import pkgutil
import re
from dataclasses import dataclass

from sglang_pask.environ import envs

logger = logging.getLogger("sglang_pask")

#: the SGLang release this plugin is written and tested against
SGLANG_VERSION = "0.5.23"
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


@dataclass(frozen=True)
class AppHandler:
    """``hook`` (ours, ``module:function``, called as ``await hook(original, request, exc)``) wraps
    the handler SGLang's FastAPI ``app`` (dotted) holds for exception class ``exc`` (dotted).
    SGLang registers its handlers with ``@app.exception_handler``, so hooking the module's function
    would not change what the app calls: the entry in ``app.exception_handlers`` is replaced,
    before the app serves (Starlette copies the handlers when it first builds its middleware).
    Only in the process that serves HTTP (see :func:`_serves_http`)."""
    app: str
    exc: str
    hook: str
    group: str = PASK

    def names(self) -> tuple[str, ...]:
        return (self.app,)


@dataclass(frozen=True)
class AppMiddleware:
    """``cls`` (ours, ``module:Class``, an ASGI middleware) added to SGLang's FastAPI ``app``
    (dotted) as its innermost user middleware (after SGLang's own, so it sees the body SGLang's
    decompression hands on), before the app serves. Only in the process that serves HTTP."""
    app: str
    cls: str
    group: str = PASK

    def names(self) -> tuple[str, ...]:
        return (self.app,)


_CHAT = "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat"
_XGRAMMAR = "sglang.srt.constrained.xgrammar_backend.XGrammarGrammar"
_CFG = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
_COMMON = "sglang.srt.mem_cache.common"
_SRT = "sglang_pask.srt"
#: our subsystems, as SGLang's: the HTTP process, the scheduler, KV memory, attention
_ENTRY, _MGR, _MEM, _ATTN = (f"{_SRT}.{sub}" for sub in ("entrypoints", "managers", "mem_cache", "attention"))

DECLARED: tuple[Hook | Registration | Subclass | Stamp | AppHandler | AppMiddleware, ...] = (
    # -- always: the CLI flags (plugin) --
    Hook("sglang.srt.server_args.ServerArgs.add_cli_args", "after", f"{_SRT}.plugin:_add_flag", ALWAYS),
    Hook("sglang.srt.server_args.ServerArgs.from_cli_args", "around", f"{_SRT}.plugin:_capture", ALWAYS),
    Stamp("_pask_policy", "sglang.srt.server_args.ServerArgs",
          "the policy path, pickled with the server args into child processes", group=ALWAYS),
    # -- always: a requested stop is not a crash (process; a no-op outside our launcher) --
    Hook("sglang.srt.utils.common.kill_process_tree", "before", "sglang_pask.process:before_final_kill", ALWAYS),
    # -- tags (entrypoints.prompt_tags, managers.output_tags, managers.request_tags) --
    Hook(f"{_CHAT}._convert_to_internal_request", "after", f"{_ENTRY}.prompt_tags:after_convert"),
    Hook(f"{_XGRAMMAR}.accept_token", "around", f"{_MGR}.output_tags:around_accept"),
    Hook(f"{_XGRAMMAR}.rollback", "around", f"{_MGR}.output_tags:around_rollback"),
    Hook(f"{_COMMON}.release_kv_cache", "around", f"{_MGR}.output_tags:around_release"),
    Stamp("_pask_prompt_tagger", _CHAT, "the prompt tagger, built once per HTTP process"),
    Stamp("_pask_tracker", _XGRAMMAR, "the request's output structure tracker"),
    Stamp("_pask_vocab", _XGRAMMAR, "xgrammar's decoded vocabulary, for the tracker"),
    Stamp("_pask_tags", "sglang.srt.managers.schedule_batch.Req", "the request's structure tags"),
    Stamp("rid", "sglang.srt.managers.io_struct.GenerateReqInput", "set when absent", ours=False),
    Stamp("kv_hints", "sglang.srt.managers.io_struct.GenerateReqInput", "carries the tags", ours=False),
    Stamp("extra_key", "sglang.srt.managers.io_struct.GenerateReqInput",
          "the shared segment's radix namespace", ours=False),
    # -- the HTTP edge (edge): bad ids, client-written sglang_pask.* hints, non-object bodies --
    Hook("sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request", "after",
         f"{_ENTRY}.edge:after_validate_one_request"),
    AppMiddleware("sglang.srt.entrypoints.http_server.app", f"{_ENTRY}.edge:JsonObjectBody"),
    # -- one-line request errors (entrypoints.error_hooks, managers.prompt_limits) --
    Hook(f"{_CHAT}._validate_request", "after", f"{_ENTRY}.error_hooks:after_validate"),
    AppHandler("sglang.srt.entrypoints.http_server.app", "fastapi.exceptions.RequestValidationError",
               f"{_ENTRY}.error_hooks:around_validation_handler"),
    Hook(f"{_CFG}.configure", "after", f"{_MGR}.prompt_limits:after_configure"),
    Hook("sglang.srt.managers.utils.validate_input_length", "after", f"{_MGR}.prompt_limits:after_validate_length"),
    # -- the scheduler owns its PaskState (state) --
    Hook("sglang.srt.managers.scheduler.Scheduler.init_model_worker", "before",
         f"{_SRT}.state:before_init_model_worker"),
    Stamp("_pask_state", "sglang.srt.managers.scheduler.Scheduler",
          "this scheduler's PASK state: every counter, log and cache (/server_info reads it)"),
    # -- per-unit KV pools and compression (persist_hooks, segments) --
    Hook(f"{_CFG}._build_mha_kv_pool", "around", f"{_MGR}.persist_hooks:around_build_pool"),
    Hook(f"{_CFG}._build_token_to_kv_pool_allocator", "around", f"{_MGR}.persist_hooks:around_build_allocator"),
    Hook(f"{_CFG}.configure", "around", f"{_MGR}.persist_hooks:around_configure"),
    Hook("sglang.srt.layers.attention.attention_registry.attn_backend_wrapper", "around",
         f"{_MGR}.persist_hooks:around_attn_wrapper"),
    Hook("sglang.srt.managers.schedule_batch.ScheduleBatch.maybe_evict_swa", "around",
         f"{_MGR}.persist_hooks:around_evict"),
    Hook("sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController."
         "_add_memory_usage", "after", f"{_MGR}.persist_hooks:after_memory_usage"),
    Hook(f"{_COMMON}.release_kv_cache", "around", f"{_MGR}.persist_hooks:around_release"),
    Hook("sglang.srt.managers.schedule_policy.PrefillAdder._select_prefill_admission", "around",
         f"{_MGR}.prefill_hooks:around_select_admission"),
    Hook(f"{_COMMON}.checkpoint_kv_cache", "around", f"{_MGR}.prefill_hooks:around_checkpoint"),
    # -- the learned scorer (learned_scores): capture the attention input in the forwards that run --
    Hook("sglang.srt.model_executor.model_runner.ModelRunner.init_attention_backends", "after",
         f"{_ATTN}.learned_scores:after_init_backends"),
    Hook("sglang.srt.model_executor.model_runner.ModelRunner.forward", "around",
         f"{_ATTN}.learned_scores:around_forward"),
    # -- the chunked prefill rule (chunked; admission and checkpoint through prefill_hooks) --
    Hook("sglang.srt.managers.tp_worker.TpModelWorker.get_worker_info", "around",
         f"{_MGR}.chunked:around_worker_info"),
    Hook("sglang.srt.managers.scheduler.Scheduler.init_req_max_new_tokens", "around",
         f"{_MGR}.chunked:around_init_max_new_tokens"),
    Hook("sglang.srt.managers.schedule_policy.PrefillAdder.add_chunked_req", "around",
         f"{_MGR}.chunked:around_add_chunked_req"),
    Stamp("chunked_req_limit", "sglang.srt.managers.schedule_policy.PrefillAdder",
          "capped at the next chunk end during add_chunked_req", ours=False),
    Subclass("sglang.srt.mem_cache.memory_pool.KVCache", f"{_MEM}.pools:PaskKVPool", "per-unit KV pool"),
    Subclass("sglang.srt.mem_cache.allocator.token.TokenToKVPoolAllocator", f"{_MEM}.pools:PaskAllocator",
             "full ids + per-unit slots"),
    Subclass("sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend",
             f"{_ATTN}.torch_native_backend:PaskTorchNativeAttnBackend", "attention over per-unit pools (CPU)"),
    Subclass("sglang.srt.layers.attention.base_attn_backend.AttentionBackend",
             f"{_ATTN}.flashinfer_backend:PaskFlashInferAttnBackend", "attention over per-unit pools (GPU)"),
    # -- the radix cache of shared segments (radix_cache, radix_tags) --
    Registration(RADIX_BACKEND, "sglang.srt.mem_cache.registry.register_radix_cache_backend",
                 "sglang.srt.mem_cache.registry.get_radix_cache_factory",
                 f"{_MEM}.radix_cache:pask_radix_cache_factory"),
    Subclass("sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache", f"{_MEM}.radix_cache:PaskRadixCache",
             "sizes in schedulable tokens, compresses the segment it inserts"),
    Subclass("sglang.srt.mem_cache.unified_cache.components.full.FullComponent",
             f"{_MEM}.radix_tags:PaskFullComponent", "FULL with structure classes (component override)"),
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
    if bogus := envs.SGLANG_PASK_TEST_BOGUS_TARGET.get():
        g, _, target = bogus.rpartition(":")
        out.append(Hook(target, "after", f"{__name__}:_noop_after", g or PASK))
    return tuple(d for d in out if group is None or d.group == group)


# --- version ------------------------------------------------------------------------------

def installed_version() -> str:
    try:
        return envs.SGLANG_PASK_TEST_SGLANG_VERSION.get() or importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def version_error() -> str | None:
    have = installed_version()
    if have == SGLANG_VERSION:
        return None
    allow = envs.SGLANG_PASK_ALLOW_SGLANG_VERSION
    if allow.get():
        logger.warning("sglang_pask: SGLang %s is installed, the plugin is written for %s (%s=1)",
                       have, SGLANG_VERSION, allow.name)
        return None
    return (f"SGLang {have} is installed, the plugin is written for SGLang {SGLANG_VERSION} "
            f"(set {allow.name}=1 to start anyway)")


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
    return _in_chain(raw, fn)


def _in_chain(raw, fn) -> bool:
    """Whether a wrapper in the chain from ``raw`` (following ``__wrapped__``) closes over ``fn``."""
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


def _serves_http() -> bool:
    """Whether this process is the one that serves SGLang's FastAPI app: the launcher, which no
    ``multiprocessing`` parent started (the scheduler and detokenizer are its children). A child
    neither imports the app's module (about 2 s) nor wraps or checks its handlers."""
    import multiprocessing

    return multiprocessing.parent_process() is None


def add_middleware(d: AppMiddleware) -> None:
    """Append ``d.cls`` to the app's middleware; raises :class:`SeamError` when the app already
    serves (Starlette builds its middleware stack on the first request)."""
    try:
        app, cls = resolve(d.app), resolve(d.cls)
    except Exception as e:
        raise SeamError(f"SGLang target {d.app} does not resolve: {e}") from None
    if getattr(app, "middleware_stack", None) is not None:
        raise SeamError(f"{d.app} already serves: middleware {d.cls} can no longer be added")
    from starlette.middleware import Middleware

    if not any(m.cls is cls for m in app.user_middleware):
        app.user_middleware.append(Middleware(cls))


def wrap_handler(d: AppHandler) -> None:
    """``d.hook`` around the handler ``d.app`` holds for ``d.exc`` (the wrapper keeps that handler
    as ``__wrapped__``); raises :class:`SeamError` when there is none or the app already serves."""
    try:
        app, exc, fn = resolve(d.app), resolve(d.exc), resolve(d.hook)
    except Exception as e:
        raise SeamError(f"SGLang target {d.app} does not resolve: {e}") from None
    original = app.exception_handlers.get(exc)
    if original is None:
        raise SeamError(f"{d.app} holds no handler for {d.exc}")
    if getattr(app, "middleware_stack", None) is not None:
        raise SeamError(f"{d.app} already serves: its handler for {d.exc} can no longer be wrapped")

    async def handler(request, error):
        return await fn(original, request, error)

    handler.__wrapped__ = original
    app.exception_handlers[exc] = handler


def check(d) -> str | None:
    """Why the (applied) declaration ``d`` is not in force in this process, or None."""
    try:
        if isinstance(d, AppMiddleware):
            if _serves_http() and not any(m.cls is resolve(d.cls) for m in resolve(d.app).user_middleware):
                return f"middleware {d.cls} is not in {d.app}'s stack"
        elif isinstance(d, AppHandler):
            if _serves_http() and not _in_chain(resolve(d.app).exception_handlers.get(resolve(d.exc)),
                                                resolve(d.hook)):
                return f"hook {d.hook} is not {d.app}'s handler of {d.exc}"
        elif isinstance(d, Hook):
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
            if not d.ours and d.name not in fields and not hasattr(cls, d.name) and not _sglang_uses(cls, d.name):
                return f"{d.on} has no field {d.name!r}"
    except Exception as e:  # ImportError, LookupError, AttributeError, ...
        return f"SGLang target {d.names()[0]} does not resolve: {e}"
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


_applied: set[str] = set()


class _QuietOwnHooks:
    """A filter for SGLang's hook registry logger while the seam applies: drops its per-target
    "Applied N hook(s)" line and its "Multiple AROUND hooks" warning for targets the seam declares
    (ours call the original, and the seam's own summary line and checks follow); everything about
    other targets, and every other warning, passes."""

    def __init__(self, targets: set[str]):
        self.targets = targets

    def filter(self, record) -> bool:
        msg = str(record.msg)
        if msg.startswith("Applied ") or msg.startswith("Multiple AROUND hooks"):
            return not (record.args and record.args[1 if msg.startswith("Applied ") else 0] in self.targets)
        return True


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
    quiet = _QuietOwnHooks({d.target for d in declared() if isinstance(d, Hook)})
    registry_log = logging.getLogger("sglang.srt.plugins.hook_registry")
    registry_log.addFilter(quiet)
    try:
        HookRegistry.apply_hooks()
    finally:
        registry_log.removeFilter(quiet)
    for d in items:
        if isinstance(d, AppHandler) and _serves_http():
            wrap_handler(d)
        elif isinstance(d, AppMiddleware) and _serves_http():
            add_middleware(d)
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
