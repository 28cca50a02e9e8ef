"""What the server persists: the KV method, its budget, its operating point (schedule, interval,
segment rule) and the layer units that get their own KV sub-pool -- resolved once per process from
the policy and the launcher's flags.

Flags (added by :mod:`.plugin`; everything the launcher was given crosses to the scheduler as ONE
value, :class:`ServingFlags` in ``$SGLANG_PASK_SERVING``, beside ``$SGLANG_PASK_POLICY``):

* ``--pask-method M`` (default ``pask``): a method from the registry that needs no attention
  statistics (``pask``, ``streaming``, ``random``, ``full``) or only those the torch backend records
  (:mod:`.attention.window_stats`: SnapKV and PyramidKV, per layer or per KV head, AdaKV and PASK with
  a residual scorer read the observation window, H2O the accumulated attention; a per-head
  selection is applied by :mod:`.attention.head_masks`) or KVzip's reconstruction scores (:mod:`.attention.reconstruct`:
  KVzip, and PASK whose residual reads them) or the learned scorer's predictions (:mod:`.attention.learned_scores`:
  KVzap, its file given by ``--pask-scorer PATH`` and checked against the served model; the flag is
  refused for a method that reads no scorer); Expected Attention needs statistics the server does
  not record (expected queries) and is refused by name.
* ``--pask-budget B`` (default: the policy's budget).
* The operating point (:mod:`sglang_pask.policy.operating_point`): ``--pask-schedule S``,
  ``--pask-interval N`` and the segment rule ``--pask-segment none|system``,
  ``--pask-segment-budget``, ``--pask-own-budget``, ``--pask-segment-prefill``. Each defaults to
  the policy's recorded operating point (a format-1 policy: the defaults, ``continuous``, 1,
  ``none``); a flag that changes one is an override, printed at start-up and shown with every
  field's source in ``/server_info`` (``internal_states[0]["pask"]["operating_point"]``). With
  ``segment system`` and the radix cache on (SGLang's default), the tree caches and shares exactly
  each request's segment, compressed (:mod:`.mem_cache.radix_cache`); with ``--disable-radix-cache`` nothing
  is shared, the rule is the same (:mod:`sglang_pask.methods.segment`, :mod:`.managers.segments`).

Units (invariant: a partition of the model's layers into consecutive runs): a method that decides
per layer group (``per_group``, i.e. ``pask``) gets one unit per policy group; a method that may
keep a different set in every layer gets one unit per layer. Each unit has one sub-pool and one
full->unit slot mapping (:mod:`.mem_cache.pools`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Optional

from sglang_pask.environ import envs
from sglang_pask.methods import METHODS, KVMethod, make_method
from sglang_pask.methods.learned import LearnedScorer, ScorerError, bind_scorer
from sglang_pask.policy.operating_point import SEGMENT_FIELDS, Resolved, SegmentRule, flag_names, resolve

DEFAULT_METHOD = "pask"
#: operating-point field -> the server flag that sets it (messages, override lines)
FLAG_NAMES = flag_names("pask-")


def _needs_attention(name: str) -> Optional[str]:
    """The attention statistics method ``name`` needs (None: none). Some methods declare it as a
    property of their options (SnapKV: ``window`` or, per head, ``window_heads``); the class
    attribute is then the property object, so the default instance is asked."""
    need = METHODS[name].needs_attention
    if isinstance(need, property):
        need = need.fget(make_method(name, 0.5))
    return need


def server_methods() -> list[str]:
    """Registry names the server can run: those needing no attention statistics, or only what
    the torch attention backend computes (:data:`.attention.window_stats.SERVED_KINDS`)."""
    from sglang_pask.srt.attention.window_stats import SERVED_KINDS

    return [name for name in METHODS if _needs_attention(name) in (None, *SERVED_KINDS)]


def takes_scorer(name: str) -> bool:
    """Whether registry method ``name`` reads a learned scorer file (its ``scorer`` option)."""
    import dataclasses

    return any(f.name == "scorer" for f in dataclasses.fields(METHODS[name]))


def method_error(name: str) -> Optional[str]:
    """The one line for a ``--pask-method`` the registry does not have (None: it has it), with or
    without a policy."""
    if name in METHODS:
        return None
    return f"--pask-method: unknown method {name!r} (the server runs: {', '.join(server_methods())})"


@dataclass(frozen=True)
class ServingFlags:
    """What the launcher was given (None / empty: not given), as it crosses to child processes."""

    method: Optional[str] = None
    budget: Optional[float] = None
    #: operating-point fields set by flags (field -> value; :data:`~sglang_pask.policy.operating_point.FIELDS`)
    overrides: dict = field(default_factory=dict)
    #: SGLang's radix cache is on (it then caches exactly the compressed segments)
    radix: bool = False
    kept_log: Optional[str] = None
    #: ``--pask-prefill-chunk`` (None: automatic; 0: off; :mod:`.managers.chunked`)
    prefill_chunk: Optional[int] = None
    #: ``--pask-scorer``: the learned scorer file of a method that reads one (``kvzap``)
    scorer: Optional[str] = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ServingFlags":
        return cls(**json.loads(text))


@dataclass(frozen=True)
class ServingConfig:
    policy_path: str
    method: KVMethod
    #: layer units, each a list of consecutive layer ids (one sub-pool each)
    units: tuple[tuple[int, ...], ...]
    #: the policy's layer groups (what a per-group method decides over)
    groups: tuple[tuple[int, ...], ...]
    num_layers: int
    #: the effective operating point and where each field came from (the policy, a flag, the default)
    resolved: Resolved
    kept_log: Optional[str] = None
    #: the radix cache is on (it then caches exactly the segments: :mod:`.mem_cache.radix_cache`)
    radix: bool = False
    policy_sha256: str = ""
    #: tokens per chunk of the chunked prefill rule (None: automatic, a quarter of a unit pool, where
    #: the method and the segment rule allow; 0: off; :mod:`.managers.chunked`)
    prefill_chunk: Optional[int] = None
    #: the learned scorer the method reads (``learned_heads``: :mod:`.attention.learned_scores`), bound to the
    #: served model; None for every other method
    scorer: Optional[LearnedScorer] = None
    #: per unit, what it holds of a prompt (the policy's measured ``pools.share`` of the unit's group):
    #: the unit pools are sized in proportion (:func:`.mem_cache.pools.unit_sizes_for`); None: b x N each
    #: (a policy without the block, a baseline, or PASK at a budget other than the policy's)
    unit_share: Optional[tuple[float, ...]] = None
    #: the measurement's mean prompt and output tokens (``pools.prompt_tokens`` / ``output_tokens``)
    pool_tokens: Optional[tuple[float, float]] = None

    @property
    def rule(self) -> SegmentRule:
        """The segment rule in force (``rule.segment_budget`` is in :attr:`stamp`; the own budget
        and the prefill mode are not: they do not change what a segment keeps)."""
        return self.resolved.point.segment

    @property
    def budget(self) -> float:
        return self.method.budget

    @property
    def stamp(self) -> str:
        """What decides a compressed segment besides its tokens: stamped on the radix node that
        holds it, and part of the cache namespace of every request (no other policy, method or
        budget can match it)."""
        sb = self.rule.segment_budget
        seg = "" if sb is None else f",segment@{sb:g}"
        return f"{self.method.name}@{self.budget:g}{seg}/{self.policy_sha256[:16]}"

    def describe(self) -> str:
        need = self.method.needs_attention
        stats = "" if need is None else f", attention statistics {need} (torch backend)"
        pools = ("" if self.unit_share is None else
                 f" sized by the policy's measured shares {[round(s, 3) for s in self.unit_share]}")
        return (f"method {self.method.name}, budget {self.budget:g}{stats}, {self.resolved.point.describe()}, "
                f"{len(self.units)} KV unit(s) {[list(u) for u in self.units]}{pools}, "
                f"radix cache {'on (caches compressed segments)' if self.radix else 'off'}")

def build_config(policy_path: str, flags: Optional[ServingFlags] = None,
                 model_dir: Optional[str] = None) -> ServingConfig:
    """The serving configuration; raises ValueError naming the bad flag or field."""
    from sglang_pask.methods.segment import check_method as check_segment_method
    from sglang_pask.policy import load_policy
    from sglang_pask.policy.digest import policy_hash

    flags = flags or ServingFlags()
    policy = load_policy(policy_path, model_dir=model_dir)
    name = flags.method or DEFAULT_METHOD
    budget = flags.budget
    if err := method_error(name):
        raise ValueError(err)
    if name not in server_methods():
        raise ValueError(f"--pask-method: {name!r} needs attention statistics "
                         f"({_needs_attention(name)}) that the server does not record; "
                         f"the server runs: {', '.join(server_methods())} (use `pask eval --backend "
                         f"hf` for {name})")
    if budget is not None and not 0.0 < budget <= 1.0:
        raise ValueError(f"--pask-budget must be in (0, 1], got {budget:g}")
    if name == "full" and budget is not None and budget != 1.0:
        raise ValueError(f"--pask-budget: method 'full' keeps every token (budget 1), got {budget:g}")
    if flags.scorer and not takes_scorer(name):
        raise ValueError(f"--pask-scorer: method {name!r} reads no learned scorer (those that do: "
                         f"{', '.join(n for n in METHODS if takes_scorer(n))})")
    # the one validator (errors name the flag); a baseline takes only the policy's segment rule
    resolved = resolve(policy.point, flags.overrides, FLAG_NAMES, None if name == "pask" else SEGMENT_FIELDS)
    point = resolved.point
    options = {"schedule": point.schedule, "interval": point.interval}
    if name == "pask":
        if flags.scorer:  # read only by a policy whose residual statistic is `learned`
            stat = policy.residual.stat if policy.residual is not None and policy.residual.blend else None
            if stat != "learned":
                reads = f"the {stat!r} statistic" if stat else "no statistic"
                raise ValueError(f"--pask-scorer: the policy's residual reads {reads}, not the learned scorer "
                                 "(kvzap and a policy whose residual statistic is 'learned' read one)")
            kv = make_method(name, budget, policy=policy, scorer=flags.scorer, **options)
        else:
            kv = make_method(name, budget, policy=policy, **options)
        from sglang_pask.srt.attention.window_stats import SERVED_KINDS  # torch: only here, as server_methods

        if kv.needs_attention not in (None, *SERVED_KINDS):
            raise ValueError(f"--pask-policy {policy_path}: its residual scorer blends the statistic "
                             f"{kv.residual.stat!r}{' per KV head (per_head)' if kv.residual.per_head else ''}, "
                             f"which reads attention statistics ({kv.needs_attention}) that the server does "
                             f"not record (it records {', '.join(SERVED_KINDS)}); use `pask eval --backend hf` "
                             "for this policy")
    else:
        if takes_scorer(name) and flags.scorer:
            options["scorer"] = flags.scorer
        kv = make_method(name, budget if budget is not None else (None if name == "full" else policy.budget),
                         **options)
    scorer = None
    if kv.needs_attention == "learned_heads":  # the file, bound to the served model (the policy's)
        from sglang_pask.policy.binding import ModelBinding

        have = ModelBinding.from_model(model_dir) if model_dir else policy.model
        try:
            scorer, kv = bind_scorer(kv, have, model_dir or f"(the model of {policy_path})",
                                     option="--pask-scorer PATH")
        except ScorerError as e:
            raise ValueError(f"--pask-scorer: {e}") from None
    groups = tuple(tuple(g) for g in policy.groups)
    num_layers = sum(len(g) for g in groups)
    units = groups if kv.per_group else tuple((layer,) for layer in range(num_layers))
    unit_share = pool_tokens = None
    if name == "pask" and policy.pools is not None and kv.budget == policy.budget:  # measured at that budget
        group_of = {layer: g for g, layers in enumerate(groups) for layer in layers}
        unit_share = tuple(policy.pools.share[group_of[u[0]]] for u in units)
        if policy.pools.prompt_tokens:
            pool_tokens = (policy.pools.prompt_tokens, policy.pools.output_tokens or 0.0)
    if point.segment.active:
        try:
            check_segment_method(kv)
        except ValueError as e:
            raise ValueError(f"--pask-segment {point.segment.segment}: {e}") from None
    chunk = flags.prefill_chunk
    if chunk is not None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            raise ValueError(f"--pask-prefill-chunk must be an integer >= 0 (0: off), got {chunk!r}")
        if chunk and point.segment.active:
            raise ValueError(f"--pask-prefill-chunk {chunk}: the chunked prefill rule needs --pask-segment none "
                             f"(the segment rule is {point.segment.segment})")
        if chunk:
            from sglang_pask.methods.chunks import check_method as check_chunk_method

            try:
                check_chunk_method(kv)
            except ValueError as e:
                raise ValueError(f"--pask-prefill-chunk {chunk}: {e}") from None
    return ServingConfig(policy_path=policy_path, method=kv, units=units, groups=groups,
                         num_layers=num_layers, resolved=resolved, kept_log=flags.kept_log,
                         radix=bool(flags.radix) and point.segment.active,  # the tree holds segments only
                         policy_sha256=policy_hash(policy), prefill_chunk=chunk, scorer=scorer,
                         unit_share=unit_share, pool_tokens=pool_tokens)


@lru_cache(maxsize=1)
def active_config() -> Optional[ServingConfig]:
    """This process's configuration from the environment the launcher set (None: PASK off)."""
    path = envs.SGLANG_PASK_POLICY.get()
    if not path:
        return None
    text = envs.SGLANG_PASK_SERVING.get()
    return build_config(path, ServingFlags.from_json(text) if text else None)
