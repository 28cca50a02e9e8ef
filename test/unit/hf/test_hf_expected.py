"""Expected Attention in the reference runner: the cache's pre-RoPE query statistics against the
queries transformers computes (Qwen3's ``q_norm`` output, before RoPE), and the scores against a
direct computation through transformers' own RoPE (one future position, mean term only)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ROOT
from sglang_pask.hf import Runner
from sglang_pask.hf.expected import expected_heads
from sglang_pask.hf.testing import random_prompt
from sglang_pask.methods import make_method
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

TINY = ROOT / "models" / "tiny-random-qwen3"
P = 40  # prompt tokens


@pytest.fixture(scope="module")
def setup():
    return random_prompt(TINY, P, seed=3)


def run(setup, **options):
    tok, model, ids = setup
    runner = Runner(model, tok, method=make_method("expected_attention", 0.5, **options))
    cache = runner.new_cache()
    captured = []
    hooks = [layer.self_attn.q_norm.register_forward_hook(lambda m, i, o: captured.append(o.detach()))
             for layer in model.model.layers]
    try:
        with torch.inference_mode():
            runner.forward(cache, ids, 0)
    finally:
        for h in hooks:
            h.remove()
    return runner, cache, captured  # captured[l]: [1, P, Hq, D], pre-RoPE queries of layer l


def test_query_statistics_are_the_pre_rope_queries(setup):
    _, cache, captured = run(setup, n_sink=4)
    assert cache.stats == "expected_heads" and cache.query_skip == 4
    for lay, q in zip(cache.layers, captured):
        pre = q[0, 4:].double().transpose(0, 1)  # [Hq, P-4, D]: positions >= n_sink
        assert lay.q_count == P - 4
        # fp32 queries, un-rotated in fp64
        torch.testing.assert_close(lay.q_sum, pre.sum(1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lay.q_outer, torch.einsum("hqi,hqj->hij", pre, pre), rtol=1e-5, atol=1e-5)


def test_scores_are_the_mean_query_attending_from_the_next_position(setup):
    """With one future position and no covariance or value norm, the score of key k in KV head
    g is the mean over g's query heads of softmax over the non-sink keys of (R_P mu) . k /
    sqrt(D), R_P applied by transformers' apply_rotary_pos_emb at position P."""
    runner, cache, captured = run(setup, n_sink=2, n_future_positions=1, use_covariance=False, use_vnorm=False)
    scores = expected_heads(cache, runner.method)
    rotary = runner.model.model.rotary_emb
    for li, (lay, q) in enumerate(zip(cache.layers, captured)):
        mu = q[0, 2:].double().mean(0)  # [Hq, D]
        cos, sin = rotary(mu, torch.tensor([[P]]))
        rq, _ = apply_rotary_pos_emb(mu[None, :, None], mu[None, :, None], cos, sin)  # [1, Hq, 1, D]
        keys = lay.keys[0].double()  # [Hkv, P, D]
        hq, hkv, d = mu.shape[0], keys.shape[0], keys.shape[-1]
        z = torch.einsum("hd,hnd->hn", rq[0, :, 0], keys.repeat_interleave(hq // hkv, 0)) / d ** 0.5
        want = torch.softmax(z[:, 2:], -1).view(hkv, hq // hkv, -1).mean(1)
        assert scores[li].shape == (hkv, P)
        assert np.all(scores[li][:, :2] == 0)  # sinks: not scored (the method keeps them by position)
        np.testing.assert_allclose(scores[li][:, 2:], want.numpy(), rtol=1e-6, atol=1e-9)
