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

from sglang_pask.policy import PolicyError, load_policy
from sglang_pask.srt.tag_log import ENV_TAG_LOG

logger = logging.getLogger("sglang_pask")

ENV_POLICY = "SGLANG_PASK_POLICY"
FLAG = "--pask-policy"
TAG_LOG_FLAG = "--pask-tag-log"

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


def _capture(original, cls, args: argparse.Namespace, *rest, **kwargs):
    path = getattr(args, "pask_policy", None)
    if path:
        try:
            load_policy(path, model_dir=getattr(args, "model_path", None))
        except PolicyError as e:
            # SystemExit with a message: one line on stderr, exit status 1, nothing spawned.
            raise SystemExit(f"error: {FLAG}: {e}") from None
        path = os.path.abspath(path)
        os.environ[ENV_POLICY] = path
        tag_log = getattr(args, "pask_tag_log", None)
        if tag_log:
            os.environ[ENV_TAG_LOG] = os.path.abspath(tag_log)
        _enable_pask_hooks(apply_now=True)
    elif getattr(args, "pask_tag_log", None):
        raise SystemExit(f"error: {TAG_LOG_FLAG} needs {FLAG}")
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
    from sglang_pask.srt.tag_hooks import register_hooks

    register_hooks()
    if apply_now:
        from sglang.srt.plugins.hook_registry import HookRegistry

        HookRegistry.apply_hooks()


def register() -> None:
    """Entry point SGLang runs in every process. Only registers hooks; imports nothing heavy."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(_ADD_CLI_ARGS, _add_flag, HookType.AFTER)
    HookRegistry.register(_FROM_CLI_ARGS, _capture, HookType.AROUND)
    policy = os.environ.get(ENV_POLICY)
    if policy:
        _enable_pask_hooks(apply_now=False)
        logger.info("sglang_pask: plugin loaded in pid %d with policy %s", os.getpid(), policy)
    else:
        logger.info("sglang_pask: plugin loaded in pid %d (no policy: inert)", os.getpid())
