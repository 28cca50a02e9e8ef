"""How a policy must be run: its **operating point** (schedule, interval, segment rule).

A policy is calibrated under one operating point and is a different method under another (the
tiny 0.33 policy: 91 under ``prefill``, 34.5 under ``continuous``). So the policy file records it
(``"operating_point"``, format ``pask-policy/2``), every engine takes its defaults from it, and any
override is reported with where each field came from (:func:`resolve`).

Two frozen value objects, each the only validator of its fields:

* :class:`SegmentRule`: the shared-segment rule (``segment``, ``segment_budget``, ``own_budget``,
  ``segment_prefill``; :mod:`sglang_pask.methods.segment` applies it). It adds and reads its own
  CLI flags (:meth:`SegmentRule.add_flags` / :meth:`SegmentRule.overrides`), records itself
  (:meth:`SegmentRule.record`) and crosses process boundaries as one JSON value.
* :class:`OperatingPoint`: ``schedule``, ``interval`` and a :class:`SegmentRule`.

Flat field names (what :func:`resolve` reports a source for): :data:`FIELDS`.

Light: the standard library only (the launcher imports it before anything heavy).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

#: when a method compresses (:mod:`sglang_pask.methods.base`)
SCHEDULES = ("continuous", "prefill")
#: where a shared segment ends: ``none`` (the whole prompt is the request's own) or ``system``
#: (the end of the system/tools message)
SEGMENTS = ("none", "system")
#: what a request's own tokens are prefilled against: the segment as kept, or whole
PREFILLS = ("compressed", "full")

#: the segment rule's fields, in record order
SEGMENT_FIELDS = ("segment", "segment_budget", "own_budget", "segment_prefill")
#: every field of an operating point, flat (the keys of :attr:`Resolved.sources`)
FIELDS = ("schedule", "interval") + SEGMENT_FIELDS
#: where a resolved field's value came from
SOURCES = ("policy", "flag", "default")


class OperatingPointError(ValueError):
    """An invalid operating point. ``field`` names the offending field and ``needs`` the field it
    depends on (or None); :meth:`named` words the message with flag names."""

    def __init__(self, fld: str, template: str, needs: Optional[str] = None):
        self.field, self.template, self.needs = fld, template, needs
        super().__init__(self.named())

    def named(self, names: Optional[Mapping[str, str]] = None) -> str:
        """The message with fields spelled as ``names[field]`` (e.g. CLI flags)."""
        names = names or {}
        return self.template.format(field=names.get(self.field, self.field),
                                    needs=names.get(self.needs or "", self.needs or ""))


def _esc(v: Any) -> str:
    """``repr(v)`` safe inside a message template."""
    return repr(v).replace("{", "{{").replace("}", "}}")


def _budget_ok(v: Optional[float]) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 < float(v) <= 1.0)


@dataclass(frozen=True)
class SegmentRule:
    """The shared-segment rule (:mod:`sglang_pask.methods.segment`).

    ``segment``: :data:`SEGMENTS`. ``segment_budget``: the segment's budget (None: the method's).
    ``own_budget``: the budget of a request's own tokens after the segment (None: the request's
    budget counting the segment's slots; 1: never dropped). ``segment_prefill``: :data:`PREFILLS`.
    Invariant (checked here, the only place): every field other than ``segment`` keeps its
    default unless ``segment`` is ``system``."""

    segment: str = "none"
    segment_budget: Optional[float] = None
    own_budget: Optional[float] = None
    segment_prefill: str = "compressed"

    def __post_init__(self):
        if self.segment not in SEGMENTS:
            raise OperatingPointError("segment", "{field} must be one of " + ", ".join(SEGMENTS)
                                      + f", got {_esc(self.segment)}")
        for name in ("segment_budget", "own_budget"):
            v = getattr(self, name)
            if not _budget_ok(v):
                got = f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else _esc(v)
                raise OperatingPointError(name, "{field} must be in (0, 1], got " + got)
            if v is not None:
                object.__setattr__(self, name, float(v))
        if self.segment_prefill not in PREFILLS:
            raise OperatingPointError("segment_prefill", "{field} must be one of " + ", ".join(PREFILLS)
                                      + f", got {_esc(self.segment_prefill)}")
        if self.segment == "none":
            for name in ("segment_budget", "own_budget"):
                if getattr(self, name) is not None:
                    raise OperatingPointError(name, "{field} needs {needs} system", needs="segment")
            if self.segment_prefill != PREFILLS[0]:
                raise OperatingPointError("segment_prefill", f"{{field}} {self.segment_prefill} needs "
                                          "{needs} system", needs="segment")

    @property
    def active(self) -> bool:
        """A shared segment is compressed on its own."""
        return self.segment != "none"

    def record(self) -> dict:
        """``{"segment", "segment_budget", "own_budget", "segment_prefill"}`` (JSON values)."""
        return {f: getattr(self, f) for f in SEGMENT_FIELDS}

    @classmethod
    def from_record(cls, rec: Optional[Mapping[str, Any]]) -> "SegmentRule":
        """Inverse of :meth:`record` (None or missing keys: defaults; unknown keys refused)."""
        rec = dict(rec or {})
        unknown = sorted(set(rec) - set(SEGMENT_FIELDS))
        if unknown:
            raise OperatingPointError(unknown[0], "unknown segment rule key {field!r}")
        return cls(**{k: v for k, v in rec.items() if v is not None or k in ("segment_budget", "own_budget")})

    def to_json(self) -> str:
        return json.dumps(self.record(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "SegmentRule":
        return cls.from_record(json.loads(text))

    def describe(self) -> str:
        if not self.active:
            return "segment none"
        parts = [f"segment {self.segment}"]
        if self.segment_budget is not None:
            parts.append(f"at budget {self.segment_budget:g}")
        if self.own_budget is not None:
            parts.append(f"own tokens at budget {self.own_budget:g}")
        parts.append(f"{self.segment_prefill} prefill")
        return ", ".join(parts)

    # ---- CLI flags: one definition for the server (prefix "pask-") and the CLIs ----

    @staticmethod
    def flag_names(prefix: str = "") -> dict[str, str]:
        """field -> flag, e.g. ``own_budget`` -> ``--pask-own-budget`` with ``prefix="pask-"``."""
        return {f: f"--{prefix}{f.replace('_', '-')}" for f in SEGMENT_FIELDS}

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser, prefix: str = "", dest_prefix: str = "",
                  help_prefix: str = "") -> None:
        """Add the four flags (default None: "not given", so a policy's rule can fill them)."""
        names = cls.flag_names(prefix)
        texts = {
            "segment": "the shared segment compressed on its own: none (the whole prompt per request) "
                       "or system (the system/tools message; on the server shared through the radix "
                       "cache) (default: the policy's operating point, else none)",
            "segment_budget": "the shared segment's budget (default: the policy's, else the method's budget)",
            "own_budget": "budget of each request's own tokens after the segment (default: the policy's, "
                          "else the budget counting the segment's slots; 1: never dropped)",
            "segment_prefill": "what the own tokens are prefilled against: compressed (the segment as "
                               "kept) or full (the whole segment, cut after) (default: the policy's, "
                               "else compressed)",
        }
        types = {"segment": str, "segment_budget": float, "own_budget": float, "segment_prefill": str}
        for f in SEGMENT_FIELDS:
            parser.add_argument(names[f], dest=dest_prefix + f, type=types[f], default=None,
                                metavar=f.rsplit("_", 1)[-1].upper(), help=help_prefix + texts[f])

    @staticmethod
    def overrides(args: argparse.Namespace, dest_prefix: str = "") -> dict[str, Any]:
        """The segment flags given on the command line (field -> value)."""
        out = {}
        for f in SEGMENT_FIELDS:
            v = getattr(args, dest_prefix + f, None)
            if v is not None:
                out[f] = v
        return out


@dataclass(frozen=True)
class OperatingPoint:
    """``schedule`` (:data:`SCHEDULES`), ``interval`` (decode steps between budget checks under
    ``continuous``) and the :class:`SegmentRule`. The defaults are today's engine defaults."""

    schedule: str = "continuous"
    interval: int = 1
    segment: SegmentRule = field(default_factory=SegmentRule)

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise OperatingPointError("schedule", "{field} must be one of " + ", ".join(SCHEDULES)
                                      + f", got {_esc(self.schedule)}")
        if isinstance(self.interval, bool) or not isinstance(self.interval, int) or self.interval < 1:
            raise OperatingPointError("interval", "{field} must be an integer >= 1, got " + _esc(self.interval))

    def flat(self) -> dict[str, Any]:
        """Every field of :data:`FIELDS` -> value."""
        return {"schedule": self.schedule, "interval": self.interval, **self.segment.record()}

    def record(self) -> dict:
        """``{"schedule", "interval", "segment": {...}}`` (the policy file's shape)."""
        return {"schedule": self.schedule, "interval": self.interval, "segment": self.segment.record()}

    @classmethod
    def from_record(cls, rec: Optional[Mapping[str, Any]]) -> "OperatingPoint":
        rec = dict(rec or {})
        unknown = sorted(set(rec) - {"schedule", "interval", "segment"})
        if unknown:
            raise OperatingPointError(unknown[0], "unknown operating point key {field!r}")
        seg = SegmentRule.from_record(rec.pop("segment", None))
        return cls(segment=seg, **rec)

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> "OperatingPoint":
        seg = SegmentRule(**{f: values[f] for f in SEGMENT_FIELDS if f in values})
        return cls(schedule=values.get("schedule", "continuous"), interval=values.get("interval", 1),
                   segment=seg)

    def describe(self) -> str:
        sched = self.schedule if self.schedule == "prefill" else f"{self.schedule} every {self.interval}"
        return f"schedule {sched}, {self.segment.describe()}"


DEFAULT = OperatingPoint()


@dataclass(frozen=True)
class Resolved:
    """An effective operating point and, per field of :data:`FIELDS`, where it came from
    (:data:`SOURCES`): ``policy`` (the policy's recorded operating point), ``flag`` (an explicit
    override) or ``default`` (no policy, or a policy of the old format)."""

    point: OperatingPoint
    #: field -> source
    sources: dict
    #: fields a flag set to another value than the policy's: field -> (value, the policy's)
    overridden: dict = field(default_factory=dict)

    def record(self) -> dict:
        """What run records and ``/server_info`` show: ``{field: {"value", "source"}}`` plus
        ``"overridden": {field: policy's value}``."""
        flat = self.point.flat()
        out = {f: {"value": flat[f], "source": self.sources[f]} for f in FIELDS}
        out["overridden"] = {f: pol for f, (_v, pol) in self.overridden.items()}
        return out

    def sources_line(self) -> str:
        """``schedule prefill (policy), interval 1 (policy), ...``: every field and its source."""
        flat = self.point.flat()
        return ", ".join(f"{f} {_fmt(flat[f])} ({self.sources[f]})" for f in FIELDS)

    def override_line(self, names: Optional[Mapping[str, str]] = None) -> Optional[str]:
        """One line naming each flag that overrides the policy's operating point (None: none)."""
        if not self.overridden:
            return None
        names = names or {}
        parts = [f"{names.get(f, f)} {_fmt(v)} (policy: {_fmt(pol)})" for f, (v, pol) in self.overridden.items()]
        return "overrides the policy's operating point: " + ", ".join(parts)


def _fmt(v: Any) -> str:
    return "unset" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))


def flag_names(prefix: str = "") -> dict[str, str]:
    """Every field of :data:`FIELDS` -> its CLI flag (``prefix="pask-"``: the server's), for
    :meth:`OperatingPointError.named` and :meth:`Resolved.override_line`."""
    return {"schedule": f"--{prefix}schedule", "interval": f"--{prefix}interval", **SegmentRule.flag_names(prefix)}


def resolve(policy_point: Optional[OperatingPoint], overrides: Mapping[str, Any],
            names: Optional[Mapping[str, str]] = None, only: Optional[tuple] = None) -> Resolved:
    """The effective operating point: each field from ``overrides`` (field -> value, flags given)
    if present, else from ``policy_point`` (None: no policy, or an old-format one -> defaults).
    ``only``: the fields the policy decides (default all; a server running a baseline under a
    policy takes only the segment rule from it: the schedule is the policy method's own).
    A flag that sets ``segment`` to ``none`` under a policy whose segment is ``system`` also drops
    the policy's other segment fields (they belong to the segment). Raises
    :class:`OperatingPointError` worded with ``names`` (field -> flag)."""
    unknown = sorted(set(overrides) - set(FIELDS))
    if unknown:
        raise OperatingPointError(unknown[0], "unknown operating point field {field!r}")
    only = FIELDS if only is None else tuple(only)
    default = DEFAULT.flat()
    pol = policy_point.flat() if policy_point is not None else {}
    base = {f: pol[f] if f in pol and f in only else default[f] for f in FIELDS}
    values, sources, overridden = {}, {}, {}
    seg_off = overrides.get("segment") == "none" and base["segment"] != "none"
    for f in FIELDS:
        from_policy = f in pol and f in only
        if f in overrides:
            values[f], sources[f] = overrides[f], "flag"
            if from_policy and overrides[f] != base[f]:
                overridden[f] = (overrides[f], base[f])
        elif seg_off and f in SEGMENT_FIELDS:
            values[f], sources[f] = default[f], "default"
        else:
            values[f], sources[f] = base[f], "policy" if from_policy else "default"
    try:
        point = OperatingPoint.from_flat(values)
    except OperatingPointError as e:
        raise OperatingPointError(e.field, e.named(names).replace("{", "{{").replace("}", "}}")) from None
    return Resolved(point, sources, overridden)
