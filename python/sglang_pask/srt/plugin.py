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

Every hook, registration and attribute stamp is declared in :mod:`.seam`, which applies and
checks them. With a policy, the PASK group is applied too: in child processes at ``register()``
(the variable is inherited), in the launcher once the flag is parsed (plugins load there before
argument parsing, so the hooks are applied late; SGLang's registry propagates them to modules that
imported the targets already). ``--pask-tag-log DIR`` (``$SGLANG_PASK_TAG_LOG``)
makes them write each request's tags to DIR.

Invariant: with no policy set, nothing else is hooked and SGLang behaves as stock (under our
launcher, one more ALWAYS hook stops SGLang's subprocess watchdog before its final cleanup:
:func:`sglang_pask.process.before_final_kill`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os

from sglang_pask.environ import SEGMENT_FLAGS, SERVER_FLAGS, envs, server_flag
from sglang_pask.policy.flag import FLAG, TAG_LOG_FLAG, flag_error
from sglang_pask.policy.operating_point import SegmentRule
from sglang_pask.srt import seam, serving
from sglang_pask.srt.managers import request_tags

logger = logging.getLogger("sglang_pask")

#: the persistence flags other than the segment rule's (:mod:`.serving`): declared in
#: :data:`sglang_pask.environ.SERVER_FLAGS` with every other ``--pask-*`` flag
PERSIST_FLAGS = tuple(f for f in SERVER_FLAGS if f.name not in (FLAG, TAG_LOG_FLAG, *SEGMENT_FLAGS))
#: the segment rule's flags (--pask-segment, --pask-segment-budget, --pask-own-budget,
#: --pask-segment-prefill): defined, read and validated by SegmentRule alone
_SEGMENT_PREFIX, _SEGMENT_DEST = "pask-", "pask_"


def _given_flags(args: argparse.Namespace) -> list[str]:
    """Every persistence flag given on the command line."""
    given = [f.name for f in PERSIST_FLAGS if getattr(args, f.dest, None) is not None]
    names = SegmentRule.flag_names(_SEGMENT_PREFIX)
    return given + [names[f] for f in SegmentRule.overrides(args, _SEGMENT_DEST)]


#: SGLang features the per-unit pools do not support yet: flag dest -> why
_REFUSED = {
    "enable_hierarchical_cache": "hierarchical cache",
    "speculative_algorithm": "speculative decoding",
    "enable_unified_memory": "the unified memory pool",
    # DP attention shares one batch across attention-DP ranks; plain --dp-size (one scheduler and
    # its own pools per rank, SGLang's DataParallelController) is supported
    "enable_dp_attention": "data-parallel attention",
}

RADIX_BACKEND = seam.RADIX_BACKEND


def _add_flag(_result, parser: argparse.ArgumentParser, *args, **kwargs) -> None:
    for f in (server_flag(FLAG), server_flag(TAG_LOG_FLAG), *PERSIST_FLAGS):
        parser.add_argument(f.name, dest=f.dest, type=f.type, default=None, metavar=f.metavar,
                            help=f"sglang_pask: {f.doc}.")
    SegmentRule.add_flags(parser, prefix=_SEGMENT_PREFIX, dest_prefix=_SEGMENT_DEST, help_prefix="sglang_pask: ")


def _persistence_args(args: argparse.Namespace, path: str) -> None:
    """Resolve the persistence flags against the policy (building the serving config once, so
    errors name the flag), print the operating point and any override, hand the flags to child
    processes as one value (``$SGLANG_PASK_SERVING``), and set what the per-unit pools need: page
    size 1, no overlap scheduling (drops read the just-written state) and the radix cache: with a
    shared segment (``--pask-segment system``, or the policy's) SGLang's setting, as the PASK
    radix cache (``--radix-cache-backend pask``: it caches only compressed shared segments,
    :mod:`.mem_cache.radix_cache`); otherwise off (a sequence compressed per request must not be shared as a
    prefix)."""
    overrides = {k: getattr(args, d) for k, d in (("schedule", "pask_schedule"), ("interval", "pask_interval"))
                 if getattr(args, d, None) is not None}
    overrides.update(SegmentRule.overrides(args, _SEGMENT_DEST))
    kept_log = getattr(args, "pask_kept_log", None)
    flags = serving.ServingFlags(method=getattr(args, "pask_method", None), budget=getattr(args, "pask_budget", None),
                                 overrides=overrides, radix=not getattr(args, "disable_radix_cache", False),
                                 kept_log=os.path.abspath(kept_log) if kept_log else None,
                                 prefill_chunk=getattr(args, "pask_prefill_chunk", None),
                                 scorer=os.path.abspath(scorer) if (scorer := getattr(args, "pask_scorer", None))
                                 else None)
    try:
        config = serving.build_config(path, flags, model_dir=getattr(args, "model_path", None))
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
    else:
        if not getattr(args, "disable_radix_cache", False):
            logger.info("sglang_pask: radix cache disabled (compressed prefixes are shared only with "
                        "--pask-segment system)")
        args.disable_radix_cache = True
    envs.SGLANG_PASK_SERVING.set(dataclasses.replace(flags, radix=radix).to_json())
    serving.active_config.cache_clear()
    logger.info("sglang_pask: persistence: %s", config.describe())
    logger.info("sglang_pask: operating point: %s", config.resolved.sources_line())
    from sglang_pask import ops

    logger.info("sglang_pask: kernels: %s", ops.implementation())
    if line := config.resolved.override_line(serving.FLAG_NAMES):
        # a warning: printed even before SGLang configures logging (this runs in argument parsing)
        logger.warning("sglang_pask: %s %s", os.path.basename(path), line)


#: budget of a policy-free method given no --pask-budget (the project's headline operating budget)
POLICY_FREE_BUDGET = 0.33


def policy_free_stand_in(args: argparse.Namespace) -> str | None:
    """``--pask-method M`` for a method that reads nothing of a policy (``streaming``, ``random``,
    ``full``) and no ``--pask-policy``: the path of a stand-in policy for the served model -- its
    structure prior (one group, ``calibration: null``), which gives the method only the model's
    layer shape, a default budget (:data:`POLICY_FREE_BUDGET`) and the default operating point
    (``continuous``, as StreamingLLM's authors run it) -- written under the temp folder, named by
    the model's fingerprint. None for any other case (``pask`` needs a real policy; an unknown
    method is named by the serving config)."""
    from sglang_pask.methods import METHODS

    name = getattr(args, "pask_method", None)
    model = getattr(args, "model_path", None)
    if not name or name == serving.DEFAULT_METHOD or name not in METHODS or not model:
        return None
    import tempfile

    from sglang_pask.policy.binding import ModelBinding
    from sglang_pask.policy.document import save_policy
    from sglang_pask.policy.prior import prior_policy

    binding = ModelBinding.from_model(model)
    policy = prior_policy(binding, 1, POLICY_FREE_BUDGET, name=f"{name} without a policy")
    folder = os.path.join(tempfile.gettempdir(), "sglang_pask")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"stand-in-{binding.fingerprint.split(':')[-1]}.json")
    tmp = f"{path}.{os.getpid()}"
    save_policy(policy, tmp)
    os.replace(tmp, path)  # atomic: a server starting beside this one never reads half a file
    logger.info("sglang_pask: --pask-method %s without --pask-policy: the model's shape only (%s)", name, path)
    return path


def _capture(original, cls, args: argparse.Namespace, *rest, **kwargs):
    path = getattr(args, "pask_policy", None) or policy_free_stand_in(args)
    # sglang_pask.launch_server made this same check before SGLang loaded; `python -m
    # sglang.launch_server` has only this one. SystemExit with a message: one line on stderr, exit
    # status 1, nothing spawned.
    if err := flag_error(path, getattr(args, "model_path", None), getattr(args, "pask_tag_log", None)):
        raise SystemExit(err)
    if path:
        path = os.path.abspath(path)
        envs.SGLANG_PASK_POLICY.set(path)
        # the tags action's signing key: made here, in the process that serves HTTP, before any
        # scheduler starts (each inherits it); a client never sees it (request_tags)
        request_tags.make_key()
        _persistence_args(args, path)
        tag_log = getattr(args, "pask_tag_log", None)
        if tag_log:
            envs.SGLANG_PASK_TAG_LOG.set(os.path.abspath(tag_log))
        _enable_pask_hooks()
    else:
        if (name := getattr(args, "pask_method", None)) and (err := serving.method_error(name)):
            raise SystemExit(f"error: {err}")  # a typo, not a missing policy
        given = _given_flags(args)
        if given:
            raise SystemExit(f"error: {', '.join(given)} need{'s' if len(given) == 1 else ''} {FLAG}")
    server_args = original(cls, args, *rest, **kwargs)
    if path:
        server_args._pask_policy = path
        logger.info("sglang_pask: policy %s", path)
    return server_args


def _enable_pask_hooks() -> None:
    """The PASK group of the seam: registered, applied and checked now, once per process (a hook
    applied later could not be checked)."""
    seam.apply(seam.PASK)


def register() -> None:
    """Entry point SGLang runs in every process: the seam's always-on group (the CLI flags), and
    with ``$SGLANG_PASK_POLICY`` (a child process) its PASK group; each applied and checked, a
    failure stops the process with one line (:class:`.seam.SeamError`)."""
    from sglang_pask.process import child_leaves_stop_to_launcher

    child_leaves_stop_to_launcher()
    seam.apply(seam.ALWAYS)
    policy = envs.SGLANG_PASK_POLICY.get()
    if policy:
        _enable_pask_hooks()
        logger.info("sglang_pask: plugin loaded in pid %d with policy %s", os.getpid(), policy)
    else:
        logger.info("sglang_pask: plugin loaded in pid %d (no policy: inert)", os.getpid())
