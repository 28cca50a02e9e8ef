"""Every registered KV method (and each boolean option variant: per-head selection, H2O's
normalised form), under both schedules, through the same invariants (looping over the registry):
kept = exactly the allocation (per KV head for per-head methods), a subset of what each layer
(head) holds, the current step always kept, the budget used but never exceeded, b = 1.0 keeps
everything, deterministic, view untouched; under ``prefill`` one compression, outputs all kept."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_pask.methods import METHODS, SCHEDULES, CacheView, make_method
from sglang_pask.methods.testing import KV_HEADS, option_variants, random_policy, random_view

BUDGETS = st.one_of(st.just(1.0), st.sampled_from([1e-3, 0.01, 0.05, 0.33]),
                    st.floats(1e-3, 1.0, allow_nan=False))
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def variants() -> list[tuple[str, dict]]:
    """(name, options) for every registered method, plus one per option that changes the rule
    (``per_head``, ``normalize``, PASK's ``attention_blend``: :data:`RULE_OPTIONS`)."""
    return [(name, o) for name, cls in sorted(METHODS.items()) for o in option_variants(cls)]


VARIANTS = [(n, o, s) for n, o in variants() for s in SCHEDULES]
IDS = [f"{n}{''.join(f'[{k}]' for k in o)}-{s}" for n, o, s in VARIANTS]


def build(name: str, budget: float, view: CacheView, seed: int, **options):
    if name == "full":
        return make_method("full", 1.0, **options)
    if name == "pask":
        return make_method("pask", budget, policy=random_policy(seed, view.groups, budget), **options)
    return make_method(name, budget, **options)


def head_sets(method, sel, view, layer):
    """Per KV head: (kept, held) position arrays of ``layer``."""
    H = sel.head_mask[layer].shape[0]
    held = view.head_held(layer, H)
    return [(sel.kept[layer][sel.head_mask[layer][h]], view.retained[layer][held[h]]) for h in range(H)]


def check_invariants(name: str, method, view: CacheView) -> None:
    before = copy.deepcopy(view)
    alloc = method.allocation(view)
    sel = method.select(view)
    held = view.held()
    L, S = view.num_layers, view.budget_slots(method.budget)
    assert alloc.shape == (L,) and len(sel.kept) == L
    per_head = getattr(method, "per_head", False)
    assert (sel.head_mask is not None) == per_head
    for layer in range(L):
        k, r = sel.kept[layer], view.retained[layer]
        assert k.dtype == np.int64
        assert np.all(np.diff(k) > 0), "kept must be sorted and unique"
        assert np.all(np.isin(k, r)), "kept positions must exist in the layer"
        assert np.all(np.isin(r[r >= view.tail_start], k)), "current step dropped"
        if not per_head:
            assert len(k) == alloc[layer], (name, layer, len(k), alloc[layer])
            continue
        m = sel.head_mask[layer]
        assert m.dtype == bool and m.shape[1] == len(k) and m.any(axis=0).all(), "kept = union"
        sets = head_sets(method, sel, view, layer)
        for hk, hr in sets:
            assert method.adaptive_heads or len(hk) == alloc[layer], (name, layer, len(hk), alloc[layer])
            assert np.all(np.isin(hk, hr)), "a head kept a position it does not hold"
            assert np.all(np.isin(hr[hr >= view.tail_start], hk)), "current step dropped by a head"
        assert sum(len(hk) for hk, _ in sets) == len(sets) * alloc[layer], (name, layer, alloc[layer])
    tails = L * view.protected_tail
    if method.budget >= 1.0:
        assert all(np.array_equal(k, r) for k, r in zip(sel.kept, view.retained))
        assert not per_head or all(np.array_equal(view.head_held(li, KV_HEADS), sel.head_mask[li])
                                   for li in range(L))
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
    if per_head:
        assert all(np.array_equal(a, b) for a, b in zip(sel.head_mask, again.head_mask))
    assert all(np.array_equal(a, b) for a, b in zip(view.retained, before.retained))
    assert np.array_equal(view.classes, before.classes)


@pytest.mark.parametrize("name, options, schedule", VARIANTS, ids=IDS)
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), budget=BUDGETS)
def test_invariants_random_views(name, options, schedule, seed, budget):
    cls = METHODS[name]
    per_head = options.get("per_head", getattr(cls, "per_head", False))
    view = random_view(seed, per_group=cls.per_group, kv_heads=KV_HEADS if per_head else 0,
                       adaptive=cls.adaptive_heads)
    check_invariants(name, build(name, budget, view, seed, schedule=schedule, **options), view)


@pytest.mark.parametrize("name, options, schedule", VARIANTS, ids=IDS)
@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), budget=st.floats(0.05, 0.9))
def test_recompression_during_decoding(name, options, schedule, seed, budget):
    """Compress at prefill end, then decode: each step appends one token to every layer (and
    every head) and compresses whenever due (``continuous``: every 3 steps; ``prefill``: never
    again); each compression sees what layers (heads) hold now. Under ``prefill`` the cache ends
    with exactly the prefill-end allocation of prompt slots plus every output token."""
    budget = 1.0 if name == "full" else budget
    view = random_view(seed, per_group=True)
    P = view.seq_len
    view = CacheView(view.num_layers, view.groups, P, view.classes,
                     [np.arange(P)] * view.num_layers, 1, view.attention)
    method = dataclasses.replace(build(name, budget, view, seed, schedule=schedule, **options), interval=3)
    rng = np.random.default_rng(seed)
    retained, classes, masks = list(view.retained), view.classes, None
    points = []
    for step in range(12):
        T = len(classes)
        held = sum(CacheView(view.num_layers, view.groups, T, classes, retained, 1,
                             head_mask=masks).held())
        if method.due(step, held, T, view.num_layers):
            v = CacheView(view.num_layers, view.groups, T, classes, retained, 1,
                          _stats(rng, retained, T, masks), head_mask=masks)
            check_invariants(name, method, v)
            sel = method.select(v)
            retained, masks = sel.kept, sel.head_mask
            points.append((step, sum(method.allocation(v))))
            assert sum(CacheView(v.num_layers, v.groups, T, classes, retained, 1, head_mask=masks).held()) \
                <= max(method_budget(method, v), v.num_layers)
        classes = np.append(classes, rng.integers(0, 32))
        retained = [np.append(r, T) for r in retained]
        masks = None if masks is None else [np.concatenate([m, np.ones((m.shape[0], 1), bool)], 1)
                                            for m in masks]
    if schedule == "prefill":
        assert [p[0] for p in points] in ([], [0])
        L, end = view.num_layers, len(classes)
        final = CacheView(L, view.groups, end, classes, retained, 1, head_mask=masks)
        assert all(np.array_equal(r[r >= P], np.arange(P, end)) for r in retained), "outputs kept"
        prompt_slots = sum(final.held()) - L * (end - P)
        if points:
            S = int(np.floor(budget * L * P + 1e-9))
            assert prompt_slots == points[0][1]
            if method.per_group:
                assert S - max(len(g) for g in view.groups) < prompt_slots <= max(S, L)
            else:
                assert prompt_slots == max(S, L)  # floor(b*L*P), or every layer's tail
        else:
            assert prompt_slots == L * P


def method_budget(method, view):
    return view.budget_slots(method.budget)


def _stats(rng, retained, T, masks=None):
    from sglang_pask.methods import AttentionStats

    heads = [[rng.random((KV_HEADS, r.size)) * (1 if m is None else m)
              for r, m in zip(retained, masks or [None] * len(retained))] for _ in range(3)]
    return AttentionStats(accumulated=[rng.random(r.size) for r in retained],
                          window=[rng.random(r.size) for r in retained], window_size=min(T, 4),
                          window_heads=heads[0], expected_heads=heads[1], kvzip_heads=heads[2],
                          learned_heads=[np.exp(-8 * rng.random((KV_HEADS, r.size))) * (1 if m is None else m)
                                         for r, m in zip(retained, masks or [None] * len(retained))])


@pytest.mark.parametrize("name", sorted(METHODS))
def test_due_schedule(name):
    view = random_view(0, num_layers=2, seq_len=10, groups=[[0, 1]])
    m = build(name, 0.5, view, 0, interval=4)
    if name == "full":
        assert not any(m.due(s, 20, 10, 2) for s in range(9))  # never over 1.0
        return
    assert m.due(0, 11, 10, 2) and not m.due(0, 10, 10, 2)  # over floor(0.5*2*10) = 10 only
    assert not m.due(3, 100, 10, 2) and m.due(4, 100, 10, 2) and m.due(8, 100, 10, 2)
    p = dataclasses.replace(m, schedule="prefill")
    assert p.due(0, 11, 10, 2) and not p.due(0, 10, 10, 2)
    assert not any(p.due(s, 10**6, 10, 2) for s in range(1, 13))  # once, at prefill end
    with pytest.raises(ValueError, match="schedule must be one of continuous, prefill"):
        dataclasses.replace(m, schedule="sometimes")
    with pytest.raises(ValueError, match="interval must be an integer >= 1"):
        dataclasses.replace(m, interval=0)


def test_registry_and_factory_errors():
    assert set(METHODS) == {"full", "streaming", "h2o", "snapkv", "pyramidkv", "adakv", "expected_attention",
                            "kvzip", "kvzap", "pask", "random"}
    view = random_view(3, num_layers=3, seq_len=30, groups=[[0, 1], [2]])
    for name, cls in METHODS.items():  # each name builds its own class, which reports that name
        m = build(name, 0.5, view, 3)
        assert type(m) is cls and m.name == name and m.record()["name"] == name
        assert m.select(view).info["method"] == name
        assert dataclasses.is_dataclass(m) and hash(m) == hash(build(name, 0.5, view, 3))
        with pytest.raises(dataclasses.FrozenInstanceError):
            m.budget = 0.1
    with pytest.raises(ValueError, match="unknown KV method 'nope'"):
        make_method("nope", 0.5)
    with pytest.raises(ValueError, match="budget is 1.0"):
        make_method("full", 0.5)
    with pytest.raises(ValueError, match="takes no policy"):
        make_method("h2o", 0.5, policy=object())
    with pytest.raises(ValueError, match=r"pask needs a policy: pass --policy FILE \(or policy=\.\.\. in Python\)"):
        make_method("pask", 0.5)
    with pytest.raises(ValueError, match=r"budget must be in \(0, 1\]"):
        make_method("streaming", 0.0)
    with pytest.raises(TypeError):
        make_method("snapkv", 0.5, kernel=3)  # misspelt option: refused, not dropped
    assert make_method("full").budget == 1.0


def test_readme_lists_every_registered_method():
    """The docs' method list and its table of options (docs/evaluation.md) name exactly the
    registry (``full``, which has no options, only in the list)."""
    import re

    text = (ROOT / "docs" / "evaluation.md").read_text()
    listed = re.search(r"one registry: ((?:`\w+`,\s*)+)all compared", text)
    assert listed, "docs/evaluation.md's sentence listing the methods moved"
    assert set(re.findall(r"`(\w+)`", listed.group(1))) == set(METHODS)
    table = set(re.findall(r"^\| `(\w+)` \| .* \| .* \|$", text.split("| method | fields (defaults) | reference |")[1]
                           .split("\n\n")[0], flags=re.M))
    assert table == set(METHODS) - {"full"}


@pytest.mark.parametrize("name, options", [("h2o", {}), ("snapkv", {}), ("pyramidkv", {}), ("adakv", {}),
                                           ("expected_attention", {}), ("kvzip", {}), ("kvzap", {}),
                                           ("snapkv", {"per_head": True})])
def test_attention_methods_refuse_missing_stats(name, options):
    view = random_view(7, num_layers=2, seq_len=40, groups=[[0, 1]])
    bare = CacheView(2, [[0, 1]], 40, view.classes, view.retained, view.protected_tail)
    m = make_method(name, 0.2, **options)
    assert m.needs_attention in ("accumulated", "window", "window_heads", "expected_heads", "kvzip_heads",
                                 "learned_heads")
    with pytest.raises(ValueError, match=f"needs attention.{m.needs_attention}"):
        m.select(bare)
