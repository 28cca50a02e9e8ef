"""The prunable cache and the ``pask`` attention function on a tiny random Qwen3 (CPU, fp32)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_pask.hf.attention import use_pask_attention
from sglang_pask.hf.cache import PrunableCache
from sglang_pask.hf.testing import REF_NAME, _reference_attention, attention_impl, tiny_qwen3

V, L = 300, 3


@pytest.fixture(scope="module")
def model():
    m = tiny_qwen3(V, layers=L, hidden=64, heads=4, kv_heads=2, head_dim=16, seed=1)
    use_pask_attention(m)
    return m


def _ids(n, seed=0):
    return torch.randint(0, V, (1, n), generator=torch.Generator().manual_seed(seed))


def _fwd(model, cache, ids, start):
    pos = torch.arange(start, start + ids.shape[1])[None]
    return model(input_ids=ids, position_ids=pos, cache=cache, pask_cache=cache, use_cache=True).logits[0]


@torch.inference_mode()
def test_keep_rebuilds_smaller_tensors_and_keeps_positions(model):
    c = PrunableCache(L)
    _fwd(model, c, _ids(10), 0)
    k1_before = c.layers[1].keys.clone()
    c.keep(1, [0, 3, 9])
    lay = c.layers[1]
    assert lay.keys.shape[-2] == lay.values.shape[-2] == 3
    assert lay.positions.tolist() == [0, 3, 9]
    assert torch.equal(lay.keys, k1_before[:, :, [0, 3, 9]])
    for t in (lay.keys, lay.values):  # new storage holding exactly the kept slots
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
    assert c.get_seq_length() == 10 and c.physical_lengths() == [10, 3, 10]
    assert c.kv_bytes() == sum(2 * n * 2 * 16 * 4 for n in (10, 3, 10))
    with pytest.raises(ValueError):
        c.keep(1, [0, 4])  # 4 is not held any more
    with pytest.raises(ValueError):
        c.keep(0, [3, 1])


@torch.inference_mode()
def test_no_pruning_equals_plain_sdpa_in_chunks(model):
    ids = _ids(24, seed=2)
    with attention_impl(model, "sdpa"):
        ref = model(input_ids=ids).logits[0]
    c = PrunableCache(L)
    got = torch.cat([_fwd(model, c, ids[:, :10], 0), _fwd(model, c, ids[:, 10:11], 10),
                     _fwd(model, c, ids[:, 11:], 11)])
    assert (got - ref).abs().max() < 1e-5


@torch.inference_mode()
def test_multi_token_forward_after_per_layer_eviction(model):
    """Layers hold different positions; a 5-token chunk then single tokens still attend exactly
    to what each layer holds (reference: full recompute with explicit per-layer masks)."""
    ids = _ids(30, seed=3)
    c = PrunableCache(L)
    _fwd(model, c, ids[:, :20], 0)
    keeps = {0: [0, 1, 5, 7, 19], 1: list(range(0, 20, 2)) + [19], 2: list(range(12, 20))}
    for li, k in keeps.items():
        c.keep(li, sorted(set(k)))
    got = torch.cat([_fwd(model, c, ids[:, 20:25], 20), _fwd(model, c, ids[:, 25:26], 25),
                     _fwd(model, c, ids[:, 26:], 26)])
    T = 30
    t, s = np.arange(T)[:, None], np.arange(T)[None]
    masks = []
    for li in range(L):
        dropped = np.setdiff1d(np.arange(20), keeps[li])
        vis = (s <= t) & ~(np.isin(s, dropped) & (t >= 20))
        masks.append(torch.from_numpy(vis))
    from transformers import AttentionInterface

    AttentionInterface.register(REF_NAME, _reference_attention)
    with attention_impl(model, REF_NAME):
        ref = model(input_ids=ids, position_ids=torch.arange(T)[None], reference_masks=masks).logits[0]
    assert (got - ref[20:]).abs().max() < 1e-5
    with attention_impl(model, "sdpa"):
        plain = model(input_ids=ids).logits[0]
    assert (got - plain[20:]).abs().max() > 1e-3  # eviction did change something
    assert c.physical_lengths() == [15, 21, 18]


@torch.inference_mode()
@pytest.mark.parametrize("kind", ["accumulated", "window"])
def test_attention_statistics_match_eager_weights(model, kind):
    """Recorded statistics = transformers' eager attention probabilities summed over heads
    (accumulated: over all queries; window: the last w queries), across two forwards."""
    ids = _ids(16, seed=4)
    with attention_impl(model, "eager"):
        att = model(input_ids=ids, output_attentions=True).attentions  # L x [1, H, T, T]
    w = 5
    c = PrunableCache(L, stats=kind, window_size=w if kind == "window" else 0)
    _fwd(model, c, ids[:, :12], 0)
    _fwd(model, c, ids[:, 12:], 12)
    for li in range(L):
        probs = att[li][0].sum(0)  # [T, T]
        want = probs.sum(0) if kind == "accumulated" else probs[-w:].sum(0)
        lay = c.layers[li]
        got = lay.accumulated if kind == "accumulated" else lay.window_rows.sum(0)
        assert torch.allclose(got, want, atol=1e-5)
    before = c.layers[0].accumulated if kind == "accumulated" else c.layers[0].window_rows.sum(0)
    c.keep(0, [0, 2, 15])
    kept = c.layers[0].accumulated if kind == "accumulated" else c.layers[0].window_rows.sum(0)
    assert torch.equal(kept, before[[0, 2, 15]])  # statistics are pruned with their slots


def test_bad_stats_kind():
    with pytest.raises(ValueError):
        PrunableCache(2, stats="h2o")
    with pytest.raises(ValueError):
        PrunableCache(2, stats="window", window_size=0)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_evictions_and_chunks_match_masked_recompute(model, data):
    """Property: any sequence of chunk sizes and per-layer keeps (tail of each chunk kept) gives
    the logits of a full recompute whose per-layer masks hide each drop from later queries."""
    T = 26
    ids = _ids(T, seed=data.draw(st.integers(0, 1000)))
    c = PrunableCache(L)
    dropped_at = np.full((L, T), T + 1)
    got, start = [], 0
    with torch.inference_mode():
        while start < T:
            n = data.draw(st.integers(1, min(6, T - start)))
            got.append(_fwd(model, c, ids[:, start:start + n], start))
            start += n
            for li in range(L):
                held = c.positions(li).tolist()
                keep = [p for p in held if p == start - 1 or data.draw(st.booleans())]
                c.keep(li, keep)
                dropped_at[li, sorted(set(held) - set(keep))] = start
        t, s = np.arange(T)[:, None], np.arange(T)[None]
        masks = [torch.from_numpy((s <= t) & (dropped_at[li][None] > t)) for li in range(L)]
        from transformers import AttentionInterface

        AttentionInterface.register(REF_NAME, _reference_attention)
        with attention_impl(model, REF_NAME):
            ref = model(input_ids=ids, position_ids=torch.arange(T)[None], reference_masks=masks).logits[0]
    assert (torch.cat(got) - ref).abs().max() < 1e-5
    assert all(len(c.positions(li)) == c.layers[li].keys.shape[-2] for li in range(L))


def test_sliding_window_models_are_refused():
    m = tiny_qwen3(V, layers=2, use_sliding_window=True, sliding_window=8, max_window_layers=1)
    if set(m.config.layer_types) == {"full_attention"}:
        pytest.skip("this transformers version builds no sliding layers from these settings")
    with pytest.raises(NotImplementedError):
        use_pask_attention(m)
