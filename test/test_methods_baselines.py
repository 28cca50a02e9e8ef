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


def test_snapkv_pooling_keeps_the_neighbourhood_of_a_vote():
    votes = np.zeros(100)
    votes[40], votes[70] = 5.0, 1.0
    view = one_layer(100, window=[votes], window_size=8)
    kept = make_method("snapkv", 0.15, kernel_size=7).select(view).kept[0]  # n = 15
    assert kept.tolist() == [*range(37, 44), *range(92, 100)]  # 40 +- 3, then the window
    plain = make_method("snapkv", 0.15, kernel_size=1).select(view).kept[0]
    assert plain.tolist() == [40, 70, *range(87, 100)]  # no pooling: ties go to recency


def test_pooling_helpers_match_their_definition():
    x = np.random.default_rng(1).random(23)
    for k in (1, 2, 3, 4, 7):
        h = k // 2
        want_max = [x[max(0, i - h): i + k - h].max() for i in range(x.size)]
        want_avg = [x[max(0, i - h): i + k - h].mean() for i in range(x.size)]
        assert np.allclose(max_pool(x, k), want_max) and np.allclose(avg_pool(x, k), want_avg)


def test_pyramidkv_budgets_decrease_linearly_with_the_same_total():
    T, L = 200, 6
    rng = np.random.default_rng(2)
    view = CacheView(L, [[i] for i in range(L)], T, np.zeros(T, dtype=np.int64), [np.arange(T)] * L,
                     attention=AttentionStats(window=[rng.random(T) for _ in range(L)], window_size=8))
    pyr = make_method("pyramidkv", 0.3).allocation(view)
    uni = make_method("snapkv", 0.3).allocation(view)
    assert pyr.sum() == uni.sum() == view.budget_slots(0.3)
    assert np.all(np.diff(pyr) <= 0) and pyr[0] > 1.8 * uni[0] and pyr[-1] < 0.2 * uni[-1]
    steps = -np.diff(pyr)
    assert steps.max() - steps.min() <= 2  # linear up to rounding
    # within a layer, pyramidkv is snapkv at that layer's budget
    sel = make_method("pyramidkv", 0.3).select(view)
    for layer in range(L):
        one = CacheView(1, [[0]], T, view.classes, [np.arange(T)], attention=AttentionStats(
            window=[view.attention.window[layer]], window_size=8))
        snap = make_method("snapkv", len(sel.kept[layer]) / T + 1e-12).select(one).kept[0]
        assert np.array_equal(sel.kept[layer], snap)


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


@pytest.mark.parametrize("name", sorted(METHODS))
def test_docstring_names_the_paper_or_says_none(name):
    doc = METHODS[name].__doc__
    assert "arXiv:" in doc or "No paper" in doc or "no paper" in doc or name == "pask"
