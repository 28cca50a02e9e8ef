"""KV methods: one registry, one interface (:class:`~.base.KVMethod`). Engine-agnostic: imports
neither transformers nor SGLang (a test checks).

Use::

    method = make_method("snapkv", 0.33, schedule="prefill")  # or "pask", policy=load_policy(...)
    method.record()  # {"name": "snapkv", "budget": 0.33, "schedule": "prefill", ..., every field}
    if method.due(step, slots_held, seq_len, num_layers):   # prefill end (then every `interval`)
        view = CacheView(num_layers, groups, seq_len, classes, retained, protected_tail=1,
                         attention=AttentionStats(window=..., window_size=w))  # if needs_attention
        kept = method.select(view).kept                     # per layer, sorted logical positions

Every method is a frozen dataclass whose fields are its options (``repr`` shows them all;
``make_method(**method.record())`` rebuilds it, pask given its policy object back).
``METHODS`` drives CLI ``choices=``; a new method is one file, one class, one entry here.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from sglang_pask.methods.adakv import AdaKV
from sglang_pask.methods.base import (
    SCHEDULES,
    AttentionStats,
    CacheView,
    KVMethod,
    Selection,
    split_slots,
)
from sglang_pask.methods.expected import ExpectedAttention
from sglang_pask.methods.full import Full
from sglang_pask.methods.h2o import H2O
from sglang_pask.methods.kvzap import KVzap
from sglang_pask.methods.kvzip import KVzip
from sglang_pask.methods.pask import NO_POLICY, OLD_OPTIONS, Pask
from sglang_pask.methods.pyramidkv import PyramidKV
from sglang_pask.methods.random import Random
from sglang_pask.methods.residual import ResidualScorer
from sglang_pask.methods.snapkv import SnapKV
from sglang_pask.methods.streaming import Streaming
from sglang_pask.policy.digest import policy_hash

METHODS: dict[str, type[KVMethod]] = {
    cls.name: cls for cls in (Full, Streaming, H2O, SnapKV, PyramidKV, AdaKV, ExpectedAttention, KVzip,
                               KVzap, Pask, Random)
}


def options_of(cls: type[KVMethod]) -> list[str]:
    """The keyword options :func:`make_method` takes for ``cls`` besides ``budget`` and ``policy``:
    its fields, and for ``pask`` also the old keywords of its residual scorer (its record writes
    them)."""
    names = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in ("budget", "policy")]
    return names + list(OLD_OPTIONS) if cls is Pask else names


def make_method(name: str, budget: Optional[float] = None, policy=None, **options) -> KVMethod:
    """The method ``name`` at budget ``budget`` (``full``: 1.0; ``pask``: default the policy's).
    ``policy`` is for ``pask`` only; ``options`` are the class's other fields (``schedule``,
    ``interval``, the method's own; unknown ones raise TypeError), for ``pask`` also the old
    keywords of its residual scorer (``attention_blend`` ..., :meth:`Pask.with_options`)."""
    if name not in METHODS:
        raise ValueError(f"unknown KV method {name!r} (choices: {', '.join(METHODS)})")
    cls = METHODS[name]
    fields = options_of(cls)
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise TypeError(f"method {name!r} has no option {', '.join(map(repr, unknown))} "
                        f"(its options: {', '.join(fields)})")
    if cls is Pask:
        if policy is None:
            raise ValueError(NO_POLICY)
        return Pask.with_options(budget, policy, **options)
    if policy is not None:
        raise ValueError(f"method {name!r} takes no policy (only 'pask' does)")
    if budget is None:
        if cls is not Full:
            raise ValueError(f"method {name!r} needs a budget in (0, 1]")
        budget = 1.0
    return cls(budget, **options)


__all__ = [
    "METHODS", "SCHEDULES", "AttentionStats", "CacheView", "KVMethod", "Selection", "make_method", "options_of",
    "policy_hash", "split_slots",
    "Full", "Streaming", "H2O", "SnapKV", "PyramidKV", "AdaKV", "ExpectedAttention", "KVzip", "KVzap", "Pask",
    "Random", "ResidualScorer",
]
