"""srt/attention.sparse_attention against an explicit masked softmax (the definition)."""

import pytest
import torch

pytest.importorskip("sglang")
from sglang_pask.srt.attention import sparse_attention  # noqa: E402


def _naive(q, k, v, q_pos, k_pos, scale):
    rep = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    s = torch.einsum("hqd,hkd->hqk", q, k) * scale
    if q_pos is not None:
        s = s.masked_fill(~(k_pos[None, :] <= q_pos[:, None])[None], float("-inf"))
    return torch.einsum("hqk,hkd->hqd", s.softmax(-1), v)


@pytest.mark.parametrize("case", ["fresh prefill", "prefill after drops", "extend", "decode"])
def test_matches_masked_softmax(case):
    g = torch.Generator().manual_seed(0)
    H, HK, D, T = 4, 2, 16, 12
    kpos = {"fresh prefill": torch.arange(T), "prefill after drops": torch.tensor([0, 1, 4, 7, 9, 10, 11]),
            "extend": torch.arange(T), "decode": torch.tensor([0, 2, 5, 11])}[case]
    qpos = {"fresh prefill": torch.arange(T), "prefill after drops": torch.arange(9, 12),
            "extend": torch.arange(8, 12), "decode": None}[case]
    nq = 1 if qpos is None else len(qpos)
    q = torch.randn(H, nq, D, generator=g)
    k, v = torch.randn(HK, len(kpos), D, generator=g), torch.randn(HK, len(kpos), D, generator=g)
    got = sparse_attention(q, k, v, qpos, kpos, D ** -0.5, enable_gqa=True)
    torch.testing.assert_close(got, _naive(q, k, v, qpos, kpos, D ** -0.5), rtol=1e-5, atol=1e-5)
