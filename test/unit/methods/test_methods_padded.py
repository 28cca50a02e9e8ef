"""Every registered method that needs no attention statistics (the ones the server runs), over
random padded batches of requests: ``select_padded`` (PASK's array path, the others' default
loop) keeps exactly what ``select`` keeps request by request -- random policies with floors
(span delimiters on and off), random groups, budgets from 1e-3 to 1.0, prefill-end and later
views, tails of 1-3 positions, requests of different lengths in one batch; and batches whose rows
are own spans after a shared segment (a start per row, a budget per row: the server's segment
mode), where ``select`` runs on the row's view at the row's budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_pask.methods import METHODS, make_method
from sglang_pask.methods.padded import PaddedBatch, top_n_mask
from sglang_pask.methods.scorer import top_n
from sglang_pask.methods.segment import with_budget
from sglang_pask.methods.testing import NUM_CLASSES, consecutive_groups, random_policy

SERVED = sorted(n for n, cls in METHODS.items() if cls.needs_attention is None)
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def random_batch(seed: int, per_group: bool, own_spans: bool = False) -> PaddedBatch:
    rng = np.random.default_rng(seed)
    L = int(rng.integers(1, 6))
    groups = consecutive_groups(rng, L)
    R = int(rng.integers(1, 7))
    tail = int(rng.integers(1, 4))
    lens = rng.integers(tail, 80, size=R)
    T = int(lens.max())
    classes = rng.integers(0, NUM_CLASSES, size=(R, T))
    held = np.zeros((L, R, T), dtype=bool)
    for r, n in enumerate(lens):
        dens = 1.0 if rng.random() < 0.3 else rng.uniform(0.05, 1.0)  # prefill end, or later
        units = groups if per_group else [[layer] for layer in range(L)]
        for u in units:
            keep = np.concatenate([rng.random(n - tail) < dens, np.ones(tail, dtype=bool)])
            held[u, r, :n] = keep
    starts = budgets = None
    if own_spans:  # segment ends around the sinks, own budgets from almost nothing to everything
        starts = rng.integers(0, 8, size=R) * (rng.random(R) < 0.8)
        budgets = rng.choice([1e-4, 0.05, 0.2, 0.33, 0.61, 1.0], size=R)
    return PaddedBatch(L, groups, lens, classes, held, rng.integers(0, lens + 1), protected_tail=tail,
                       starts=starts, budgets=budgets)


@pytest.mark.parametrize("name", SERVED)
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), budget=st.sampled_from([1e-3, 0.05, 0.2, 0.33, 0.5, 1.0]),
       delimiters=st.booleans(), own_spans=st.booleans())
def test_padded_selection_equals_select_per_request(name, seed, budget, delimiters, own_spans):
    method_cls = METHODS[name]
    batch = random_batch(seed, per_group=method_cls.per_group, own_spans=own_spans)
    if name == "full":
        method = make_method("full", 1.0)
        batch.budgets = None if batch.budgets is None else np.ones(batch.size)  # own_budget of a full method
    elif name == "pask":
        method = make_method("pask", budget, policy=random_policy(seed, batch.groups, budget,
                                                                   floor_values=(0.25, 0.5, 1.0)),
                             span_delimiters=delimiters)
    else:
        method = make_method(name, budget)
    got = method.select_padded(batch)
    assert got.shape == batch.held.shape and not (got & ~batch.held).any()
    for r in range(batch.size):
        at = method if batch.budgets is None else with_budget(method, batch.budgets[r])
        kept = at.select(batch.view(r)).kept
        for layer, k in enumerate(kept):
            assert np.array_equal(np.flatnonzero(got[layer, r]), k), (name, r, layer)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_top_n_mask_equals_top_n_row_by_row(seed):
    """Ties included: scores drawn from a few values, -inf among them."""
    rng = np.random.default_rng(seed)
    R, T = int(rng.integers(1, 6)), int(rng.integers(1, 50))
    held = rng.random((R, T)) < rng.uniform(0.1, 1.0)
    scores = rng.choice([-np.inf, 0.0, 1.0, 2.5], size=(R, T))
    tail = rng.integers(0, T + 1, size=R)
    n = rng.integers(0, T + 2, size=R)
    got = top_n_mask(held, scores, n, tail)
    for r in range(R):
        h = np.flatnonzero(held[r])
        # top_n's contract: the tail is held, n >= its size
        if (h >= tail[r]).sum() != T - tail[r] or n[r] < T - tail[r]:
            continue
        assert np.array_equal(np.flatnonzero(got[r]), top_n(h, scores[r, h], int(n[r]), int(tail[r])))


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), budget=st.sampled_from([1e-3, 0.05, 0.2, 0.33, 0.5, 1.0]),
       blend=st.sampled_from([0.25, 0.5, 0.75, 1.0]), ties=st.booleans())
def test_padded_learned_residual_equals_select_per_request(seed, budget, blend, ties):
    """PASK whose residual reads the learned scorer group-wide (``--equal-pools`` policies): the
    padded selection blends the same votes as ``select`` on each row's view, which gets its
    ``learned_heads`` from the same array (ties: scores from a few values, 0 among them)."""
    from sglang_pask.methods.pask import Pask

    rng = np.random.default_rng(seed)
    batch = random_batch(seed, per_group=True)
    H = int(rng.integers(1, 4))
    shape = (batch.num_layers, H, batch.size, batch.held.shape[2])
    values = rng.choice([0.0, 0.5, 1.0, 3.0], size=shape) if ties else np.exp(-8 * rng.random(shape))
    batch.stats = (values * batch.held[:, None]).astype(np.float32)  # 0 where not held
    batch.stats_field = "learned_heads"
    method = make_method("pask", budget, policy=random_policy(seed, batch.groups, budget),
                         attention_blend=blend, attention_stat="learned")
    assert isinstance(method, Pask) and method.residual_scorer.batched
    got = method.select_padded(batch)
    for r in range(batch.size):
        kept = method.select(batch.view(r)).kept
        for layer, k in enumerate(kept):
            assert np.array_equal(np.flatnonzero(got[layer, r]), k), (r, layer)


def test_padded_residual_refuses_what_it_cannot_batch():
    batch = random_batch(3, per_group=True)
    p = random_policy(3, batch.groups, 0.33)
    with pytest.raises(ValueError, match="no attention statistics for this residual"):  # no stats given
        make_method("pask", 0.33, policy=p, attention_blend=0.5, attention_stat="learned").select_padded(batch)
    batch.stats = np.zeros((batch.num_layers, 2, *batch.held.shape[1:]), np.float32)
    batch.stats_field = "learned_heads"
    for options in ({"attention_stat": "window"}, {"attention_stat": "learned", "head_split": True},
                    {"attention_stat": "learned", "residual_split": "scores"}):
        with pytest.raises(ValueError, match="no attention statistics for this residual"):
            make_method("pask", 0.33, policy=p, attention_blend=0.5, **options).select_padded(batch)
