"""SGLang plugin entry point (group ``sglang.srt.plugins``, name ``pask``).

SGLang calls :func:`register` in every process it starts (launcher, scheduler, detokenizer) before
``HookRegistry.apply_hooks()``. Here it adds ``--pask-policy`` to SGLang's own argument parser and
carries the value to every process:

* ``ServerArgs.add_cli_args`` (AFTER): adds the flag to the parser SGLang builds.
* ``ServerArgs.from_cli_args`` (AROUND): validates the file -- envelope, the full policy schema,
  and its binding to the served model's ``config.json`` (shape, then fingerprint) -- failing fast
  with one line before any process is spawned; then records the path as
  ``server_args._pask_policy`` (underscore attributes survive pickling into subprocesses) and
  ``$SGLANG_PASK_POLICY`` (inherited by children, and the way to enable PASK for
  ``sglang.Engine``, which rejects unknown keyword arguments).

With a policy, the PASK hooks (:mod:`.tag_hooks`) are registered too: in child processes at
``register()`` (the variable is inherited), in the launcher once the flag is parsed (plugins load
there before argument parsing, so the hooks are applied late; SGLang's registry propagates them to
modules that imported the targets already). ``--pask-tag-log DIR`` (``$SGLANG_PASK_TAG_LOG``)
makes them write each request's tags to DIR.

Invariant: with no policy set, nothing else is hooked and SGLang behaves as stock.
"""

from __future__ import annotations

import argparse
import logging
import os

from sglang_pask.policy import PolicyError
from sglang_pask.srt import serving
from sglang_pask.srt.tag_log import ENV_TAG_LOG

logger = logging.getLogger("sglang_pask")

ENV_POLICY = serving.ENV_POLICY
FLAG = "--pask-policy"
TAG_LOG_FLAG = "--pask-tag-log"
#: flag -> (dest, environment variable, type, help) of the persistence flags (:mod:`.serving`)
PERSIST_FLAGS = {
    "--pask-method": ("pask_method", serving.ENV_METHOD, str,
                      "KV method the server runs (default pask; also streaming, random, full)"),
    "--pask-budget": ("pask_budget", serving.ENV_BUDGET, float,
                      "KV budget b in (0, 1] (default: the policy's)"),
    "--pask-schedule": ("pask_schedule", serving.ENV_SCHEDULE, str,
                        "when to compress: continuous or prefill (default: the method's)"),
    "--pask-interval": ("pask_interval", serving.ENV_INTERVAL, int,
                        "decode steps between budget checks under continuous (default 1)"),
    "--pask-segment": ("pask_segment", serving.ENV_SEGMENT, str,
                       "the shared segment: none (default: the whole prompt per request, radix cache off) "
                       "or system (the system/tools message, compressed once and, with the radix cache "
                       "on, shared through it)"),
    "--pask-segment-budget": ("pask_segment_budget", serving.ENV_SEGMENT_BUDGET, float,
                              "budget of the shared segment (default: --pask-budget)"),
    "--pask-own-budget": ("pask_own_budget", serving.ENV_OWN_BUDGET, float,
                          "budget of each request's own tokens after the shared segment (default: "
                          "--pask-budget counting the segment's slots; 1: only the segment is compressed)"),
    "--pask-segment-prefill": ("pask_segment_prefill", serving.ENV_SEGMENT_PREFILL, str,
                               "what each request's own tokens are prefilled against: compressed (default: "
                               "the segment as kept, reused from the radix cache) or full (the whole "
                               "segment, recomputed per request; the tree shares its memory)"),
    "--pask-kept-log": ("pask_kept_log", serving.ENV_KEPT_LOG, str,
                        "(debug) write the kept positions of every compression to JSON lines in DIR"),
}
#: SGLang features the per-unit pools do not support yet: flag dest -> why
_REFUSED = {
    "enable_hierarchical_cache": "hierarchical cache",
    "speculative_algorithm": "speculative decoding",
    "enable_unified_memory": "the unified memory pool",
    "enable_dp_attention": "data-parallel attention",
}

RADIX_BACKEND = "pask"
_ADD_CLI_ARGS = "sglang.srt.server_args.ServerArgs.add_cli_args"
_FROM_CLI_ARGS = "sglang.srt.server_args.ServerArgs.from_cli_args"


def _add_flag(_result, parser: argparse.ArgumentParser, *args, **kwargs) -> None:
    parser.add_argument(
        FLAG,
        dest="pask_policy",
        type=str,
        default=None,
        metavar="PATH",
        help="sglang_pask: a PASK policy file (JSON, format pask-policy/1). "
        "Without it the plugin is inert.",
    )
    parser.add_argument(
        TAG_LOG_FLAG,
        dest="pask_tag_log",
        type=str,
        default=None,
        metavar="DIR",
        help="sglang_pask (debug): with a policy, write each request's prompt and output structure "
        "tags to JSON lines in DIR.",
    )
    for flag, (dest, _env, typ, text) in PERSIST_FLAGS.items():
        parser.add_argument(flag, dest=dest, type=typ, default=None,
                            metavar=flag.rsplit("-", 1)[-1].upper(), help=f"sglang_pask: {text}.")


def _persistence_args(args: argparse.Namespace, path: str) -> None:
    """Check the persistence flags (building the serving config once, so errors name the flag),
    export them to child processes, and set what the per-unit pools need: page size 1, no
    overlap scheduling (drops read the just-written state) and the radix cache: with
    ``--pask-segment system`` SGLang's setting, as the PASK radix cache (``--radix-cache-backend
    pask``: it caches only compressed shared segments, :mod:`.radix_cache`); otherwise off (a
    sequence compressed per request must not be shared as a prefix)."""
    values = {flag: getattr(args, dest, None) for flag, (dest, *_r) in PERSIST_FLAGS.items()}
    radix = not getattr(args, "disable_radix_cache", False)
    try:
        config = serving.build_config(path, method=values["--pask-method"], budget=values["--pask-budget"],
                                      schedule=values["--pask-schedule"], interval=values["--pask-interval"],
                                      model_dir=getattr(args, "model_path", None),
                                      segment=values["--pask-segment"], radix=radix,
                                      segment_budget=values["--pask-segment-budget"],
                                      own_budget=values["--pask-own-budget"],
                                      segment_prefill=values["--pask-segment-prefill"])
    except (ValueError, TypeError) as e:
        raise SystemExit(f"error: {e}") from None
    radix = config.radix
    backend = getattr(args, "radix_cache_backend", None)
    if radix and backend not in (None, "", RADIX_BACKEND):
        raise SystemExit(f"error: {FLAG}: --radix-cache-backend {backend} cannot hold per-unit KV "
                         f"(PASK uses its own, {RADIX_BACKEND!r}; or pass --disable-radix-cache)")
    for dest, what in _REFUSED.items():
        if getattr(args, dest, None):
            raise SystemExit(f"error: {FLAG}: {what} is not supported with per-unit KV pools")
    if getattr(args, "page_size", None) not in (None, 1):
        raise SystemExit(f"error: {FLAG}: --page-size must be 1 with per-unit KV pools")
    args.page_size = 1
    args.disable_overlap_schedule = True
    if radix:
        args.radix_cache_backend = RADIX_BACKEND
        os.environ[serving.ENV_RADIX] = "1"
    else:
        if not getattr(args, "disable_radix_cache", False):
            logger.info("sglang_pask: radix cache disabled (compressed prefixes are shared only with "
                        "--pask-segment system)")
        args.disable_radix_cache = True
        os.environ.pop(serving.ENV_RADIX, None)
    for flag, (dest, env, _t, _h) in PERSIST_FLAGS.items():
        v = values[flag]
        if v is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = os.path.abspath(v) if dest == "pask_kept_log" else str(v)
    serving.active_config.cache_clear()
    logger.info("sglang_pask: persistence: %s", config.describe())


def _capture(original, cls, args: argparse.Namespace, *rest, **kwargs):
    path = getattr(args, "pask_policy", None)
    if path:
        try:
            from sglang_pask.policy import load_policy

            load_policy(path, model_dir=getattr(args, "model_path", None))
        except PolicyError as e:
            # SystemExit with a message: one line on stderr, exit status 1, nothing spawned.
            raise SystemExit(f"error: {FLAG}: {e}") from None
        path = os.path.abspath(path)
        os.environ[ENV_POLICY] = path
        _persistence_args(args, path)
        tag_log = getattr(args, "pask_tag_log", None)
        if tag_log:
            os.environ[ENV_TAG_LOG] = os.path.abspath(tag_log)
        _enable_pask_hooks(apply_now=True)
    elif getattr(args, "pask_tag_log", None):
        raise SystemExit(f"error: {TAG_LOG_FLAG} needs {FLAG}")
    else:
        given = [flag for flag, (dest, *_r) in PERSIST_FLAGS.items() if getattr(args, dest, None) is not None]
        if given:
            raise SystemExit(f"error: {', '.join(given)} need{'s' if len(given) == 1 else ''} {FLAG}")
    server_args = original(cls, args, *rest, **kwargs)
    if path:
        server_args._pask_policy = path
        logger.info("sglang_pask: policy %s", path)
    return server_args


def active_policy_path(server_args=None) -> str | None:
    """The policy path in force in this process, or None when PASK is off."""
    path = getattr(server_args, "_pask_policy", None) if server_args is not None else None
    return path or os.environ.get(ENV_POLICY) or None


_hooks_enabled = False


def _enable_pask_hooks(apply_now: bool) -> None:
    global _hooks_enabled
    if _hooks_enabled:
        return
    _hooks_enabled = True
    from sglang_pask.srt import error_hooks, persist_hooks, radix_cache, tag_hooks

    tag_hooks.register_hooks()
    persist_hooks.register_hooks()
    error_hooks.register_hooks()
    radix_cache.register(RADIX_BACKEND)
    if apply_now:
        from sglang.srt.plugins.hook_registry import HookRegistry

        HookRegistry.apply_hooks()


def register() -> None:
    """Entry point SGLang runs in every process. Only registers hooks; imports nothing heavy."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_pask.launch_server import child_ignores_ctrl_c

    child_ignores_ctrl_c()

    HookRegistry.register(_ADD_CLI_ARGS, _add_flag, HookType.AFTER)
    HookRegistry.register(_FROM_CLI_ARGS, _capture, HookType.AROUND)
    policy = os.environ.get(ENV_POLICY)
    if policy:
        _enable_pask_hooks(apply_now=False)
        logger.info("sglang_pask: plugin loaded in pid %d with policy %s", os.getpid(), policy)
    else:
        logger.info("sglang_pask: plugin loaded in pid %d (no policy: inert)", os.getpid())
