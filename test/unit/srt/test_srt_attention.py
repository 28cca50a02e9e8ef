"""srt/attention/torch_native_backend.sparse_attention against an explicit masked softmax (the definition)."""

import pytest
import torch

pytest.importorskip("sglang")
from sglang_pask.srt.attention.torch_native_backend import sparse_attention  # noqa: E402


def _naive(q, k, v, q_pos, k_pos, scale, allow=None):
    rep = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    s = torch.einsum("hqd,hkd->hqk", q, k) * scale
    if q_pos is not None:
        s = s.masked_fill(~(k_pos[None, :] <= q_pos[:, None])[None], float("-inf"))
    if allow is not None:  # query head h reads KV head h // rep's keys only
        for h in range(q.shape[0]):
            s[h, :, ~allow[h // rep]] = float("-inf")
    return torch.einsum("hqk,hkd->hqd", s.softmax(-1), v)


@pytest.mark.parametrize("heads", [False, True])
@pytest.mark.parametrize("case", ["fresh prefill", "prefill after drops", "extend", "decode"])
def test_matches_masked_softmax(case, heads):
    g = torch.Generator().manual_seed(0)
    H, HK, D, T = 4, 2, 16, 12
    kpos = {"fresh prefill": torch.arange(T), "prefill after drops": torch.tensor([0, 1, 4, 7, 9, 10, 11]),
            "extend": torch.arange(T), "decode": torch.tensor([0, 2, 5, 11])}[case]
    qpos = {"fresh prefill": torch.arange(T), "prefill after drops": torch.arange(9, 12),
            "extend": torch.arange(8, 12), "decode": None}[case]
    nq = 1 if qpos is None else len(qpos)
    q = torch.randn(H, nq, D, generator=g)
    k, v = torch.randn(HK, len(kpos), D, generator=g), torch.randn(HK, len(kpos), D, generator=g)
    # a per-head selection: KV head 1 no longer reads every other key after the first, before the
    # last (the first and the newest -- the current step -- are every head's: no query reads nothing)
    allow = None
    if heads:
        allow = torch.ones(HK, len(kpos), dtype=torch.bool)
        allow[1, 1: len(kpos) - 1: 2] = False
    got = sparse_attention(q, k, v, qpos, kpos, D ** -0.5, enable_gqa=True, allow=allow)
    torch.testing.assert_close(got, _naive(q, k, v, qpos, kpos, D ** -0.5, allow), rtol=1e-5, atol=1e-5)


def _random_batch(seed, B=5, full=160, unit=100, width=30):
    """A mapping with random drops and a req_to_token of B rows with random lengths (>= 1; the
    newest token of every row is held, as a decode step's own token is)."""
    g = torch.Generator().manual_seed(seed)
    mapping = torch.zeros(full + 2, dtype=torch.int64)
    ids = torch.randperm(full, generator=g)[: B * width].reshape(B, width) + 1
    lens = torch.randint(1, width + 1, (B,), generator=g)
    free = iter(torch.randperm(unit, generator=g).tolist())
    for i in range(B):
        for j in range(int(lens[i])):
            if j == lens[i] - 1 or torch.rand((), generator=g) < 0.4:
                mapping[ids[i, j]] = next(free, -1) + 1
    req_to_token = torch.zeros(B + 3, width, dtype=torch.int32)
    rows = torch.randperm(B + 3, generator=g)[:B]
    req_to_token[rows] = ids.to(torch.int32)
    return mapping, req_to_token, rows, lens


@pytest.mark.parametrize("seed", range(4))
def test_padded_held_slots_equals_held_slots_row_by_row(seed):
    from sglang_pask.srt.attention.torch_native_backend import padded_held_slots
    from sglang_pask.srt.mem_cache.segment_views import held_slots

    mapping, r2t, rows, lens = _random_batch(seed)
    slots, counts = padded_held_slots(mapping, r2t, rows, lens)
    assert slots.shape == (len(rows), int(counts.max())) and bool((counts >= 1).all())
    for i in range(len(rows)):
        want, _ = held_slots(mapping, r2t[rows[i], : lens[i]])
        assert int(counts[i]) == len(want)
        assert torch.equal(slots[i, : len(want)], want) and bool((slots[i, len(want):] == 0).all())


@pytest.mark.parametrize("impl", ["reference", "compiled"])
@pytest.mark.parametrize("seed", range(4))
def test_decode_attention_over_padded_slots_equals_sparse_attention_per_request(seed, impl):
    """What the backend runs per layer of a decode batch: every request's output equals the
    reference attention over its own held keys (both implementations of the operator)."""
    from sglang_pask import ops
    from sglang_pask.ops import reference
    from sglang_pask.srt.attention.torch_native_backend import padded_held_slots
    from sglang_pask.srt.mem_cache.segment_views import held_slots

    if impl == "compiled" and ops.compiled() is None:
        pytest.skip(ops.implementation())
    mapping, r2t, rows, lens = _random_batch(seed)
    g = torch.Generator().manual_seed(100 + seed)
    H, HK, D = 4, 2, 16
    kb, vb = torch.randn(101, HK, D, generator=g), torch.randn(101, HK, D, generator=g)
    q = torch.randn(len(rows), H, D, generator=g)
    slots, counts = padded_held_slots(mapping, r2t, rows, lens)
    run = ops.decode_attention if impl == "compiled" else reference.decode_attention
    got = run(q, kb, vb, slots, counts, D ** -0.5)
    for i in range(len(rows)):
        s, _ = held_slots(mapping, r2t[rows[i], : lens[i]])
        want = sparse_attention(q[i][:, None], kb[s].movedim(0, 1), vb[s].movedim(0, 1), None, None,
                                D ** -0.5, enable_gqa=True)[:, 0]
        torch.testing.assert_close(got[i], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_padded_append_equals_padded_held_slots_step_after_step(seed):
    """What consecutive decode steps of one batch build (each row one token longer, its new token
    held in every unit, nothing dropped between): :func:`padded_append` equals building it whole,
    step after step; a new token not held in the unit gives None (the backend rebuilds)."""
    from sglang_pask.srt.attention.torch_native_backend import padded_append, padded_held_slots

    mapping, r2t, rows, lens = _random_batch(seed, full=300, width=40)
    lens = torch.clamp(lens, max=30)  # room for the steps below
    g = torch.Generator().manual_seed(200 + seed)
    free = [int(s) for s in torch.randperm(400, generator=g) + 101]  # slots no row holds yet
    prev = padded_held_slots(mapping, r2t, rows, lens)
    for _ in range(8):
        lens = lens + 1
        for i in range(len(rows)):  # the step's own token: mapped in this unit
            mapping[r2t[rows[i], lens[i] - 1].long()] = free.pop()
        got = padded_append(prev, mapping, r2t, rows, lens)
        want = padded_held_slots(mapping, r2t, rows, lens)
        assert got is not None and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        prev = got
    lens = lens + 1
    mapping[r2t[rows[0], lens[0] - 1].long()] = 0  # row 0's newest token not held here
    assert padded_append(prev, mapping, r2t, rows, lens) is None
