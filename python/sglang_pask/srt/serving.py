"""What the server persists: the KV method, its budget and schedule, and the layer units that get
their own KV sub-pool -- resolved once per process from the launcher's flags.

Flags (added by :mod:`.plugin`, carried to the scheduler through environment variables, like
``--pask-policy``):

* ``--pask-method M`` (default ``pask``): a method from the registry that needs no attention
  statistics (``pask``, ``streaming``, ``random``, ``full``); SnapKV, PyramidKV and H2O need
  attention statistics the server does not compute and are refused by name.
* ``--pask-budget B`` (default: the policy's budget), ``--pask-schedule S`` (default: the
  method's, as ``pask eval --backend hf``), ``--pask-interval N`` (decode steps between budget
  checks under ``continuous``).
* ``--pask-segment none|system`` (default ``none``: the whole prompt is the request's own and
  the radix cache is turned off) and ``--pask-segment-budget B_s``: the shared segment, compressed
  once at ``B_s`` (default ``B``; :mod:`sglang_pask.methods.segment`). With ``system`` and the
  radix cache on (SGLang's default), the tree caches and shares exactly each request's segment,
  compressed (:mod:`.radix_cache`); with ``--disable-radix-cache`` nothing is shared, the rule is
  the same. ``--pask-segment-prefill compressed|full``: a request's own tokens are prefilled
  against the segment as kept (default; a radix hit reuses the compressed segment's KV) or whole
  (``full``: the request recomputes the segment, which the tree then shares in memory only:
  :mod:`.segments`). Opt-in because, measured on the calib split (tiny, budget 0.33), segment
  compression keeps whole-prompt accuracy only with every own token kept (``--pask-own-budget
  1``) and the full prefill, which holds more than b of each request's tokens and gives up the
  tree's prefill reuse (README, issue 13).

Units (invariant: a partition of the model's layers into consecutive runs): a method that decides
per layer group (``per_group``, i.e. ``pask``) gets one unit per policy group; a method that may
keep a different set in every layer gets one unit per layer. Each unit has one sub-pool and one
full->unit slot mapping (:mod:`.pools`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from sglang_pask.methods import METHODS, KVMethod, make_method
from sglang_pask.methods.base import SCHEDULES

ENV_POLICY = "SGLANG_PASK_POLICY"
ENV_METHOD = "SGLANG_PASK_METHOD"
ENV_BUDGET = "SGLANG_PASK_BUDGET"
ENV_SCHEDULE = "SGLANG_PASK_SCHEDULE"
ENV_INTERVAL = "SGLANG_PASK_INTERVAL"
ENV_KEPT_LOG = "SGLANG_PASK_KEPT_LOG"
ENV_SEGMENT = "SGLANG_PASK_SEGMENT"
ENV_RADIX = "SGLANG_PASK_RADIX"
ENV_SEGMENT_BUDGET = "SGLANG_PASK_SEGMENT_BUDGET"
ENV_OWN_BUDGET = "SGLANG_PASK_OWN_BUDGET"
ENV_SEGMENT_PREFILL = "SGLANG_PASK_SEGMENT_PREFILL"

DEFAULT_METHOD = "pask"


def _needs_attention(name: str) -> Optional[str]:
    """The attention statistics method ``name`` needs (None: none). Some methods declare it as a
    property of their options (SnapKV: ``window`` or, per head, ``window_heads``); the class
    attribute is then the property object, so the default instance is asked."""
    need = METHODS[name].needs_attention
    if isinstance(need, property):
        need = need.fget(make_method(name, 0.5))
    return need


def server_methods() -> list[str]:
    """Registry names the server can run (no attention statistics needed)."""
    return [name for name in METHODS if _needs_attention(name) is None]


@dataclass(frozen=True)
class ServingConfig:
    policy_path: str
    method: KVMethod
    #: layer units, each a list of consecutive layer ids (one sub-pool each)
    units: tuple[tuple[int, ...], ...]
    #: the policy's layer groups (what a per-group method decides over)
    groups: tuple[tuple[int, ...], ...]
    num_layers: int
    kept_log: Optional[str] = None
    #: where the shared segment ends (:data:`~sglang_pask.methods.segment.SEGMENTS`)
    segment: str = "none"
    #: the radix cache is on (it then caches exactly the segments: :mod:`.radix_cache`)
    radix: bool = False
    policy_sha256: str = ""
    #: the segment's budget (None: the method's)
    segment_budget: Optional[float] = None
    #: the budget of a request's own tokens after the segment (None: the method's budget counting
    #: the segment's slots, :func:`~sglang_pask.methods.segment.own_slots`); not in :attr:`stamp`:
    #: it does not change what a segment keeps
    own_budget: Optional[float] = None
    #: what a request's own tokens are prefilled against (:data:`~sglang_pask.methods.segment.PREFILLS`);
    #: not in :attr:`stamp` either: the segment keeps the same positions
    segment_prefill: str = "compressed"

    @property
    def budget(self) -> float:
        return self.method.budget

    @property
    def stamp(self) -> str:
        """What decides a compressed segment besides its tokens: stamped on the radix node that
        holds it, and part of the cache namespace of every request (no other policy, method or
        budget can match it)."""
        seg = "" if self.segment_budget is None else f",segment@{self.segment_budget:g}"
        return f"{self.method.name}@{self.budget:g}{seg}/{self.policy_sha256[:16]}"

    def describe(self) -> str:
        return (f"method {self.method.name}, budget {self.budget:g}, schedule {self.method.schedule}"
                f"{'' if self.method.schedule == 'prefill' else f', interval {self.method.interval}'}, "
                f"{len(self.units)} KV unit(s) {[list(u) for u in self.units]}, segment {self.segment}"
                f"{'' if self.segment_budget is None else f' at budget {self.segment_budget:g}'}"
                f"{'' if self.own_budget is None else f', own tokens at budget {self.own_budget:g}'}"
                f"{', own tokens prefilled against the whole segment' if self.segment_prefill == 'full' else ''}, "
                f"radix cache {'on (caches compressed segments)' if self.radix else 'off'}")


def build_config(policy_path: str, method: Optional[str] = None, budget: Optional[float] = None,
                 schedule: Optional[str] = None, interval: Optional[int] = None,
                 kept_log: Optional[str] = None, model_dir: Optional[str] = None,
                 segment: Optional[str] = None, radix: bool = False,
                 segment_budget: Optional[float] = None, own_budget: Optional[float] = None,
                 segment_prefill: Optional[str] = None) -> ServingConfig:
    """The serving configuration; raises ValueError naming the bad flag or field."""
    from sglang_pask.methods.segment import SEGMENTS, check_own_budget, check_prefill
    from sglang_pask.methods.segment import check_method as check_segment_method
    from sglang_pask.policy import load_policy

    policy = load_policy(policy_path, model_dir=model_dir)
    name = method or DEFAULT_METHOD
    if name not in METHODS:
        raise ValueError(f"--pask-method: unknown method {name!r} (the server runs: "
                         f"{', '.join(server_methods())})")
    need = _needs_attention(name)
    if need is not None:
        raise ValueError(f"--pask-method: {name!r} needs attention statistics "
                         f"({need}) that the server does not compute; "
                         f"the server runs: {', '.join(server_methods())} (use `pask eval --backend "
                         f"hf` for {name})")
    if budget is not None and not 0.0 < budget <= 1.0:
        raise ValueError(f"--pask-budget must be in (0, 1], got {budget:g}")
    if name == "full" and budget is not None and budget != 1.0:
        raise ValueError(f"--pask-budget: method 'full' keeps every token (budget 1), got {budget:g}")
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"--pask-schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if interval is not None and interval < 1:
        raise ValueError(f"--pask-interval must be an integer >= 1, got {interval}")
    if segment is not None and segment not in SEGMENTS:
        raise ValueError(f"--pask-segment must be one of {', '.join(SEGMENTS)}, got {segment!r}")
    segment = segment or "none"
    radix = bool(radix) and segment != "none"  # the radix cache holds compressed segments only
    if segment_budget is not None and not 0.0 < segment_budget <= 1.0:
        raise ValueError(f"--pask-segment-budget must be in (0, 1], got {segment_budget:g}")
    if segment_budget is not None and segment == "none":
        raise ValueError("--pask-segment-budget needs --pask-segment system")
    check_own_budget(own_budget, "--pask-own-budget", segment, "--pask-segment")
    segment_prefill = segment_prefill or "compressed"
    check_prefill(segment_prefill, "--pask-segment-prefill", segment, "--pask-segment")
    options = {}
    if schedule is not None:
        options["schedule"] = schedule
    if interval is not None:
        options["interval"] = interval
    if name == "pask":
        kv = make_method(name, budget, policy=policy, **options)
    else:
        kv = make_method(name, budget if budget is not None else (None if name == "full" else policy.budget),
                         **options)
    groups = tuple(tuple(g) for g in policy.groups)
    num_layers = sum(len(g) for g in groups)
    units = groups if kv.per_group else tuple((layer,) for layer in range(num_layers))
    if segment != "none":
        try:
            check_segment_method(kv)
        except ValueError as e:
            raise ValueError(f"--pask-segment {segment}: {e}") from None
    from sglang_pask.policy.digest import policy_hash

    return ServingConfig(policy_path=policy_path, method=kv, units=units, groups=groups,
                         num_layers=num_layers, kept_log=kept_log, segment=segment, radix=radix,
                         policy_sha256=policy_hash(policy),
                         segment_budget=None if segment_budget is None else float(segment_budget),
                         own_budget=None if own_budget is None else float(own_budget),
                         segment_prefill=segment_prefill)


def _env_float(name: str) -> Optional[float]:
    v = os.environ.get(name)
    return float(v) if v else None


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    return int(v) if v else None


@lru_cache(maxsize=1)
def active_config() -> Optional[ServingConfig]:
    """This process's configuration from the environment the launcher set (None: PASK off)."""
    path = os.environ.get(ENV_POLICY)
    if not path:
        return None
    return build_config(path, method=os.environ.get(ENV_METHOD) or None, budget=_env_float(ENV_BUDGET),
                        schedule=os.environ.get(ENV_SCHEDULE) or None, interval=_env_int(ENV_INTERVAL),
                        kept_log=os.environ.get(ENV_KEPT_LOG) or None,
                        segment=os.environ.get(ENV_SEGMENT) or None, radix=os.environ.get(ENV_RADIX) == "1",
                        segment_budget=_env_float(ENV_SEGMENT_BUDGET), own_budget=_env_float(ENV_OWN_BUDGET),
                        segment_prefill=os.environ.get(ENV_SEGMENT_PREFILL) or None)
