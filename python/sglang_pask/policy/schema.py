"""The policy file of DESIGN.md §4 as one pydantic model (``"format": "pask-policy/2"``).

Shape of a document (G layer groups; class names are :class:`~sglang_pask.structure.StructClass`
names)::

    {"format": "pask-policy/2", "name": ..., "note": ...,
     "model": {"num_layers", "num_kv_heads", "head_dim", "vocab_size", "fingerprint"},
     "groups": [[0, 1], [2, 3]],                 # consecutive runs partitioning range(num_layers)
     "classes": ["TOOL_NAME", ...],              # the class axis
     "priority": [["TOOL_NAME", ...], ...],      # per group: the classes, most sensitive first
     "floor": [{"TOOL_NAME": 1.0, ...}, ...],    # per group: share of a class that must persist
     "residual_share": [0.5, 0.5],               # per group, >= 0, sums to 1
     "sinks": 4, "recent_window": 16, "budget": 0.33,
     "residual": {"blend": 0.5, "stat": "kvzip", # optional (absent: the pure lookup): the
                  "per_head": true, "split": "scores"},  # residual scorer, see .residual; with
                  # "stat": "learned" also "scorer": FILE, "scorer_sha256": HEX (the learned
                  # scorer's sidecar, beside the policy file, pinned by its bytes' sha256)
     "operating_point": {"schedule": "prefill", "interval": 1,   # how it must be run (absent in
                         "segment": {"segment": "none", ...}},   # pask-policy/1 files)
     "pools": {"share": [0.25, 0.40], "prompt_tokens": 1100.0, ...},  # optional: per group, the share of
                         # a prompt's positions the group holds, measured (the server sizes its
                         # per-group KV pools by it; absent: every group's pool holds b)
     "calibration": null | {...}}                # null: an uncalibrated (prior) policy

Unknown keys are refused everywhere; a floor missing from a group's dict is 0. A document that
spells the residual scorer with the four old top-level fields (``attention_blend``,
``attention_stat``, ``head_split``, ``residual_split``) is read as its ``residual`` block
(:func:`~.residual.convert_document`; :func:`~.document.load_policy` says so once per file).
Every check raises one message naming the field, e.g. ``floor[2]["TOOL_NAME"] = 1.5 is outside [0, 1]``.
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator

from sglang_pask.policy import residual as residual_rule
from sglang_pask.policy.binding import ModelBinding
from sglang_pask.policy.envelope import FORMAT, OLD_FORMATS, SUPPORTED_FORMATS
from sglang_pask.policy.operating_point import OperatingPoint, OperatingPointError
from sglang_pask.structure.classes import StructClass

NUM_CLASSES = len(StructClass)
SHARE_TOLERANCE = 1e-6


class CalibrationRecord(BaseModel):
    """Where a calibrated policy came from (DESIGN.md §5)."""

    model_config = ConfigDict(extra="forbid")

    data: str  #: calibration data set
    split: str  #: which split (must be disjoint from evaluation data)
    samples: int
    sensitivity: list[dict[str, float]]  #: S[group][class]: task-error increase when dropped
    distortion: list[dict[str, float]]  #: D[group][budget]: attention-output relative error
    tool_version: str
    date: str
    seed: Optional[int] = None


class SegmentRuleModel(BaseModel):
    """The file form of :class:`~.operating_point.SegmentRule` (checked by it)."""

    model_config = ConfigDict(extra="forbid")

    segment: str = "none"
    segment_budget: Optional[float] = None
    own_budget: Optional[float] = None
    segment_prefill: str = "compressed"


class OperatingPointModel(BaseModel):
    """The file form of :class:`~.operating_point.OperatingPoint` (checked by it)."""

    model_config = ConfigDict(extra="forbid")

    schedule: str
    interval: int = 1
    segment: SegmentRuleModel = SegmentRuleModel()


class ResidualModel(BaseModel):
    """The file form of the residual scorer (checked by :func:`.residual.check`; in a file the
    blend is > 0: the pure lookup leaves the block out)."""

    model_config = ConfigDict(extra="forbid")

    blend: float
    stat: str = "window"
    per_head: bool = False
    split: str = "share"
    #: the learned scorer a ``learned`` statistic reads: a file name resolved in the policy file's
    #: folder (:attr:`Policy.scorer_path`), and the sha256 of its bytes; absent for other statistics
    scorer: Optional[str] = None
    scorer_sha256: Optional[str] = None

    def model_dump(self, **kw):  # the four settings only unless a scorer is pinned (files as before)
        out = super().model_dump(**kw)
        if out.get("scorer") is None and out.get("scorer_sha256") is None:
            out.pop("scorer", None)
            out.pop("scorer_sha256", None)
        return out


class PoolsModel(BaseModel):
    """What the policy's layer groups hold, measured (``pask policy pools``; the calibration's last
    stage): ``share[g]`` = prompt positions group ``g`` holds at the end of a request (the union over
    its KV heads) over the prompt's positions, summed over ``entries`` entries of ``data`` run at the
    policy's operating point (:mod:`sglang_pask.calibrate.pools`). The server sizes each group's KV
    pool in proportion, at the same total KV bytes (:func:`~sglang_pask.srt.mem_cache.pools.unit_sizes_for`);
    it changes no kept set, so :func:`~.digest.policy_hash` leaves it out."""

    model_config = ConfigDict(extra="forbid")

    share: list[float]
    #: the entries' mean prompt and output tokens (the server keeps one prompt's room in every pool
    #: and counts output tokens in every group: :func:`~sglang_pask.srt.mem_cache.pools.unit_sizes_for`)
    prompt_tokens: Optional[float] = None
    output_tokens: Optional[float] = None
    data: str
    entries: int
    max_tokens: Optional[int] = None


class Policy(BaseModel):
    """A compiled per-model persistence table. Construct with :meth:`Policy.model_validate` (or
    :func:`~sglang_pask.policy.load_policy`); invalid values raise ``ValueError`` naming the field."""

    model_config = ConfigDict(extra="forbid")

    format: Literal[SUPPORTED_FORMATS] = FORMAT
    name: Optional[str] = None
    note: Optional[str] = None
    model: ModelBinding
    groups: list[list[int]]
    classes: list[str]
    priority: list[list[str]]
    floor: list[dict[str, float]]
    residual_share: list[float]
    sinks: int
    recent_window: int
    budget: float
    #: the residual scorer (None: the pure class-priority lookup, which needs no attention
    #: statistics): :mod:`.residual`, :class:`~sglang_pask.methods.pask.Pask`
    residual: Optional[ResidualModel] = None
    #: how the policy must be run (format 2; None in format-1 files)
    operating_point: Optional[OperatingPointModel] = None
    calibration: Optional[CalibrationRecord]
    #: per group, the measured share of a prompt's positions held (None: not measured; the
    #: server's group pools then each hold b): :class:`PoolsModel`
    pools: Optional[PoolsModel] = None
    #: the folder the policy was read from (:func:`~.document.load_policy`; None: built in code,
    #: relative names resolve from the working directory)
    _origin: Optional[str] = PrivateAttr(default=None)

    def __eq__(self, other) -> bool:  # the document's values; not where the file was read from
        if not isinstance(other, Policy):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # mutable, as pydantic's models

    @property
    def scorer_path(self) -> Optional[str]:
        """The learned scorer file the residual pins (its ``scorer`` resolved in the policy's
        folder), or None when the residual reads no learned scorer."""
        import os

        if self.residual is None or not self.residual.scorer:
            return None
        return os.path.join(self._origin or "", self.residual.scorer)

    @model_validator(mode="before")
    @classmethod
    def _convert(cls, data):
        return residual_rule.convert_document(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _check(self) -> "Policy":
        for problem in _problems(self):
            raise ValueError(problem)
        if self.format not in OLD_FORMATS and self.operating_point is None:
            # built in code without one: the engines' defaults (a file must say it: document.py)
            self.operating_point = OperatingPointModel(schedule="continuous")
        return self

    def document(self) -> dict:
        """The file form (JSON types): :meth:`model_dump` without ``residual`` when there is none
        (the pure lookup), so the policies written before it existed read and write as before."""
        doc = self.model_dump(mode="json")
        if doc["pools"] is None:  # not measured: files as before
            del doc["pools"]
        if doc["residual"] is None:
            del doc["residual"]
        else:
            doc["residual"] = self.residual.model_dump(mode="json")
        return doc

    # ---- lookups used by the pask method (class axis: StructClass ints) ----

    @property
    def point(self) -> Optional[OperatingPoint]:
        """The recorded operating point (None: a format-1 policy, run at the engines' defaults)."""
        if self.operating_point is None:
            return None
        return OperatingPoint.from_record(self.operating_point.model_dump())

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    def floor_table(self) -> np.ndarray:
        """float64 ``[G, NUM_CLASSES]``: floor[g][c] (0 for classes the policy does not list)."""
        t = np.zeros((self.num_groups, NUM_CLASSES))
        for g, row in enumerate(self.floor):
            for name, v in row.items():
                t[g, StructClass[name]] = v
        return t

    def rank_table(self) -> np.ndarray:
        """int64 ``[G, NUM_CLASSES]``: 0 = most sensitive class of the group; classes the policy
        does not list rank after all listed ones, in enum order."""
        t = np.empty((self.num_groups, NUM_CLASSES), dtype=np.int64)
        for g, order in enumerate(self.priority):
            listed = [StructClass[n] for n in order]
            rest = [c for c in StructClass if c not in set(listed)]
            for r, c in enumerate(listed + rest):
                t[g, int(c)] = r
        return t


def _problems(p: Policy):
    """Yield one message per problem, most basic first (only the first is reported)."""
    L = p.model.num_layers
    if p.model.num_layers < 1 or p.model.num_kv_heads < 1 or p.model.head_dim < 1 or p.model.vocab_size < 1:
        yield f"model: every dimension must be positive, got {p.model.shape()}"
    flat = [i for g in p.groups for i in g]
    consecutive = all(g and g == list(range(g[0], g[0] + len(g))) for g in p.groups)
    if not p.groups or not consecutive or flat != list(range(L)):
        yield (f"groups = {p.groups} must split layers 0..{L - 1} into consecutive, non-empty runs "
               "in order")
    G = len(p.groups)
    seen = set()
    for i, name in enumerate(p.classes):
        if name not in StructClass.__members__:
            yield f"classes[{i}] = {name!r} is not a structural class"
        if name in seen:
            yield f"classes[{i}] = {name!r} is listed twice"
        seen.add(name)
    for field in ("priority", "floor", "residual_share"):
        n = len(getattr(p, field))
        if n != G:
            yield f"{field} has {n} entries but there are {G} groups"
    for g, order in enumerate(p.priority):
        if sorted(order) != sorted(p.classes):
            missing = sorted(set(p.classes) - set(order))
            extra = sorted(set(order) - set(p.classes))
            yield (f"priority[{g}] must order exactly the policy's classes, once each"
                   f" (missing {missing}, not in classes {extra}, {len(order)} entries)")
    for g, row in enumerate(p.floor):
        for name, v in row.items():
            if name not in seen:
                yield f'floor[{g}]["{name}"] names a class not in classes'
            if not (0.0 <= v <= 1.0):  # NaN fails too
                yield f'floor[{g}]["{name}"] = {v} is outside [0, 1]'
    for g, v in enumerate(p.residual_share):
        if not (v >= 0.0) or math.isinf(v):
            yield f"residual_share[{g}] = {v} is not a finite share >= 0"
    total = sum(p.residual_share)
    if p.residual_share and abs(total - 1.0) > SHARE_TOLERANCE:
        yield f"residual_share sums to {total:g}, not 1"
    if p.sinks < 0:
        yield f"sinks = {p.sinks} is negative"
    if p.recent_window < 0:
        yield f"recent_window = {p.recent_window} is negative"
    if not (0.0 < p.budget <= 1.0):
        yield f"budget = {p.budget} is outside (0, 1]"
    if p.residual is not None:
        r = p.residual
        if not r.blend > 0:  # NaN fails too
            yield (f"residual.blend = {r.blend}: a residual block needs a blend > 0 (leave the block "
                   "out for the pure lookup)")
        try:
            residual_rule.check(r.blend, r.stat, r.per_head, r.split)
        except residual_rule.ResidualError as e:
            yield e.named({k: f"residual.{k}" for k in residual_rule.DEFAULTS})
        if r.stat == "learned":
            if not r.scorer or "/" in r.scorer or "\\" in r.scorer:
                yield (f"residual.scorer = {r.scorer!r}: a residual on the learned statistic names its scorer "
                       "file, a file name beside the policy (e.g. \"pask-tiny-fc.kvzap.safetensors\")")
            if not (isinstance(r.scorer_sha256, str) and len(r.scorer_sha256) == 64
                    and all(ch in "0123456789abcdef" for ch in r.scorer_sha256)):
                yield (f"residual.scorer_sha256 = {r.scorer_sha256!r} must be the scorer file's sha256 "
                       "(64 lowercase hex)")
        elif r.scorer is not None or r.scorer_sha256 is not None:
            yield (f"residual.scorer / scorer_sha256 are read only by the learned statistic (residual.stat is "
                   f"{r.stat!r})")
    if p.format in OLD_FORMATS and p.operating_point is not None:
        yield f"operating_point needs format {FORMAT!r} (this file says {p.format!r})"
    if p.operating_point is not None:
        try:
            OperatingPoint.from_record(p.operating_point.model_dump())
        except OperatingPointError as e:
            where = "operating_point." + ("segment." if e.field not in ("schedule", "interval") else "")
            yield e.named({e.field: where + e.field, **({e.needs: where + e.needs} if e.needs else {})})
    if p.pools is not None:
        if len(p.pools.share) != G:
            yield f"pools.share has {len(p.pools.share)} entries but there are {G} groups"
        for g, v in enumerate(p.pools.share):
            if not (0.0 < v <= 1.0):  # NaN fails too
                yield f"pools.share[{g}] = {v} is outside (0, 1]"
        for field in ("prompt_tokens", "output_tokens"):
            v = getattr(p.pools, field)
            if v is not None and not (v >= 0 and math.isfinite(v)):
                yield f"pools.{field} = {v} is not a finite count >= 0"
        if p.pools.entries < 1:
            yield f"pools.entries = {p.pools.entries}: a share is measured on at least one entry"
    if p.calibration is not None:
        for field in ("sensitivity", "distortion"):
            n = len(getattr(p.calibration, field))
            if n != G:
                yield f"calibration.{field} has {n} entries but there are {G} groups"
        if p.calibration.samples < 0:
            yield f"calibration.samples = {p.calibration.samples} is negative"


def _loc(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not out:
            out = str(part)
        elif str(part).isupper() or not str(part).isidentifier():
            out += f'["{part}"]'
        else:
            out += f".{part}"
    return out


def describe(e: ValidationError) -> str:
    """One line for a pydantic error: the first problem, naming its field."""
    errs = e.errors()
    first = errs[0]
    where, msg, kind = _loc(first["loc"]), first["msg"], first["type"]
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif kind == "extra_forbidden":
        head, _, key = where.rpartition(".") if "[" not in where[-2:] else ("", "", where)
        msg, where = f"unknown key {key!r}" + (f" in {head}" if head else ""), ""
    elif kind == "missing":
        msg = "missing required key"
    else:
        msg = f"{msg} (got {first.get('input')!r})"
    text = f"{where}: {msg}" if where else msg
    return text + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else "")
