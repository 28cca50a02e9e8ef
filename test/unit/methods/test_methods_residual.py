"""PASK's residual scorer as a composed part: the ``residual`` block of a policy, the
:class:`~sglang_pask.methods.residual.ResidualScorer` a pask holds, and the old spelling (four
top-level fields, the keywords a record writes) read as the same scorer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sglang_pask.methods import AttentionStats, Pask, ResidualScorer, make_method
from sglang_pask.methods.residual import STATISTICS
from sglang_pask.methods.testing import random_policy, random_view
from sglang_pask.policy import Policy
from sglang_pask.policy.digest import policy_hash
from sglang_pask.policy.residual import STATS, legacy_fields

OLD = {"attention_blend": 0.5, "attention_stat": "kvzip", "head_split": True, "residual_split": "scores"}
BLOCK = {"blend": 0.5, "stat": "kvzip", "per_head": True, "split": "scores"}


def test_every_statistic_names_engine_fields():
    assert set(STATISTICS) == set(STATS)
    names = {f.name for f in dataclasses.fields(AttentionStats)}
    for stat in STATISTICS.values():
        assert {stat.group, stat.heads} <= names


def test_the_block_and_the_old_fields_are_one_policy():
    base = random_policy(0, [[0], [1, 2]]).document()
    new = Policy.model_validate({**base, "residual": BLOCK})
    old = Policy.model_validate({**base, **OLD})
    assert new == old and policy_hash(new) == policy_hash(old)
    assert new.document()["residual"] == BLOCK and not set(OLD) & set(new.document())
    assert legacy_fields(new.document()["residual"]) == OLD
    # the pure lookup: no block, and the hash of a file that never had one
    assert policy_hash(Policy.model_validate({**base, "attention_blend": 0.0})) == \
        policy_hash(Policy.model_validate(base))


@pytest.mark.parametrize("bad, match", [
    ({"residual": {**BLOCK, "stat": "h2o"}}, r"residual\.stat must be one of window, kvzip"),
    ({"residual": {**BLOCK, "blend": 0.0}}, r"residual\.blend = 0\.0: a residual block needs a blend > 0"),
    ({"residual": {**BLOCK, "extra": 1}}, r"residual\.extra"),
    ({"residual": BLOCK, "attention_blend": 0.5}, "spell the same setting twice"),
])
def test_the_block_is_checked_and_names_its_keys(bad, match):
    with pytest.raises(ValueError, match=match):
        Policy.model_validate({**random_policy(0, [[0]]).document(), **bad})


def test_a_scorer_composes_into_pask_as_the_old_keywords_did():
    view = random_view(3, num_layers=2, groups=[[0], [1]], per_group=True)
    p = random_policy(3, view.groups, 0.3)
    for old, scorer in [({"attention_blend": 0.5}, ResidualScorer(0.5)),
                        ({"attention_blend": 1.0, "attention_stat": "kvzip"}, ResidualScorer(1.0, stat="kvzip")),
                        ({"attention_blend": 0.25, "residual_split": "scores"}, ResidualScorer(0.25, split="scores"))]:
        composed = Pask(0.3, policy=p, residual=scorer)
        assert composed == make_method("pask", 0.3, policy=p, **old)
        assert composed.record() == make_method("pask", 0.3, policy=p, **old).record()
        assert composed.needs_attention == scorer.needs_attention
        a, b = composed.select(view), make_method("pask", 0.3, policy=p, **old).select(view)
        assert all(np.array_equal(x, y) for x, y in zip(a.kept, b.kept))
    with pytest.raises(ValueError, match="name the residual scorer twice"):
        make_method("pask", 0.3, policy=p, attention_blend=0.5, residual=ResidualScorer(0.5))


def test_a_policy_scorer_is_the_default_and_blend_zero_switches_it_off():
    p = Policy.model_validate({**random_policy(1, [[0]]).document(), "residual": BLOCK})
    assert Pask(policy=p).residual == ResidualScorer(**BLOCK)
    assert Pask(policy=p).per_head and Pask(policy=p).adaptive_heads
    off = Pask(policy=p, residual=ResidualScorer(0.0))
    assert off.residual_scorer is None and off.needs_attention is None and not off.per_head
    assert off.record()["attention_blend"] == 0.0  # 0 over a blending policy is recorded
