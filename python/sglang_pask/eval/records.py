"""What a run records about itself (``run.json`` / ``summary.json``'s ``config``), and the spelling
of methods with options on command lines.

Run-record fields written by the hf backend (:meth:`HFBackend.describe`) and ``pask eval``:

  ``model``           ``{"path", "fingerprint"}`` (fingerprint: :func:`sglang_pask.policy.binding.fingerprint`
                      of the model's config.json, architecture fields only)
  ``method``          the method's ``record()``: ``{"name", <every field>...}``, pask's policy as
                      ``{"name", "sha256"}``
  ``method_options``  the fields that differ from the method class's defaults (budget, schedule and
                      policy excluded): what a table label shows, e.g. ``h2o[normalize=true]``
  ``budget``, ``schedule``, ``policy`` (``{"name", "sha256"}`` or null)
  ``data`` / ``data_spec``  the spec string and :func:`sglang_pask.eval.data.parse_spec` of it
  ``tool_choice``, ``max_tokens``, ``temperature``, ``enable_thinking`` (harness Settings)

Method specs (``pask sweep --methods``): ``NAME[:KEY=VALUE]...``, e.g. ``h2o:normalize=true`` or
``snapkv:window=32:per_head=true``; values are JSON scalars when they parse as one, else strings.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from sglang_pask.methods import KVMethod, options_of
from sglang_pask.methods.options import parse_method_spec, parse_option, parse_value

__all__ = ["run_config", "parse_value", "parse_option", "parse_method_spec", "method_spec", "method_record",
           "method_options", "record_options", "model_record", "method_label", "NOT_OPTIONS"]

#: record keys that are not "options" of a method (they have their own run-record fields)
NOT_OPTIONS = ("name", "budget", "schedule", "policy")


def run_config(data: str, *, method: str | None, budget: float | None, schedule: str | None = None,
               policy: str | None = None, method_options: dict | None = None, limit: int | None = None,
               workers: int = 1) -> dict:
    """The run config ``pask eval`` (and each ``pask sweep`` cell) gives the harness; the harness
    adds the decoding Settings and the backend's ``describe()``, which for the hf backend replaces
    method / budget / schedule / policy (labels here) with what it runs."""
    from sglang_pask.eval.data import parse_spec

    return {"data": data, "data_spec": parse_spec(data), "limit": limit, "workers": workers,
            "method": method, "method_options": dict(method_options or {}), "budget": budget,
            "schedule": schedule, "policy": policy}


def _fmt(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, str) else v


def method_spec(name: str, options: dict) -> str:
    """The inverse of :func:`parse_method_spec` (options in key order)."""
    return ":".join([name] + [f"{k}={_fmt(v)}" for k, v in sorted(options.items())])


def method_label(name: str, options: dict | None) -> str:
    """``h2o[normalize=true]``: the method and its non-default options, as tables show it."""
    if not options:
        return name
    return f"{name}[{','.join(f'{k}={_fmt(v)}' for k, v in sorted(options.items()))}]"


def method_record(method) -> dict:
    """``method.record()``: ``{"name", <every field>...}`` (methods.base.KVMethod.record)."""
    return method.record()


def _json(v: Any) -> Any:
    """A default as record() writes it (tuples as lists, numpy scalars as Python ones)."""
    return json.loads(json.dumps(v, default=lambda x: x.item()))


def method_options(method) -> dict:
    """Record fields (except :data:`NOT_OPTIONS`) whose value differs from the class default."""
    return record_options(type(method), method_record(method))


def record_options(cls: type, rec: dict) -> dict:
    """:func:`method_options` from a method class and a ``record()`` (e.g. one a server reported)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in NOT_OPTIONS or not f.init or f.name not in rec:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if default is None:  # resolved at construction (pask: the policy's interval): the base's default
            default = next((g.default for base in cls.__mro__[1:] if dataclasses.is_dataclass(base)
                            for g in dataclasses.fields(base) if g.name == f.name and g.default is not None),
                           None)
        if default is dataclasses.MISSING or _json(default) != rec[f.name]:
            out[f.name] = rec[f.name]
    fields = {f.name for f in dataclasses.fields(cls)}
    for name in options_of(cls) if issubclass(cls, KVMethod) else ():  # keywords that are no field
        if name not in fields and name not in NOT_OPTIONS and name in rec:  # (pask's old residual ones)
            out[name] = rec[name]
    return out


def model_record(model) -> dict:
    """``{"path", "fingerprint"}`` of a model directory (fingerprint None if it has no config)."""
    from sglang_pask.policy.binding import BindingError, config_path, fingerprint

    path = os.fspath(model)
    try:
        with open(config_path(path), encoding="utf-8") as f:
            fp = fingerprint(json.load(f))
    except (BindingError, OSError, ValueError):
        fp = None
    return {"path": path, "fingerprint": fp}
