"""Test helpers: random views and policies from a seed, and a digest of a selection.

Seed-driven (``numpy.random.default_rng``) so a hypothesis test can draw a seed and the same view
can be rebuilt in another process for the determinism check.
"""

from __future__ import annotations

import hashlib
from typing import Optional, Sequence

import numpy as np

from sglang_pask.methods.base import AttentionStats, CacheView, Selection
from sglang_pask.structure.classes import StructClass

NUM_CLASSES = len(StructClass)


def fake_binding(num_layers: int):
    from sglang_pask.policy.binding import ModelBinding

    return ModelBinding(num_layers=num_layers, num_kv_heads=2, head_dim=32, vocab_size=4096,
                        fingerprint="sha256:0000000000000000")


def consecutive_groups(rng: np.random.Generator, num_layers: int) -> list[list[int]]:
    cuts = sorted(set(rng.integers(1, num_layers, size=rng.integers(0, num_layers)).tolist())) \
        if num_layers > 1 else []
    bounds = [0, *cuts, num_layers]
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


def random_view(seed: int, num_layers: Optional[int] = None, seq_len: Optional[int] = None,
                groups: Optional[Sequence[Sequence[int]]] = None, per_group: bool = False,
                num_classes: int = NUM_CLASSES, kv_heads: int = 0, adaptive: bool = False) -> CacheView:
    """A view as an engine might build it: prefill end (everything held) or later (random
    subsets per layer, or per group with ``per_group``), current step held, attention stats
    (``window_heads`` for :data:`KV_HEADS` heads). ``kv_heads > 0``: after a per-head selection
    (when not at prefill end, each head holds its own equal-sized subset: ``head_mask``; with
    ``adaptive``, subsets of different sizes, as an ``adaptive_heads`` method leaves them)."""
    rng = np.random.default_rng(seed)
    L = int(num_layers or rng.integers(1, 6))
    T = int(seq_len or rng.integers(1, 90))
    groups = [list(g) for g in groups] if groups is not None else consecutive_groups(rng, L)
    tail = int(rng.integers(1, min(3, T) + 1))
    classes = rng.integers(0, num_classes, size=T)
    if rng.random() < 0.3:  # prefill end
        retained = [np.arange(T) for _ in range(L)]
    else:
        density = rng.uniform(0.05, 1.0)

        def subset():
            keep = rng.random(T - tail) < density
            return np.concatenate([np.flatnonzero(keep), np.arange(T - tail, T)])

        if per_group:
            retained = [None] * L
            for g in groups:
                s = subset()
                for layer in g:
                    retained[layer] = s
        else:
            retained = [subset() for _ in range(L)]
    stats = AttentionStats(
        accumulated=[rng.gamma(0.5, 2.0, size=r.size) for r in retained],
        window=[rng.gamma(0.5, 2.0, size=r.size) for r in retained],
        window_size=int(rng.integers(0, min(T, 16) + 1)),
    )
    prompt_len = int(rng.integers(0, T + 1))
    H = kv_heads or KV_HEADS
    masks = None
    if kv_heads and any(r.size < T for r in retained):  # after a per-head selection
        masks = [head_subsets(rng, r, T - tail, kv_heads, equal=not adaptive) for r in retained]
        retained = [r[m.any(axis=0)] for r, m in zip(retained, masks)]
        masks = [m[:, m.any(axis=0)] for m in masks]
        stats.accumulated = [rng.gamma(0.5, 2.0, size=r.size) for r in retained]
        stats.window = [rng.gamma(0.5, 2.0, size=r.size) for r in retained]
    stats.window_heads, stats.expected_heads, stats.kvzip_heads = (
        [rng.gamma(0.5, 2.0, size=(H, r.size)) * (1 if masks is None else m)
         for r, m in zip(retained, masks or [None] * L)] for _ in range(3))
    # drawn after the others, so the views the other methods see stay as they were
    stats.learned_heads = [np.exp(rng.normal(-4.0, 2.0, size=(H, r.size))) * (1 if masks is None else m)
                           for r, m in zip(retained, masks or [None] * L)]
    return CacheView(L, groups, T, classes, retained, protected_tail=tail, attention=stats,
                     prompt_len=prompt_len, head_mask=masks)


KV_HEADS = 2

#: the options that change a method's rule, each with the value its test variant uses (the
#: invariant matrices run every registered method as is and once per option it has; PASK's
#: residual scorer by the keywords its record writes, :func:`~sglang_pask.methods.options_of`)
RULE_OPTIONS = {"per_head": True, "normalize": True, "attention_blend": 0.5}
#: options that act only together with another (PASK's statistic and head split, read only with a
#: blend): each dict is one more variant of every method that takes all of them
JOINT_OPTIONS = ({"attention_blend": 0.5, "head_split": True},
                 {"attention_blend": 0.5, "attention_stat": "kvzip"},
                 {"attention_blend": 0.5, "attention_stat": "kvzip", "head_split": True},
                 {"attention_blend": 0.5, "residual_split": "scores"},
                 {"attention_blend": 0.5, "attention_stat": "kvzip", "head_split": True, "residual_split": "scores"},
                 {"attention_blend": 0.5, "attention_stat": "learned", "head_split": True, "residual_split": "scores"})


def option_variants(cls) -> list[dict]:
    """``[{}]`` plus one ``{option: value}`` per :data:`RULE_OPTIONS` entry that ``cls`` takes, plus
    each :data:`JOINT_OPTIONS` set it takes every option of."""
    from sglang_pask.methods import options_of

    names = set(options_of(cls))
    return ([{}] + [{k: v} for k, v in RULE_OPTIONS.items() if k in names]
            + [dict(o) for o in JOINT_OPTIONS if set(o) <= names])


def head_subsets(rng: np.random.Generator, held: np.ndarray, tail_start: int, heads: int,
                 equal: bool = True) -> np.ndarray:
    """bool ``[heads, len(held)]``: each head holds the tail and the same number of random others
    (``equal=False``: a random number each, a multiple of ``heads`` in all)."""
    others = np.flatnonzero(held < tail_start)
    counts = np.full(heads, int(rng.integers(0, others.size + 1))) if equal else \
        rng.integers(0, others.size + 1, size=heads)
    while counts.sum() % heads:  # every head gains each new token: the total stays a multiple
        counts[int(np.argmax(counts))] -= 1
    m = np.zeros((heads, held.size), dtype=bool)
    m[:, held >= tail_start] = True
    for h in range(heads):
        m[h, rng.permutation(others)[:counts[h]]] = True
    return m


def random_policy(seed: int, groups: Sequence[Sequence[int]], budget: float = 0.33,
                  floor_values: Sequence[float] = (0.25, 0.5, 1.0)):
    """A valid policy for ``groups`` with random floors (from ``floor_values``, 40% of classes),
    priorities, shares, sinks and window."""
    from sglang_pask.policy.schema import Policy

    rng = np.random.default_rng(seed)
    names = [c.name for c in StructClass]
    G = len(groups)
    floors = []
    for _ in range(G):
        v = np.where(rng.random(NUM_CLASSES) < 0.4, rng.choice(list(floor_values), NUM_CLASSES), 0.0)
        floors.append({n: float(x) for n, x in zip(names, v)})
    shares = rng.random(G) * (rng.random(G) < 0.8)
    shares = shares / shares.sum() if shares.sum() > 0 else np.full(G, 1.0 / G)
    shares[-1] = 1.0 - shares[:-1].sum()
    return Policy.model_validate({
        "model": fake_binding(sum(len(g) for g in groups)).model_dump(),
        "groups": [list(g) for g in groups], "classes": names,
        "priority": [[names[i] for i in rng.permutation(NUM_CLASSES)] for _ in range(G)],
        "floor": floors, "residual_share": [max(0.0, float(s)) for s in shares],
        "sinks": int(rng.integers(0, 5)), "recent_window": int(rng.integers(0, 9)),
        "budget": budget, "calibration": None,
    })


def digest(selection: Selection) -> str:
    h = hashlib.sha256()
    for k in selection.kept:
        h.update(np.asarray(k, dtype="<i8").tobytes() + b"|")
    return h.hexdigest()[:16]
