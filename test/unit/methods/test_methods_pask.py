"""The pask method: DESIGN.md §4 budget arithmetic on hand-checked examples, floors honoured
whenever they fit, and the documented down-scaling order when they do not."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_pask.methods import CacheView, make_method
from sglang_pask.methods.testing import fake_binding, random_policy, random_view
from sglang_pask.policy import Policy
from sglang_pask.structure import StructClass as S

NAMES = [c.name for c in S]
FIRST = ["TOOL_NAME", "PARAM_NAME", "ENUM_VALUE"]


def policy(floors: dict[str, float], shares=(0.75, 0.25), sinks=1, window=2, groups=((0,), (1,))):
    order = FIRST + [n for n in NAMES if n not in FIRST]
    return Policy.model_validate({
        "model": fake_binding(sum(len(g) for g in groups)).model_dump(),
        "groups": [list(g) for g in groups], "classes": NAMES, "priority": [order] * len(groups),
        "floor": [floors] * len(groups), "residual_share": list(shares), "sinks": sinks,
        "recent_window": window, "budget": 0.33, "calibration": None,
    })


def with_old_fields(p: Policy, **old) -> Policy:
    """``p`` with the residual scorer that the old top-level fields ``old`` (``attention_blend``
    ...) spell, unchecked (as ``model_copy`` sets a field)."""
    from sglang_pask.policy.residual import from_legacy
    from sglang_pask.policy.schema import ResidualModel

    return p.model_copy(update={"residual": ResidualModel.model_construct(**from_legacy(old, p.residual and
                                                                                        p.residual.model_dump()))})


def schema_view(num_layers=2, groups=((0,), (1,))) -> CacheView:
    """40 tokens: TOOL_NAME 5-9, PARAM_NAME 15-19, ENUM_VALUE 25-29, each run between
    SCHEMA_PUNCT tokens (4, 10, 14, 20, 24, 30); QUERY_TEXT elsewhere."""
    cls = np.full(40, S.QUERY_TEXT)
    cls[5:10], cls[15:20], cls[25:30] = S.TOOL_NAME, S.PARAM_NAME, S.ENUM_VALUE
    cls[[4, 10, 14, 20, 24, 30]] = S.SCHEMA_PUNCT
    return CacheView(num_layers, [list(g) for g in groups], 40, cls, [np.arange(40)] * num_layers)


ALL3 = {"TOOL_NAME": 1.0, "PARAM_NAME": 1.0, "ENUM_VALUE": 1.0}
R = lambda a, b: list(range(a, b))  # noqa: E731


def test_floors_exceed_group_budget_scale_down_in_priority_order():
    # S = floor(0.25*2*40) = 20, 10 per layer. Demand: anchors {0, 38, 39} + 15 protected = 18.
    # Mandatory = 10: anchors, all 5 TOOL_NAME, then the 2 newest PARAM_NAME; residual 0.
    sel = make_method("pask", 0.25, policy=policy(ALL3)).select(schema_view())
    assert sel.info["demand"] == [18, 18] and sel.info["mandatory"] == [10, 10]
    assert sel.info["residual"] == [0, 0]
    for k in sel.kept:
        assert k.tolist() == [0, *R(5, 10), 18, 19, 38, 39]


def test_floors_fit_then_residual_by_share_and_delimiters_first():
    # S = 40, 20 per layer; demand 18 fits. Residual 40 - 36 = 4 split 0.75 / 0.25 -> 3 / 1,
    # spent first on the punctuation around protected spans, newest first (30, 24, 20).
    sel = make_method("pask", 0.5, policy=policy(ALL3)).select(schema_view())
    core = [0, *R(5, 10), *R(15, 20), *R(25, 30), 38, 39]
    assert sel.info["mandatory"] == [18, 18] and sel.info["residual"] == [3, 1]
    assert sel.kept[0].tolist() == sorted(core + [20, 24, 30])
    assert sel.kept[1].tolist() == sorted(core + [30])


def test_without_span_delimiters_residual_goes_by_class_priority_then_recency():
    sel = make_method("pask", 0.5, policy=policy(ALL3), span_delimiters=False).select(schema_view())
    core = [0, *R(5, 10), *R(15, 20), *R(25, 30), 38, 39]
    # QUERY_TEXT ranks above SCHEMA_PUNCT in this priority: the newest query tokens come next
    assert sel.kept[0].tolist() == sorted(core + [35, 36, 37])
    assert sel.kept[1].tolist() == sorted(core + [37])


def test_fractional_floor_keeps_the_newest_share_and_anchors_count():
    # ENUM_VALUE floor 0.5 of 5 tokens -> ceil(2.5) = 3: the newest three (27, 28, 29).
    p = policy({"ENUM_VALUE": 0.5}, shares=(0.5, 0.5))
    sel = make_method("pask", 0.1, policy=p, span_delimiters=False).select(schema_view())
    # S = 8, 4 per layer: anchors 0, 38, 39 + 1 of the 3 protected -> 29
    assert sel.kept[0].tolist() == [0, 29, 38, 39]
    # a recent window covering the enum run counts towards its floor: nothing extra protected
    p = policy({"ENUM_VALUE": 0.5}, shares=(0.5, 0.5), window=15)
    sel = make_method("pask", 0.5, policy=p).select(schema_view())
    assert sel.info["demand"] == [1 + 15, 1 + 15]


def test_group_budget_and_shares_with_multi_layer_groups():
    # 4 layers in groups [0,1], [2,3]; every layer of a group keeps the same set
    p = policy(ALL3, shares=(1.0, 0.0), groups=((0, 1), (2, 3)))
    view = schema_view(4, ((0, 1), (2, 3)))
    sel = make_method("pask", 0.5, policy=p).select(view)
    # S = 80, 20 per layer; mandatory 18 each; residual 80 - 72 = 8 all to group 0: 4 per layer
    assert sel.info["residual"] == [4, 0]
    assert [len(k) for k in sel.kept] == [22, 22, 18, 18]
    assert np.array_equal(sel.kept[0], sel.kept[1]) and np.array_equal(sel.kept[2], sel.kept[3])


def test_policy_and_view_must_match():
    p = policy(ALL3)
    with pytest.raises(ValueError, match="do not match the policy"):
        make_method("pask", 0.5, policy=p).select(schema_view(2, ((0, 1),)))
    bad = CacheView(2, [[0, 1]], 40, schema_view().classes, [np.arange(40), np.arange(1, 40)])
    p1 = policy(ALL3, shares=(1.0,), groups=((0, 1),))
    with pytest.raises(ValueError, match="one set per group"):
        make_method("pask", 0.5, policy=p1).select(bad)
    assert make_method("pask", policy=p).budget == 0.33  # the policy's default budget


def _anchor_mask(view: CacheView, method, held):
    return (held < method.sinks) | (held >= view.seq_len - method.window) | (held >= view.tail_start)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), budget=st.floats(0.01, 0.95))
def test_floors_hold_whenever_they_fit(seed, budget):
    view = random_view(seed, per_group=True, num_classes=12)
    method = make_method("pask", budget, policy=random_policy(seed, view.groups, budget))
    sel = method.select(view)
    S = view.budget_slots(budget)
    if view.num_layers * view.protected_tail >= S:
        return
    floors = method.floors
    for g, layers in enumerate(view.groups):
        if sel.info["demand"][g] > S // view.num_layers:
            continue
        held, kept = view.retained[layers[0]], sel.kept[layers[0]]
        for c in np.unique(view.classes[held]):
            n_held = int((view.classes[held] == c).sum())
            n_kept = int((view.classes[kept] == c).sum())
            assert n_kept >= math.ceil(floors[g, c] * n_held - 1e-9), (g, c, n_kept, n_held)
            if floors[g, c] == 1.0:
                assert n_kept == n_held


@settings(max_examples=150, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), budget=st.floats(0.01, 0.95))
def test_down_scaling_order(seed, budget):
    """Kept sets are prefixes of the documented order: current step, sinks, recent window (newest
    first), floor-1 classes by priority, then everything else."""
    view = random_view(seed, per_group=True, num_classes=12)
    p = random_policy(seed, view.groups, budget, floor_values=(1.0,))
    method = make_method("pask", budget, policy=p)
    sel = method.select(view)
    ranks, floors = method.ranks, method.floors
    for g, layers in enumerate(view.groups):
        held, kept = view.retained[layers[0]], sel.kept[layers[0]]
        in_kept = np.isin(held, kept)
        tail = held >= view.tail_start
        sink = (held < method.sinks) & ~tail
        window = (held >= view.seq_len - method.window) & ~tail & ~sink
        anchor = tail | sink | window
        assert in_kept[tail].all()
        if in_kept[~tail & ~sink].any():
            assert in_kept[sink].all()
        if in_kept[~anchor].any():
            assert in_kept[window].all()
        cls = view.classes[held]
        protected = ~anchor & (floors[g][cls] == 1.0)
        if in_kept[~anchor & ~protected].any():
            assert in_kept[protected].all()
        r = ranks[g][cls]
        for rank in np.unique(r[protected & in_kept]):
            assert in_kept[protected & (r < rank)].all(), "a less sensitive class kept first"


# ---- the attention-informed residual (attention_blend) ----------------------------------------

def blend_view(window_size=2) -> CacheView:
    """schema_view with SnapKV window votes on every layer: one spike at position 12 (QUERY_TEXT),
    all else 0; the last ``window_size`` positions are the observation window."""
    from sglang_pask.methods import AttentionStats

    view = schema_view()
    votes = np.zeros(40)
    votes[12] = 5.0
    view.attention = AttentionStats(window=[votes.copy(), votes.copy()], window_size=window_size)
    return view


def test_blend_one_ranks_the_residual_by_the_pooled_window_votes():
    # no floors, no sinks, no recent window: S = floor(0.25*2*40) = 20, 10 per layer, all residual
    # but the current step (39). v = 1 for the pooled spike 9..15 (kernel 7) and the observation
    # window 38..39, 0 elsewhere; beta = 1 ignores the class order, ties go newest first (37).
    p = with_old_fields(policy({}, shares=(0.5, 0.5), sinks=0, window=0), attention_blend=1.0)
    sel = make_method("pask", 0.25, policy=p).select(blend_view())
    for k in sel.kept:
        assert k.tolist() == [*R(9, 16), 37, 38, 39]


def test_blend_between_keeps_class_order_below_the_votes():
    # beta = 0.5: a voted QUERY_TEXT (v = 1) beats an unvoted TOOL_NAME (rank 0: p < 1), and among
    # unvoted positions the class order still decides: the 5 TOOL_NAME tokens come next.
    # S = floor(0.3*2*40) = 24, 12 per layer: the 9 voted (9..15, 38, 39), then the 3 newest of
    # the unvoted TOOL_NAME tokens (5..8, rank 0), not the newer QUERY_TEXT ones.
    p = with_old_fields(policy({}, shares=(0.5, 0.5), sinks=0, window=0), attention_blend=0.5)
    sel = make_method("pask", 0.3, policy=p).select(blend_view())
    for k in sel.kept:
        assert k.tolist() == [6, 7, 8, *R(9, 16), 38, 39]


def test_blend_zero_is_the_lookup_bit_for_bit():
    view = blend_view()
    for seed in range(5):
        p = random_policy(seed, [[0], [1]])
        a = make_method("pask", 0.3, policy=p).select(view)
        b = make_method("pask", 0.3, policy=p, attention_blend=0.0).select(view)
        assert all(np.array_equal(x, y) for x, y in zip(a.kept, b.kept))
    assert make_method("pask", 0.3, policy=p).needs_attention is None


def test_blend_needs_window_statistics_and_is_refused_where_there_are_none():
    p = with_old_fields(policy({}), attention_blend=0.5)
    m = make_method("pask", 0.3, policy=p)
    assert m.needs_attention == "window" and m.attention_window == 32
    with pytest.raises(ValueError, match="needs attention.window"):
        m.select(schema_view())
    with pytest.raises(ValueError, match="batched selection has no attention statistics"):
        m.select_padded(None)
    with pytest.raises(ValueError, match=r"attention_blend .*must be in \[0, 1\]"):
        make_method("pask", 0.3, policy=p, attention_blend=1.5)


@pytest.mark.parametrize("policy_blend, own", [(0.0, None), (0.0, 0.5), (0.5, None), (0.5, 0.0)])
def test_blend_records_only_when_it_is_not_zero_everywhere(policy_blend, own):
    """A pure-lookup pask records as before the field existed; any other combination names the
    blend, and the record rebuilds an equal method over the same policy."""
    p = with_old_fields(policy({}), attention_blend=policy_blend)
    m = make_method("pask", 0.3, policy=p, attention_blend=own)
    rec = m.record()
    assert ("attention_blend" in rec) == bool(policy_blend or own)
    assert make_method(**{**rec, "policy": p}) == m


def kvzip_view(rows: list[np.ndarray]) -> CacheView:
    """schema_view over ``len(rows)`` one-layer groups with KVzip scores ``rows[l]`` (float
    ``[kv_heads, 40]``) on layer ``l``."""
    from sglang_pask.methods import AttentionStats

    L = len(rows)
    view = schema_view(num_layers=L, groups=[(i,) for i in range(L)])
    view.attention = AttentionStats(kvzip_heads=[np.asarray(r, dtype=np.float64) for r in rows])
    return view


def ranked_policy(groups, split="scores", blend=1.0):
    p = policy({}, shares=tuple([1.0 / len(groups)] * len(groups)), sinks=0, window=0, groups=groups)
    return with_old_fields(p, attention_blend=blend, attention_stat="kvzip", residual_split=split)


def test_ranked_split_gives_the_residual_to_the_group_whose_scores_win():
    """Step 7 over groups: layer 0's scores sit on 4 positions (1.0, the rest 0), layer 1's on
    every position (0.5). S = floor(0.25*2*40) = 20; each group's mandatory part is the current
    step (39), so R = 18: the ranking takes layer 0's 4, then 14 of layer 1's (ties: newest
    first), so the layers keep 5 and 15. The share split (equal shares) keeps 10 and 10."""
    spike = np.zeros((1, 40))
    spike[0, [3, 12, 21, 33]] = 1.0
    view = kvzip_view([spike, np.full((1, 40), 0.5)])
    sel = make_method("pask", 0.25, policy=ranked_policy(((0,), (1,)))).select(view)
    assert sel.info["allocation"] == [5, 15] and sel.info["ranked_shares"] == [4.0, 14.0]
    assert sel.kept[0].tolist() == [3, 12, 21, 33, 39]
    assert sel.kept[1].tolist() == R(25, 40)
    even = make_method("pask", 0.25, policy=ranked_policy(((0,), (1,)), split="share")).select(view)
    assert even.info["allocation"] == [10, 10] and "ranked_shares" not in even.info


def test_ranked_split_shares_a_groups_head_slots_by_score():
    """Step 7 over KV heads (AdaKV's split): one layer, two heads, S = floor(0.25*40) = 10 per head
    on average, 20 head-slots. Each head first keeps its mandatory part (39); head 0's two scored
    positions (1.0) beat head 1's flat 0.5, which take the 16 left, newest first."""
    rows = np.vstack([np.zeros(40), np.full(40, 0.5)])
    rows[0, [7, 17]] = 1.0
    p = with_old_fields(ranked_policy(((0,),)), head_split=True)
    m = make_method("pask", 0.25, policy=p)
    assert m.per_head and m.adaptive_heads
    sel = m.select(kvzip_view([rows]))
    heads = [sel.kept[0][sel.head_mask[0][h]].tolist() for h in range(2)]
    assert heads == [[7, 17, 39], R(23, 40)] and sel.info["allocation"] == [10]
    assert not make_method("pask", 0.25, policy=p, residual_split="share").adaptive_heads


def test_ranked_split_needs_a_blend():
    from sglang_pask.policy.residual import legacy_fields

    doc = ranked_policy(((0,), (1,)), blend=0.0).document()
    doc.update(legacy_fields(doc.pop("residual")))  # the old spelling
    with pytest.raises(ValueError, match="residual_split = 'scores' need attention_blend > 0"):
        Policy.model_validate(doc)
    p = ranked_policy(((0,), (1,)), split="share", blend=0.0)
    with pytest.raises(ValueError, match="residual_split 'scores' ranks the residual by attention votes"):
        make_method("pask", 0.25, policy=p, residual_split="scores")
    with pytest.raises(ValueError, match="residual_split must be one of share, scores"):
        make_method("pask", 0.25, policy=p, residual_split="even")


@pytest.mark.parametrize("options", [{"attention_blend": 0.5},
                                     {"attention_blend": 0.5, "head_split": True},
                                     {"attention_blend": 0.75, "head_split": True, "residual_split": "scores"}])
def test_learned_statistic_ranks_the_residual_as_kvzip_scores_would(options):
    """The ``learned`` statistic is KVzip's scores as the learned scorer predicts them: given the
    same numbers in ``learned_heads`` that another view has in ``kvzip_heads``, a residual reading
    ``learned`` keeps exactly what one reading ``kvzip`` keeps (sets, head masks, allocations)."""
    import dataclasses

    from sglang_pask.methods import AttentionStats
    from sglang_pask.methods.testing import random_view

    groups = [[0, 1], [2, 3]]
    p = policy({"TOOL_NAME": 1.0}, shares=(0.5, 0.5), sinks=1, window=2, groups=groups)
    kv = make_method("pask", 0.3, policy=p, attention_stat="kvzip", **options)
    learned = make_method("pask", 0.3, policy=p, attention_stat="learned",
                          scorer="policies/pask-tiny-fc.kvzap.safetensors", **options)
    assert learned.needs_attention == "learned_heads" and kv.needs_attention in ("kvzip_heads",)
    for seed in range(40):
        view = random_view(seed, num_layers=4, groups=groups, per_group=True)
        rows = view.attention.kvzip_heads
        a = kv.select(dataclasses.replace(view, attention=AttentionStats(kvzip_heads=rows)))
        b = learned.select(dataclasses.replace(view, attention=AttentionStats(learned_heads=rows)))
        assert [k.tolist() for k in a.kept] == [k.tolist() for k in b.kept], seed
        assert (a.head_mask is None) == (b.head_mask is None)
        if a.head_mask is not None:
            assert all(np.array_equal(x, y) for x, y in zip(a.head_mask, b.head_mask)), seed


def test_scorer_option_records_and_is_refused_without_the_learned_statistic():
    p = ranked_policy(((0,), (1,)))
    shipped = "policies/pask-tiny-fc.kvzap.safetensors"
    m = make_method("pask", 0.25, policy=p, attention_stat="learned", scorer=shipped)
    rec = m.record()
    assert rec["attention_stat"] == "learned" and rec["scorer"] == shipped and "scorer_sha256" not in rec
    assert make_method(**{**rec, "policy": p}) == m
    assert "scorer" not in make_method("pask", 0.25, policy=p).record()  # every record as before
    with pytest.raises(ValueError, match="scorer.*is read only by a residual whose statistic is 'learned'"):
        make_method("pask", 0.25, policy=p, scorer=shipped)  # the policy's statistic is kvzip
    with pytest.raises(ValueError, match="scorer_sha256"):
        make_method("pask", 0.25, policy=p, attention_stat="learned", scorer=shipped, scorer_sha256="abc")
