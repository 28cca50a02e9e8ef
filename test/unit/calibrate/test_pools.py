"""The measured ``pools`` block (calibrate/pools.py, policy/schema.py) and what the server makes
of it (srt/serving.py): per group, the share of a prompt's positions held; left out of the policy's
hash; the unit pools' shares at the policy's own budget only."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, TINY_FC
from sglang_pask.calibrate.pools import pool_share, with_pools
from sglang_pask.policy import PolicyError, load_policy, save_policy
from sglang_pask.policy.digest import policy_hash
from sglang_pask.policy.schema import PoolsModel

LOOKUP = ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.2.json"  # groups [[0, 1], [2, 3]], no pools


def _rec(prompt, held, out=10):
    return {"id": "x", "meta": {"prompt_tokens": prompt, "held_prompt": held, "completion_tokens": out}}


def test_share_is_token_weighted_and_averages_a_groups_layers():
    recs = [_rec(100, [30, 30, 50, 40]), _rec(300, [90, 90, 120, 140], 20),
            {"id": "rejected", "meta": {}}]  # did not run: skipped
    got = pool_share(recs, [[0, 1], [2, 3]])
    assert got["entries"] == 2 and got["prompt_tokens"] == 200 and got["output_tokens"] == 15
    assert got["share"] == [pytest.approx(120 / 400), pytest.approx((45 + 130) / 400)]
    with pytest.raises(ValueError, match="no entry ran"):
        pool_share([{"id": "r", "meta": {}}], [[0, 1], [2, 3]])


def test_block_round_trips_and_leaves_the_hash(tmp_path):
    policy = load_policy(LOOKUP)
    block = PoolsModel(share=[0.25, 0.41], data="synthetic:calib:40:tiny", entries=40, max_tokens=128)
    out = tmp_path / "p.json"
    save_policy(with_pools(policy, block), out)
    back = load_policy(out)
    assert back.pools == block and json.loads(out.read_text())["pools"]["share"] == [0.25, 0.41]
    assert policy_hash(back) == policy_hash(policy)  # sizes pools, changes no kept set
    assert "pools" not in load_policy(LOOKUP).document()  # absent: files as before


@pytest.mark.parametrize("share, entries, message", [
    ([0.3], 40, "pools.share has 1 entries but there are 2 groups"),
    ([0.3, 0.0], 40, r"pools.share\[1\] = 0.0 is outside \(0, 1\]"),
    ([0.3, 1.5], 40, r"pools.share\[1\] = 1.5 is outside \(0, 1\]"),
    ([0.3, 0.4], 0, "pools.entries = 0"),
    ([0.3, 0.4], -1, "pools.prompt_tokens = -5.0 is not a finite count"),
])
def test_bad_blocks_are_named(tmp_path, share, entries, message):
    doc = json.loads(LOOKUP.read_text())
    doc["pools"] = {"share": share, "data": "synthetic:calib:40:tiny", "entries": max(entries, 0)}
    if entries < 0:
        doc["pools"].update(entries=4, prompt_tokens=-5.0)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match=message):
        load_policy(path)


def test_measured_on_the_runner_mean_is_the_budget():
    """The tiny model's lookup at 0.2: its groups hold different shares of a prompt (floors and
    residual shares), and their layer mean is the budget it keeps of the prompt."""
    import sglang_pask
    from sglang_pask.calibrate.pools import measure_pools
    from sglang_pask.calibrate.scorer import entries_of
    from sglang_pask.eval.harness import Settings

    policy = load_policy(LOOKUP)
    runner = sglang_pask.load_runner(str(TINY_FC))
    pools = measure_pools(runner, policy, entries_of("synthetic:calib:8:tiny"), Settings(max_tokens=32), "x")
    assert pools.entries == 8 and len(pools.share) == 2 and 50 < pools.prompt_tokens < 400
    assert 0 < pools.output_tokens <= 32
    assert sum(pools.share) / 2 == pytest.approx(0.2, abs=0.03)
    assert abs(pools.share[1] - pools.share[0]) > 0.05  # unequal: what equal pools would waste


def test_server_sizes_units_by_the_policy_at_its_own_budget(tmp_path):
    pytest.importorskip("sglang")
    from sglang_pask.srt import serving

    policy = load_policy(LOOKUP)
    path = tmp_path / "p.json"
    save_policy(with_pools(policy, PoolsModel(share=[0.25, 0.41], prompt_tokens=1100.0, output_tokens=40.0,
                                              data="d", entries=4)), path)
    config = serving.build_config(str(path), serving.ServingFlags(), model_dir=str(TINY_FC))
    assert config.units == ((0, 1), (2, 3)) and config.unit_share == (0.25, 0.41)
    assert config.pool_tokens == (1100.0, 40.0)
    assert "sized by the policy's measured shares [0.25, 0.41]" in config.describe()
    other = serving.build_config(str(path), serving.ServingFlags(budget=0.33), model_dir=str(TINY_FC))
    assert other.unit_share is None  # measured at 0.2, not at 0.33
    base = serving.build_config(str(path), serving.ServingFlags(method="snapkv"), model_dir=str(TINY_FC))
    assert base.unit_share is None
    plain = serving.build_config(str(LOOKUP), serving.ServingFlags(), model_dir=str(TINY_FC))
    assert plain.unit_share is None
