"""Segment compression (:mod:`sglang_pask.methods.segment`) for every registered method that
supports it (all but per-head selection), through the invariants of the method matrix: the
segment alone and the own span alone each satisfy them, the own span never touches the segment,
the two budgets add up to at most the whole one, ``S = 0`` is the ordinary rule, deterministic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_pask.methods import METHODS
from sglang_pask.methods.base import AttentionStats
from sglang_pask.methods.segment import check_method, own_held, own_kept, own_view, segment_kept
from sglang_pask.methods.testing import KV_HEADS, random_view

from .test_methods_invariants import BUDGETS, VARIANTS, build, check_invariants

#: per-KV-head rules (an option, PASK's head split, or the class's own) do not compress by
#: segments (segment.check_method)
SEG_VARIANTS = [(n, o, s) for n, o, s in VARIANTS
                if not (o.get("per_head") or o.get("head_split") or getattr(METHODS[n], "per_head", False) is True)]
IDS = [f"{n}{''.join(f'[{k}]' for k in o)}-{s}" for n, o, s in SEG_VARIANTS]


@pytest.mark.parametrize("name, options, schedule", SEG_VARIANTS, ids=IDS)
@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), budget=BUDGETS, cut=st.floats(0.0, 1.0))
def test_segment_then_own(name, options, schedule, seed, budget, cut):
    view = random_view(seed, per_group=METHODS[name].per_group)
    method = build(name, budget, view, seed, schedule=schedule, **options)
    budget = method.budget
    L, T = view.num_layers, view.seq_len
    s = int(cut * (T - view.protected_tail))
    # the segment, alone: a function of its classes only (the rest of the view is not read)
    rng = np.random.default_rng(seed)
    stats = AttentionStats(accumulated=[rng.random(s) for _ in range(L)], window=[rng.random(s) for _ in range(L)],
                           window_size=view.attention.window_size if view.attention else 8,
                           window_heads=[rng.random((KV_HEADS, s)) for _ in range(L)],
                           kvzip_heads=[rng.random((KV_HEADS, s)) for _ in range(L)])
    seg = segment_kept(method, L, view.groups, view.classes[:s], attention=stats)
    again = segment_kept(method, L, view.groups, view.classes[:s].copy(), attention=stats)
    assert all(np.array_equal(a, b) for a, b in zip(seg, again)), "segment not deterministic"
    for k in seg:
        assert k.dtype == np.int64 and np.all(np.diff(k) > 0) and (k.size == 0 or (k[0] >= 0 and k[-1] < s))
    seg_slots = sum(len(k) for k in seg)
    assert seg_slots <= max(int(np.floor(budget * L * s + 1e-9)), 0) or budget >= 1.0
    if budget >= 1.0:
        assert all(np.array_equal(k, np.arange(s)) for k in seg)
    # the own span: the matrix's invariants on its shifted view, and nothing below s touched
    ov = own_view(L, view.groups, T, view.classes, view.retained, s, view.protected_tail, view.prompt_len,
                  attention=view.attention)
    assert ov.seq_len == T - s and own_held(ov) == sum(int((r >= s).sum()) for r in view.retained)
    check_invariants(name, method, ov)
    own = own_kept(method, ov, s)
    for layer, (k, r) in enumerate(zip(own, view.retained)):
        assert np.all(k >= s) and np.all(np.isin(k, r)), (layer, k, r)
    own_slots = sum(len(k) for k in own)
    if budget < 1.0 and own_slots > L * view.protected_tail:
        assert seg_slots + own_slots <= int(np.floor(budget * L * T + 1e-9)) + L
    if s == 0:  # no segment: the ordinary rule, bit for bit
        assert all(np.array_equal(a, b) for a, b in zip(own, method.select(view).kept))


def test_per_head_is_refused():
    from sglang_pask.methods import make_method

    with pytest.raises(ValueError, match="per_head selection does not support segment"):
        check_method(make_method("snapkv", 0.33, per_head=True))


@pytest.mark.parametrize("b, L, T, S, seg_slots, want", [
    (0.33, 4, 127, 107, 150, 26),     # segment at b: the proportional share, floor(0.33*4*20)
    (0.33, 4, 127, 107, 40, 127),     # a smaller segment: the request's budget less the segment
    (1.0, 4, 127, 107, 428, 80),      # b = 1 keeps everything
])
def test_own_slots(b, L, T, S, seg_slots, want):
    from sglang_pask.methods import make_method
    from sglang_pask.methods.segment import own_slots

    assert own_slots(make_method("streaming", b), L, T, S, seg_slots) == want


@pytest.mark.parametrize("name", ["streaming", "pask"])
@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), budget=BUDGETS, cut=st.floats(0.3, 1.0))
def test_own_span_has_no_sinks(name, seed, budget, cut):
    """Sinks are the sequence's first tokens, which the segment holds: the own span's first
    positions are not re-anchored as sinks. Its selection equals the method's with no sinks
    once the segment covers them (the bug this pins: the own view's positions 0..3 held as sinks
    took a 15-token query's whole 0.33 share, and the query's values were dropped)."""
    import dataclasses

    view = random_view(seed, per_group=METHODS[name].per_group)
    method = build(name, budget, view, seed)
    T = view.seq_len
    s = int(cut * (T - view.protected_tail))
    sinks = method.sinks
    if s < max(sinks, 1):
        return
    no_sinks = (dataclasses.replace(method, policy=method.policy.model_copy(update={"sinks": 0}))
                if name == "pask" else dataclasses.replace(method, sinks=0))
    ov = own_view(view.num_layers, view.groups, T, view.classes, view.retained, s, view.protected_tail,
                  view.prompt_len, attention=view.attention)
    assert ov.start == s
    got, want = own_kept(method, ov, s), own_kept(no_sinks, ov, s)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("own_budget, want", [(1.0, 80), (0.5, 40), (0.33, 26)])
def test_own_slots_with_own_budget(own_budget, want):
    """An own budget replaces the split: floor(b_o * L * (T - S)), whatever the segment kept."""
    from sglang_pask.methods import make_method
    from sglang_pask.methods.segment import own_slots

    for seg_slots in (0, 150, 428):
        assert own_slots(make_method("streaming", 0.33), 4, 127, 107, seg_slots, own_budget) == want
