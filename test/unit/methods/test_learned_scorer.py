"""The learned scorer's file and fit (methods/learned.py): the ridge fit recovers a known linear map
(features of very different scales, correlated), the file round-trips as data with a stable
sha256, and a scorer refuses another model, naming both."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import ROOT
from sglang_pask.methods.learned import (
    FORMAT,
    LearnedScorer,
    ScorerError,
    fit_layer,
    ridge,
    scorer_sha256,
)
from sglang_pask.policy.binding import ModelBinding


def binding(layers=2, heads=2, fingerprint="sha256:00000000000000aa") -> ModelBinding:
    return ModelBinding(num_layers=layers, num_kv_heads=heads, head_dim=16, vocab_size=512, fingerprint=fingerprint)


def linear_data(seed=0, n=4000, d=12, h=2, noise=0.0):
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(d, d))  # correlated features
    x = rng.normal(size=(n, d)) @ mix * np.logspace(-2, 2, d) + rng.normal(size=d) * 5  # scales 0.01..100
    w = rng.normal(size=(d, h))
    b = rng.normal(size=h)
    y = x @ w + b + noise * rng.normal(size=(n, h))
    return x, y, w, b


def test_ridge_recovers_a_known_linear_map():
    x, y, w, b = linear_data()
    got_w, got_b, std = ridge(x, y, 1e-12)
    assert np.allclose(got_w, w, rtol=1e-3, atol=1e-3) and np.allclose(got_b, b, atol=1e-3)
    assert np.abs(x @ got_w + got_b - y).max() < 1e-4
    assert std["scale"].min() < 0.1 < 10 < std["scale"].max()  # standardised per feature
    # a large penalty shrinks the standardised weights towards 0 and the prediction towards the mean
    big_w, big_b, _ = ridge(x, y, 1e6)
    assert np.abs(big_w * std["scale"][:, None]).max() < 1e-3 and np.allclose(big_b + x.mean(0) @ big_w, y.mean(0))


def test_fit_layer_chooses_the_penalty_on_held_out_rows():
    x, y, w, b = linear_data(seed=1, noise=0.01)
    out_w, out_b, m = fit_layer(x[:3000], y[:3000], x[3000:], y[3000:])
    assert m["lambda"] <= 1e-4  # an exact linear map wants (almost) no penalty
    assert min(m["val_r2"]) > 0.999 and min(m["train_r2"]) > 0.999
    # each feature's contribution (weight x its spread) is recovered; the 0.01-scale ones carry
    # almost no signal next to the noise, so their raw weights are loose
    assert np.abs((out_w - w) * x.std(0)[:, None]).max() < 0.05
    assert np.sqrt(((x @ out_w + out_b - (x @ w + b)) ** 2).mean()) < 0.002  # far below the noise (0.01)
    # pure noise: the held-out error is lowest with the largest penalty
    rng = np.random.default_rng(2)
    xn, yn = rng.normal(size=(300, 40)), rng.normal(size=(300, 2))
    assert fit_layer(xn[:150], yn[:150], xn[150:], yn[150:])[2]["lambda"] == 1.0


def scorer(seed=0, layers=2, heads=2, d=8, fingerprint="sha256:00000000000000aa") -> LearnedScorer:
    rng = np.random.default_rng(seed)
    return LearnedScorer(rng.normal(size=(layers, d, heads)), rng.normal(size=(layers, heads)),
                         binding(layers, heads, fingerprint),
                         {"model_path": "models/fitted", "data": {"spec": "synthetic:train:4:tiny", "split": "train"}})


def test_file_round_trip_header_and_sha256(tmp_path):
    s = scorer()
    path = tmp_path / "scorer.safetensors"
    sha = s.save(path)
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest() == scorer_sha256(path)
    back = LearnedScorer.load(path, binding(), "models/same")
    assert np.array_equal(back.weight, s.weight) and np.array_equal(back.bias, s.bias)
    assert back.model == s.model and back.weight.dtype == np.float32
    h = back.header
    assert h["format"] == FORMAT and h["layers"] == 2 and h["kv_heads"] == 2 and h["hidden_size"] == 8
    assert h["data"] == {"spec": "synthetic:train:4:tiny", "split": "train"} and "not KVzip+" in h["target"]
    assert h["model"]["fingerprint"] == "sha256:00000000000000aa"
    x = np.random.default_rng(3).normal(size=(5, 8)).astype(np.float32)
    assert np.allclose(back.predict(1, x), (x @ s.weight[1] + s.bias[1]).T, atol=1e-5)
    assert back.predict(0, x).shape == (2, 5) and np.allclose(back.scores(0, x), np.exp(back.predict(0, x)))
    # deterministic bytes: saving the loaded scorer again gives the same file
    assert back.save(tmp_path / "again.safetensors") == sha
    assert scorer(seed=1).save(tmp_path / "other.safetensors") != sha


def test_refuses_another_model_naming_both(tmp_path):
    path = tmp_path / "s.safetensors"
    scorer().save(path)
    with pytest.raises(ScorerError) as e:
        LearnedScorer.load(path, binding(fingerprint="sha256:00000000000000bb"), "models/other")
    msg = str(e.value)
    assert "'models/fitted'" in msg and "sha256:00000000000000aa" in msg  # the scorer's model
    assert "'models/other'" in msg and "sha256:00000000000000bb" in msg  # the one it was given
    with pytest.raises(ScorerError, match="layers=3"):
        LearnedScorer.load(path, binding(layers=3), "models/deeper")


def test_malformed_files_are_refused(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(ScorerError, match="cannot read scorer file"):
        LearnedScorer.load(bad)
    with pytest.raises(ScorerError, match="cannot read"):
        scorer_sha256(tmp_path / "missing")
    from safetensors.numpy import save_file

    other = tmp_path / "other.safetensors"
    save_file({"weight": np.zeros((2, 8, 2), np.float32), "bias": np.zeros((2, 2), np.float32)}, str(other),
              metadata={"pask_scorer": json.dumps({"format": "something-else/9"})})
    with pytest.raises(ScorerError, match="format 'something-else/9'"):
        LearnedScorer.load(other)
    with pytest.raises(ScorerError, match=r"weight must be \[L, D, H\]"):
        LearnedScorer(np.zeros((2, 8)), np.zeros((2, 2)), binding())
    with pytest.raises(ScorerError, match="2 layers x 3 KV heads"):
        LearnedScorer(np.zeros((2, 8, 3)), np.zeros((2, 3)), binding())


def test_predictions_are_row_stable():
    """A row's prediction does not depend on the rows given with it (an engine that scores each
    forward's rows gets the values of one that scores the held rows at once), and equal hidden
    states score exactly equal wherever they sit."""
    s = LearnedScorer.load(ROOT / "policies" / "pask-tiny-fc.kvzap.safetensors")
    x = np.random.default_rng(4).normal(size=(300, s.hidden_size)).astype(np.float32)
    x[250] = x[17]  # a repeated token's layer-0 input
    for layer in range(s.num_layers):
        every = s.scores(layer, x)
        assert every.dtype == np.float32 and np.array_equal(every[:, 250], every[:, 17])
        for lo, hi in ((0, 1), (17, 18), (5, 123), (123, 300)):
            assert np.array_equal(s.scores(layer, x[lo:hi]), every[:, lo:hi])
            assert np.array_equal(s.predict(layer, x[lo:hi]), s.predict(layer, x)[:, lo:hi])
