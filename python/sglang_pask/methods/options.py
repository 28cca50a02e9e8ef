"""Method options spelt on command lines: ``KEY=VALUE`` and ``NAME[:KEY=VALUE]...`` specs.

Values are JSON scalars when they parse as one (``true``, ``5``, ``0.5``, ``null``), else the
string given; :func:`~sglang_pask.methods.make_method` then checks them against the method's
fields (unknown keys raise TypeError, bad values name the field). Used by ``pask generate``,
``pask eval --method-opt`` and ``pask sweep --methods``.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["parse_value", "parse_option", "parse_method_spec"]


def parse_value(text: str) -> Any:
    """``"true"`` -> True, ``"5"`` -> 5, ``"0.5"`` -> 0.5, ``"null"`` -> None; anything else
    (including JSON lists and objects) stays the string given."""
    try:
        v = json.loads(text)
    except ValueError:
        return text
    return v if v is None or isinstance(v, (bool, int, float, str)) else text


def parse_option(text: str) -> tuple[str, Any]:
    """``"KEY=VALUE"`` -> ``(KEY, parse_value(VALUE))``."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise ValueError(f"method option {text!r} is not KEY=VALUE")
    return key.strip(), parse_value(value.strip())


def parse_method_spec(spec: str) -> tuple[str, dict]:
    """``"h2o:normalize=true:beta=5"`` -> ``("h2o", {"normalize": True, "beta": 5})``."""
    name, *opts = spec.strip().split(":")
    if not name:
        raise ValueError(f"method spec {spec!r} has no method name")
    out: dict = {}
    for o in opts:
        k, v = parse_option(o)
        if k in out:
            raise ValueError(f"method spec {spec!r} sets {k!r} twice")
        out[k] = v
    return name, out
