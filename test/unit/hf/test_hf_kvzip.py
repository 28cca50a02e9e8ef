"""KVzip in the reference runner: the scores of one reconstruction chunk against transformers' own
eager attention over the context followed by the repeat request (the chunk is the whole context,
so its queries see every earlier position causally); chunking restricts what a chunk's queries
see; the token ids the cache records are what was written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ROOT
from sglang_pask.hf import Runner
from sglang_pask.hf.kvzip import _texts, kvzip_heads
from sglang_pask.hf.testing import random_prompt
from sglang_pask.methods import make_method

TINY = ROOT / "models" / "tiny-random-qwen3"
P = 48


@pytest.fixture(scope="module")
def setup():
    return random_prompt(TINY, P, seed=5)


def prefilled(setup, **options):
    tok, model, ids = setup
    runner = Runner(model, tok, method=make_method("kvzip", 0.5, **options))
    cache = runner.new_cache()
    with torch.inference_mode():
        runner.forward(cache, ids[:20], 0)
        runner.forward(cache, ids[20:], 20)  # written in two forwards: both recorded
    return runner, cache


def test_scores_are_the_most_attention_a_reconstruction_query_pays(setup):
    tok, model, ids = setup
    runner, cache = prefilled(setup)
    assert cache.token_ids == ids
    scores = kvzip_heads(runner, cache)
    first, _, suffix = _texts(tok)
    full = torch.tensor([ids + list(first) + list(suffix) + ids])
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = model(full, output_attentions=True).attentions  # per layer [1, Hq, N, N]
    finally:
        runner.model.set_attn_implementation("pask")
    for li, a in enumerate(att):
        hq, hkv = a.shape[1], scores[li].shape[0]
        want = a[0, :, P:, :P].reshape(hkv, hq // hkv, -1, P).amax(dim=(1, 2))  # [Hkv, P]
        np.testing.assert_allclose(scores[li], want.numpy(), rtol=1e-4, atol=1e-6)


def test_a_chunk_sees_the_sinks_itself_and_the_repeat_only(setup):
    """Chunks of 16: every position is scored by the chunk that holds it, and a chunk that does
    not hold a position pays it nothing (it cannot see it)."""
    runner, cache = prefilled(setup, chunk_size=16, n_sink=2)
    scores = kvzip_heads(runner, cache)
    whole = kvzip_heads(*prefilled(setup))
    for s, w in zip(scores, whole):
        assert s.shape == w.shape and np.all(s > 0)
        assert not np.allclose(s, w)  # different requests and what they see: different scores
    work = cache.clone()
    work.reconstruct = (16, 32, 2, P)
    with torch.inference_mode():
        runner.forward(work, [1, 2, 3] + cache.token_ids[16:32], P)
    for lay in work.layers:
        seen = lay.kvzip_max[:, :P]
        outside = (torch.arange(P) >= 2) & ((torch.arange(P) < 16) | (torch.arange(P) >= 32))
        assert torch.all(seen[:, outside] == 0) and torch.all(seen[:, 16:32] > 0)
