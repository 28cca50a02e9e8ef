"""Every registered KV method, through the same invariants (looping over the registry):
kept = exactly the allocation, a subset of what each layer holds, the current step always kept,
the budget used but never exceeded, b = 1.0 keeps everything, deterministic, view untouched."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_pask.methods import METHODS, CacheView, make_method
from sglang_pask.methods.testing import random_policy, random_view

BUDGETS = st.one_of(st.just(1.0), st.sampled_from([1e-3, 0.01, 0.05, 0.33]),
                    st.floats(1e-3, 1.0, allow_nan=False))
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def build(name: str, budget: float, view: CacheView, seed: int):
    if name == "full":
        return make_method("full", 1.0)
    if name == "pask":
        return make_method("pask", budget, policy=random_policy(seed, view.groups, budget))
    return make_method(name, budget)


def check_invariants(name: str, method, view: CacheView) -> None:
    before = copy.deepcopy(view)
    alloc = method.allocation(view)
    sel = method.select(view)
    held = view.held()
    L, S = view.num_layers, view.budget_slots(method.budget)
    assert alloc.shape == (L,) and len(sel.kept) == L
    for layer in range(L):
        k, r = sel.kept[layer], view.retained[layer]
        assert k.dtype == np.int64
        assert len(k) == alloc[layer], (name, layer, len(k), alloc[layer])
        assert np.all(np.diff(k) > 0), "kept must be sorted and unique"
        assert np.all(np.isin(k, r)), "kept positions must exist in the layer"
        assert np.all(np.isin(r[r >= view.tail_start], k)), "current step dropped"
    tails = L * view.protected_tail
    if method.budget >= 1.0:
        assert all(np.array_equal(k, r) for k, r in zip(sel.kept, view.retained))
    elif tails >= S:
        assert alloc.tolist() == [view.protected_tail] * L
    else:
        assert alloc.sum() <= S
        if method.per_group:  # whole per-layer units per group: waste below the largest group
            waste_ok = S - alloc.sum() < max(len(g) for g in view.groups)
            assert alloc.sum() == held.sum() or waste_ok, (alloc, S, held)
        else:
            assert alloc.sum() == min(S, held.sum()), (alloc, S, held)
    if method.per_group:
        for g in view.groups:
            assert all(np.array_equal(sel.kept[g[0]], sel.kept[layer]) for layer in g)
    again = method.select(view)
    assert all(np.array_equal(a, b) for a, b in zip(sel.kept, again.kept)), "not deterministic"
    assert all(np.array_equal(a, b) for a, b in zip(view.retained, before.retained))
    assert np.array_equal(view.classes, before.classes)


@pytest.mark.parametrize("name", sorted(METHODS))
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), budget=BUDGETS)
def test_invariants_random_views(name, seed, budget):
    view = random_view(seed, per_group=METHODS[name].per_group)
    check_invariants(name, build(name, budget, view, seed), view)


@pytest.mark.parametrize("name", sorted(METHODS))
@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), budget=st.floats(0.05, 0.9))
def test_recompression_during_decoding(name, seed, budget):
    """Compress at prefill end, then decode: each step appends one token to every layer and
    compresses whenever due (here every 3 steps); each compression sees what layers hold now."""
    budget = 1.0 if name == "full" else budget
    view = random_view(seed, per_group=True)
    view = CacheView(view.num_layers, view.groups, view.seq_len, view.classes,
                     [np.arange(view.seq_len)] * view.num_layers, 1, view.attention)
    method = build(name, budget, view, seed)
    method.interval = 3
    rng = np.random.default_rng(seed)
    retained, classes = list(view.retained), view.classes
    for step in range(12):
        T = len(classes)
        held = sum(r.size for r in retained)
        if method.due(step, held, T, view.num_layers):
            v = CacheView(view.num_layers, view.groups, T, classes, retained, 1,
                          _stats(rng, retained, T))
            check_invariants(name, method, v)
            retained = method.select(v).kept
            assert sum(r.size for r in retained) <= max(method_budget(method, v), v.num_layers)
        classes = np.append(classes, rng.integers(0, 32))
        retained = [np.append(r, T) for r in retained]


def method_budget(method, view):
    return view.budget_slots(method.budget)


def _stats(rng, retained, T):
    from sglang_pask.methods import AttentionStats

    return AttentionStats(accumulated=[rng.random(r.size) for r in retained],
                          window=[rng.random(r.size) for r in retained], window_size=min(T, 4))


def test_due_schedule():
    m = make_method("streaming", 0.5, interval=4)
    assert m.due(0, 11, 10, 2) and not m.due(0, 10, 10, 2)  # over floor(0.5*2*10) = 10 only
    assert not m.due(3, 100, 10, 2) and m.due(4, 100, 10, 2)


def test_registry_and_factory_errors():
    assert set(METHODS) == {"full", "streaming", "h2o", "snapkv", "pyramidkv", "pask", "random"}
    for name, cls in METHODS.items():
        assert cls.name == name and cls.__doc__ and len(cls.__doc__) > 60
    with pytest.raises(ValueError, match="unknown KV method 'nope'"):
        make_method("nope", 0.5)
    with pytest.raises(ValueError, match="budget is 1.0"):
        make_method("full", 0.5)
    with pytest.raises(ValueError, match="takes no policy"):
        make_method("h2o", 0.5, policy=object())
    with pytest.raises(ValueError, match="pask needs a policy"):
        make_method("pask", 0.5)
    with pytest.raises(ValueError, match=r"budget must be in \(0, 1\]"):
        make_method("streaming", 0.0)
    with pytest.raises(TypeError):
        make_method("snapkv", 0.5, kernel=3)  # misspelt option: refused, not dropped
    assert make_method("full").budget == 1.0


@pytest.mark.parametrize("name", ["h2o", "snapkv", "pyramidkv"])
def test_attention_methods_refuse_missing_stats(name):
    view = random_view(7, num_layers=2, seq_len=40, groups=[[0, 1]])
    bare = CacheView(2, [[0, 1]], 40, view.classes, view.retained, view.protected_tail)
    m = make_method(name, 0.2)
    assert m.needs_attention in ("accumulated", "window")
    with pytest.raises(ValueError, match=f"needs attention.{m.needs_attention}"):
        m.select(bare)
