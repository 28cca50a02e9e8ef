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
@pytest.mark.parametrize("kind", ["accumulated", "window", "window_heads"])
def test_attention_statistics_match_eager_weights(model, kind):
    """Recorded statistics = transformers' eager attention probabilities summed over heads
    (accumulated: over all queries; window: the last w queries; window_heads: the last w
    queries, per KV head summed over its query heads), across two forwards."""
    ids = _ids(16, seed=4)
    with attention_impl(model, "eager"):
        att = model(input_ids=ids, output_attentions=True).attentions  # L x [1, H, T, T]
    w = 5
    c = PrunableCache(L, stats=kind, window_size=0 if kind == "accumulated" else w)
    _fwd(model, c, ids[:, :12], 0)
    _fwd(model, c, ids[:, 12:], 12)

    def stat(lay):
        if kind == "window_heads":
            return lay.window_head_rows.sum(1)  # [Hkv, n]
        return lay.accumulated if kind == "accumulated" else lay.window_rows.sum(0)

    for li in range(L):
        probs = att[li][0]  # [Hq, T, T]
        if kind == "window_heads":  # Hq = 4 query heads, 2 KV heads: heads (0, 1) -> 0, (2, 3) -> 1
            want = probs.view(2, 2, 16, 16).sum(1)[:, -w:].sum(1)
        else:
            want = probs.sum(0).sum(0) if kind == "accumulated" else probs.sum(0)[-w:].sum(0)
        assert torch.allclose(stat(c.layers[li]), want, atol=1e-5)
    before = stat(c.layers[0])
    c.keep(0, [0, 2, 15])
    assert torch.equal(stat(c.layers[0]), before[..., [0, 2, 15]])  # pruned with their slots


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


@torch.inference_mode()
def test_per_head_masks_hide_slots_from_their_kv_head_only(model):
    """A per-KV-head keep (union held, mask per head) then more forwards: logits equal a full
    recompute whose mask differs per KV head (expanded to its query heads); the mask is pruned
    with the slots and new slots are held by every head; memory is counted per head."""
    T, P = 30, 20
    ids = _ids(T, seed=5)
    c = PrunableCache(L)
    _fwd(model, c, ids[:, :P], 0)
    union = [0, 1, 3, 6, 10, 14, 19]
    per_head = [[0, 1, 6, 14, 19], [0, 3, 10, 14, 19]]  # 5 each, union of 7
    mask = torch.tensor([[p in h for p in union] for h in per_head])
    c.keep(1, union, head_mask=mask)
    assert torch.equal(c.head_mask(1), mask) and c.head_mask(0) is None
    got = torch.cat([_fwd(model, c, ids[:, P:P + 4], P), _fwd(model, c, ids[:, P + 4:], P + 4)])
    assert c.head_mask(1).shape == (2, 7 + T - P) and bool(c.head_mask(1)[:, 7:].all())
    vis = np.zeros((L, 2, T, T), dtype=bool)
    t, s = np.arange(T)[:, None], np.arange(T)[None]
    for li in range(L):
        for h in range(2):
            gone = np.setdiff1d(np.arange(P), per_head[h]) if li == 1 else np.array([], int)
            vis[li, h] = (s <= t) & ~(np.isin(s, gone) & (t >= P))
    from transformers import AttentionInterface

    AttentionInterface.register(REF_NAME, _reference_attention)
    with attention_impl(model, REF_NAME):
        ref = model(input_ids=ids, position_ids=torch.arange(T)[None],
                    reference_masks=[torch.from_numpy(v) for v in vis]).logits[0]
    assert (got - ref[P:]).abs().max() < 1e-5
    union_only = [torch.from_numpy(v[0] | v[1]) for v in vis]  # ignoring the per-head masks
    with attention_impl(model, REF_NAME):
        loose = model(input_ids=ids, position_ids=torch.arange(T)[None], reference_masks=union_only).logits[0]
    assert (got - loose[P:]).abs().max() > 1e-4  # the masks mattered
    # memory: layer 1 holds 17 slots physically, 5 + 10 = 15 per head
    assert c.token_head_slots() == 2 * 30 + 2 * 15 + 2 * 30
    slot = 2 * 16 * 4  # K and V, head_dim 16, fp32: bytes of one token-head slot
    assert c.kv_bytes() == c.token_head_slots() * slot
    assert c.physical_kv_bytes() == 2 * (30 + 17 + 30) * slot
    # pruning keeps the mask aligned; a head may not regain what it dropped
    c.keep(1, [0, 14, 19, 25], head_mask=torch.tensor([[True, True, True, True], [False, True, True, True]]))
    assert c.head_mask(1).tolist() == [[True, True, True, True], [False, True, True, True]]
    with pytest.raises(ValueError, match="a position it dropped"):
        c.keep(1, [0, 14, 19, 25], head_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="no head"):
        c.keep(1, [14, 19, 25], head_mask=torch.tensor([[True, True, False], [False, True, False]]))
    assert c.positions(1).tolist() == [0, 14, 19, 25]  # a refused keep changes nothing
