"""Baselines against their papers' rules on hand-made views; the shared allocation and pooling
helpers; determinism in one process and across two; engine-agnostic imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_pask.methods import METHODS, AttentionStats, CacheView, make_method, split_slots
from sglang_pask.methods.scorer import avg_pool, max_pool
from sglang_pask.methods.testing import digest


def one_layer(T, **stats) -> CacheView:
    return CacheView(1, [[0]], T, np.zeros(T, dtype=np.int64), [np.arange(T)],
                     attention=AttentionStats(**stats) if stats else None)


def test_streaming_keeps_sinks_and_newest():
    kept = make_method("streaming", 0.2, sinks=4).select(one_layer(50)).kept[0]
    assert kept.tolist() == [0, 1, 2, 3, *range(44, 50)]


def test_h2o_keeps_heavy_hitters_and_recent_half():
    rng = np.random.default_rng(0)
    acc = rng.random(100) * 0.1
    acc[[3, 17, 42]] = 50.0
    kept = make_method("h2o", 0.2).select(one_layer(100, accumulated=[acc])).kept[0]
    # n = 20: the 10 newest, then the 10 largest accumulated among the rest
    heavy = np.argsort(-acc[:90], kind="stable")[:10]
    assert kept.tolist() == sorted(set(range(90, 100)) | set(heavy.tolist()))
    assert {3, 17, 42} <= set(kept.tolist())


def test_snapkv_pooling_keeps_the_neighbourhood_of_a_vote():  # per layer (per head: below)
    votes = np.zeros(100)
    votes[40], votes[70] = 5.0, 1.0
    view = one_layer(100, window=[votes], window_size=8)
    kept = make_method("snapkv", 0.15, kernel_size=7, per_head=False).select(view).kept[0]  # n = 15
    assert kept.tolist() == [*range(37, 44), *range(92, 100)]  # 40 +- 3, then the window
    plain = make_method("snapkv", 0.15, kernel_size=1, per_head=False).select(view).kept[0]
    assert plain.tolist() == [40, 70, *range(87, 100)]  # no pooling: ties go to recency


def test_pooling_helpers_match_their_definition():
    x = np.random.default_rng(1).random(23)
    for k in (1, 2, 3, 4, 7):
        h = k // 2
        want_max = [x[max(0, i - h): i + k - h].max() for i in range(x.size)]
        want_avg = [x[max(0, i - h): i + k - h].mean() for i in range(x.size)]
        assert np.allclose(max_pool(x, k), want_max) and np.allclose(avg_pool(x, k), want_avg)


def pyramid_view(T, L, window_size=32, seed=2) -> CacheView:
    rng = np.random.default_rng(seed)
    return CacheView(L, [[i] for i in range(L)], T, np.zeros(T, dtype=np.int64), [np.arange(T)] * L,
                     attention=AttentionStats(window=[rng.random(T) for _ in range(L)],
                                              window_size=window_size))


def kvpress_layer_budgets(T, L, b, w=32, beta=20):
    """kvpress 8bb29b9 PyramidKVPress.get_layer_budget, restated for every layer (the reference
    uses round() per layer; the method rounds by largest remainder to keep the total exact)."""
    cap = w + T * b  # compression_ratio = 1 - b
    lo = (cap - w) / beta
    hi = (cap - w) * 2 - lo
    if hi >= T - w:
        hi = T - w
        lo = (cap - w) * 2 - hi
    if not (T >= hi >= lo >= w):
        return [T * b] * L, True
    return [hi - i * (hi - lo) / (L - 1) for i in range(L)], False


@pytest.mark.parametrize("T, L, b, fallback", [
    (190, 4, 0.5, False),  # the case: was [184, 125, 65, 6], top layer below its window
    (4000, 6, 0.2, False),  # a full pyramid: max = 2k - k/beta < T - w, min = k/beta >= w
    (2000, 5, 0.4, False),
    (190, 4, 0.2, True),   # k = 38: min = k/20 < w = 32 -> uniform SnapKV budgets
    (200, 6, 0.3, True),
])
def test_pyramidkv_layer_budgets_follow_kvpress_with_the_window_floor_and_fallback(T, L, b, fallback):
    view = pyramid_view(T, L)
    pyr = make_method("pyramidkv", b).allocation(view)
    uni = make_method("snapkv", b).allocation(view)
    want, fell_back = kvpress_layer_budgets(T, L, b)
    assert fell_back == fallback
    S = view.budget_slots(b)
    assert pyr.sum() == uni.sum() == S  # the project's budget invariant, exactly
    assert np.all(np.abs(pyr - np.asarray(want)) <= 1.0 + 1e-9), (pyr, want)
    if fallback:
        assert np.array_equal(pyr, uni)
    else:
        assert np.all(np.diff(pyr) < 0) and pyr[-1] >= 32  # strictly decreasing, top >= window
        assert pyr[0] <= T - 32  # bottom capped at T - w
    if (T, L, b) == (190, 4, 0.5):
        assert pyr.tolist() == [158, 116, 74, 32]
    # within a layer, pyramidkv is snapkv at that layer's budget
    sel = make_method("pyramidkv", b, per_head=False).select(view)
    for layer in range(L):
        one = CacheView(1, [[0]], T, view.classes, [np.arange(T)], attention=AttentionStats(
            window=[view.attention.window[layer]], window_size=32))
        snap = make_method("snapkv", len(sel.kept[layer]) / T + 1e-12, per_head=False).select(one).kept[0]
        assert np.array_equal(sel.kept[layer], snap)


def test_pyramidkv_beta_shapes_the_pyramid():
    view = pyramid_view(2000, 5)
    steep, flat = (make_method("pyramidkv", 0.4, beta=beta).allocation(view) for beta in (20, 2))
    assert steep.sum() == flat.sum() and steep[0] - steep[-1] > flat[0] - flat[-1] > 0


def test_snapkv_pools_the_prefix_only_and_keeps_the_window():
    # a huge vote on the last prefix position must not spill into the window through pooling,
    # and window votes must not spill into the prefix
    T, w = 60, 8
    votes = np.zeros(T)
    votes[T - w - 1] = 9.0  # last prefix position
    votes[T - w:] = 100.0  # the window's own column mass: not pooled over
    votes[10] = 1.0
    view = one_layer(T, window=[votes], window_size=w)
    kept = make_method("snapkv", 15 / T, kernel_size=7, per_head=False).select(view).kept[0]
    # 8 window + 7 prefix: 51 +- 3 clipped to the prefix = 48..51 (4), then 10's neighbourhood
    assert set(range(T - w, T)) <= set(kept.tolist())
    assert set(range(48, 52)) <= set(kept.tolist())
    assert len(set(kept.tolist()) & set(range(7, 14))) == 3  # the next best: pooled around 10


def test_snapkv_defaults_are_the_references():
    m = make_method("snapkv", 0.5)
    assert (m.window, m.kernel_size, m.pooling, m.per_head) == (32, 7, "max", True)  # as the authors: per KV head
    assert make_method("pyramidkv", 0.5).beta == 20.0
    assert make_method("streaming", 0.5).sinks == 4
    h = make_method("h2o", 0.5)
    assert (h.recent_ratio, h.normalize) == (0.5, False)


def test_h2o_normalised_divides_by_the_queries_that_saw_each_token():
    T = 100
    acc = np.linspace(50.0, 1.0, T)  # early tokens accumulate more just by being seen longer
    acc[60] = 30.0
    view = one_layer(T, accumulated=[acc])
    paper = make_method("h2o", 0.2, recent_ratio=0.0).select(view).kept[0]
    norm = make_method("h2o", 0.2, recent_ratio=0.0, normalize=True).select(view).kept[0]
    assert paper.tolist() == sorted([*range(0, 19), 99])  # the oldest win
    want = np.argsort(-(acc / (T - np.arange(T)))[:99], kind="stable")[:19]
    assert norm.tolist() == sorted([*want.tolist(), 99])
    assert 60 in norm and 60 not in paper


def test_snapkv_per_head_selects_one_set_per_kv_head():
    T, H, w = 40, 2, 4
    votes = np.zeros((H, T))
    votes[0, 5], votes[1, 20] = 5.0, 5.0
    view = CacheView(1, [[0]], T, np.zeros(T, dtype=np.int64), [np.arange(T)],
                     attention=AttentionStats(window=[votes.sum(0)], window_heads=[votes], window_size=w))
    sel = make_method("snapkv", 7 / T, kernel_size=3, per_head=True).select(view)  # n = 7
    m = sel.head_mask[0]
    per = [sel.kept[0][m[h]].tolist() for h in range(H)]
    assert per == [[4, 5, 6, *range(36, 40)], [19, 20, 21, *range(36, 40)]]
    assert sel.kept[0].tolist() == [4, 5, 6, 19, 20, 21, *range(36, 40)]
    # a later per-head compression chooses within what each head still holds
    T2 = 41
    held = np.append(sel.kept[0], 40)
    mask2 = np.concatenate([m, np.ones((H, 1), bool)], axis=1)
    v2 = np.where(mask2, 1.0, 0.0)
    view2 = CacheView(1, [[0]], T2, np.zeros(T2, dtype=np.int64), [held], head_mask=[mask2],
                      attention=AttentionStats(window_heads=[v2], window_size=1))
    assert view2.held().tolist() == [8]
    sel2 = make_method("snapkv", 6 / T2, kernel_size=1, per_head=True).select(view2)  # n = 6
    for h in range(H):
        own = sel2.kept[0][sel2.head_mask[0][h]]
        assert len(own) == 6 and set(own.tolist()) <= set(held[mask2[h]].tolist()) and 40 in own


def test_adakv_gives_the_diffuse_head_the_budget_the_focused_one_does_not_need():
    """Head 0 attends to one token, head 1 to many: at n = 10 per head (20 head-slots), head 0
    keeps its safeguard (the window and its top pooled vote), head 1 the rest; the layer total is
    H * n, and the defaults are the authors' (kvpress AdaKVPress: alpha 0.2 over SnapKV)."""
    T, H, w = 60, 2, 4
    votes = np.zeros((H, T))
    votes[0, 10] = 9.0
    votes[1, 12:52:3] = np.linspace(1.0, 2.0, 14)
    view = CacheView(1, [[0]], T, np.zeros(T, dtype=np.int64), [np.arange(T)],
                     attention=AttentionStats(window_heads=[votes], window_size=w))
    m = make_method("adakv", 10 / T, kernel_size=1)
    assert (m.window, m.kernel_size, m.pooling, m.alpha_safeguard) == (32, 1, "max", 0.2)
    assert make_method("adakv", 0.5).kernel_size == 7
    sel = m.select(view)
    per = [sel.kept[0][sel.head_mask[0][h]].tolist() for h in range(H)]
    # safeguard int(0.2 * 10) = 2 per head (the tail 59 and the newest window position 58); the
    # other 16 head-slots by vote over both heads: 4 window positions, head 0's 10, then head 1's
    # 11 best of 14 (its votes grow with position)
    assert per[0] == [10, *range(T - w, T)]
    assert per[1] == [*range(21, 52, 3), *range(T - w, T)]
    assert sum(map(len, per)) == H * 10


def test_adakv_with_a_full_safeguard_is_snapkv_per_head():
    """alpha_safeguard = 1: every head keeps its own top n first and nothing is left to share --
    SnapKV per KV head, bit for bit (the property that ties AdaKV to its scorer)."""
    from sglang_pask.methods.testing import KV_HEADS, random_view

    for seed in range(40):
        view = random_view(seed, kv_heads=KV_HEADS)
        for b in (0.1, 0.33, 0.6):
            a = make_method("adakv", b, alpha_safeguard=1.0).select(view)
            s = make_method("snapkv", b, per_head=True).select(view)
            assert all(np.array_equal(x, y) for x, y in zip(a.kept, s.kept))
            assert all(np.array_equal(x, y) for x, y in zip(a.head_mask, s.head_mask))


def test_expected_attention_keeps_the_sinks_and_each_heads_best_expected_scores():
    """kvpress ExpectedAttentionPress's defaults; per KV head: the first n_sink positions (by
    absolute position: a view starting past them holds none), the current step, then the
    highest engine-computed scores."""
    m = make_method("expected_attention", 0.5)
    assert (m.n_future_positions, m.n_sink, m.use_covariance, m.use_vnorm, m.epsilon) == (512, 4, True, True, 0.0)
    T, H = 30, 2
    scores = np.zeros((H, T))
    scores[0, [10, 11]] = [2.0, 1.0]
    scores[1, [20, 21]] = [1.0, 2.0]
    view = CacheView(1, [[0]], T, np.zeros(T, dtype=np.int64), [np.arange(T)],
                     attention=AttentionStats(expected_heads=[scores]))
    sel = make_method("expected_attention", 6 / T, n_sink=3).select(view)  # 6 per head
    per = [sel.kept[0][sel.head_mask[0][h]].tolist() for h in range(H)]
    assert per == [[0, 1, 2, 10, 11, 29], [0, 1, 2, 20, 21, 29]]
    later = CacheView(1, [[0]], T, np.zeros(T, dtype=np.int64), [np.arange(T)], start=3,
                      attention=AttentionStats(expected_heads=[scores]))
    # view position 0 is absolute position 3 here: no sink; zero scores tie -> the more recent
    sel = make_method("expected_attention", 4 / T, n_sink=3).select(later)
    assert [sel.kept[0][sel.head_mask[0][h]].tolist() for h in range(H)] == [[10, 11, 28, 29], [20, 21, 28, 29]]


def test_random_differs_by_seed_but_not_by_call():
    view = CacheView(2, [[0, 1]], 80, np.zeros(80, dtype=np.int64), [np.arange(80)] * 2)
    a, b = make_method("random", 0.3, seed=1), make_method("random", 0.3, seed=2)
    assert digest(a.select(view)) == digest(a.select(view)) != digest(b.select(view))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(total=st.integers(-3, 400), data=st.data())
def test_split_slots(total, data):
    n = data.draw(st.integers(1, 8))
    w = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.05, 0.5, 1.0, 3.0]), min_size=n, max_size=n)))
    cap = np.array(data.draw(st.lists(st.integers(0, 60), min_size=n, max_size=n)))
    a = split_slots(total, w, cap)
    assert a.sum() == min(max(total, 0), cap.sum()) and np.all((0 <= a) & (a <= cap))
    if (w > 0).any() and (cap >= total).all() and total >= 0:  # nothing capped: proportional
        ideal = total * w / w.sum()
        assert np.all(np.abs(a - ideal) < 1.0 + 1e-9)


DETERMINISM = r"""
import json, sys
from sglang_pask.methods import METHODS, make_method
from sglang_pask.methods.testing import digest, random_policy, random_view
out = {}
for name in sorted(METHODS):
    for seed in range(12):
        view = random_view(seed, per_group=True)
        b = 1.0 if name == "full" else 0.3
        m = make_method(name, b, policy=random_policy(seed, view.groups, b) if name == "pask" else None)
        out[f"{name}/{seed}"] = digest(m.select(view))
print(json.dumps(out, sort_keys=True))
"""


def test_deterministic_in_process_and_across_processes():
    def here():
        ns: dict = {}
        from contextlib import redirect_stdout
        from io import StringIO

        buf = StringIO()
        with redirect_stdout(buf):
            exec(DETERMINISM, ns)
        return json.loads(buf.getvalue())

    first, second = here(), here()
    assert first == second and len(first) == 12 * len(METHODS)
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    r = subprocess.run([sys.executable, "-c", DETERMINISM], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == first


def test_methods_import_no_engine():
    code = ("import sys; before = set(sys.modules); import sglang_pask.methods; "
            "new = set(sys.modules) - before; "
            "print(sorted(m for m in new if m.split('.')[0] in ('torch', 'transformers', 'sglang')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"


def _build(name, budget=0.3, **options):
    from sglang_pask.methods.testing import random_policy

    pol = random_policy(0, [[0, 1], [2]], budget) if name == "pask" else None
    return make_method(name, 1.0 if name == "full" else budget, policy=pol, **options), pol


@pytest.mark.parametrize("name", sorted(METHODS))
def test_record_round_trips_through_make_method(name):
    """record() is JSON, names every field with its value, and rebuilds an equal method; a
    non-default option survives the trip and changes the record."""
    from dataclasses import fields

    m, pol = _build(name, schedule="prefill", interval=3)
    rec = json.loads(json.dumps(m.record()))  # JSON-serialisable, no loss
    init = [f.name for f in fields(m) if f.init]
    omitted = [k for k, v in type(m).record_omits.items() if getattr(m, k) == v]
    assert list(rec) == ["name", *[k for k in init if k not in omitted]]
    assert rec["name"] == name == METHODS[name].name
    assert rec["schedule"] == "prefill" and rec["interval"] == 3
    back = make_method(**{**rec, "policy": pol} if pol is not None else rec)
    assert back == m and hash(back) == hash(m) and back.record() == rec and type(back) is type(m)
    assert repr(back) == repr(m) and all(f"{k}=" in repr(m) for k in init if k != "policy")
    if pol is not None:
        from sglang_pask.methods import policy_hash

        assert rec["policy"] == {"name": pol.name, "sha256": policy_hash(pol)}
        other = pol.model_copy(update={"sinks": pol.sinks + 1})
        assert make_method(**{**rec, "policy": other}) != m  # compared by the policy's hash
    assert make_method(**{**rec, "schedule": "continuous"} if pol is None else
                       {**rec, "policy": pol, "schedule": "continuous"}) != m
