"""``--pask-method streaming|random|full`` without ``--pask-policy`` (no server: the stand-in the
plugin builds; the live server runs it in test_server_persist.py): the stand-in is the model's
structure prior, bound to the served model, at budget 0.33 and the default operating point, and
``pask`` itself still needs a real policy."""

from __future__ import annotations

import argparse

import pytest
from conftest import TINY_FC, TINY_RANDOM


@pytest.mark.parametrize("method, units", [("streaming", 4), ("random", 4), ("full", 4)])
def test_policy_free_methods_get_a_stand_in_bound_to_the_model(method, units):
    from sglang_pask.policy import load_policy
    from sglang_pask.srt import serving
    from sglang_pask.srt.plugin import POLICY_FREE_BUDGET, policy_free_stand_in

    path = policy_free_stand_in(argparse.Namespace(pask_method=method, model_path=str(TINY_FC)))
    policy = load_policy(path, model_dir=str(TINY_FC))  # binds: the served model's shape and fingerprint
    assert policy.calibration is None and policy.budget == POLICY_FREE_BUDGET == 0.33
    config = serving.build_config(path, serving.ServingFlags(method=method), model_dir=str(TINY_FC))
    assert config.method.name == method and len(config.units) == units
    assert config.resolved.point.schedule == "continuous"
    if method != "full":
        assert config.method.budget == POLICY_FREE_BUDGET
    other = policy_free_stand_in(argparse.Namespace(pask_method=method, model_path=str(TINY_RANDOM)))
    assert other != path  # one stand-in per model (by fingerprint), never another model's


def test_pask_and_unknown_methods_get_none():
    from sglang_pask.srt.plugin import policy_free_stand_in

    for method in ("pask", None, "no-such-method"):
        assert policy_free_stand_in(argparse.Namespace(pask_method=method, model_path=str(TINY_FC))) is None
