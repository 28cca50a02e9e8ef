"""Expected Attention's scores from the reference cache (:class:`~sglang_pask.methods.expected.
ExpectedAttention`; kvpress ``ExpectedAttentionPress`` at 8bb29b9).

Per layer, from the cache's query statistics (``q_count``, ``q_sum``, ``q_outer``: pre-RoPE,
positions ``>= n_sink``) and its stored keys/values (post-RoPE keys ``[1, Hkv, n, D]``):

1. the queries' Gaussian per query head: ``mu = sum / count`` ``[Hq, D]``, ``Sigma = outer /
   count - mu mu^T`` ``[Hq, D, D]`` (no queries: zeros);
2. RoPE averaged over the next ``n_future_positions`` positions ``T .. T+F-1`` (``T``: tokens
   written so far): ``R = mean_f (cos_f I + sin_f P)`` with ``P x = rotate_half(x)``;
   ``mu' = R mu``, ``Sigma' = R Sigma R^T``;
3. per key ``k`` of query head ``h``'s KV head: ``z = mu'_h . k / sqrt(D)`` (+ ``k^T Sigma'_h k /
   (2 D)`` with ``use_covariance``), a softmax over the layer's keys at positions ``>= n_sink``
   that the KV head still holds; averaged over the query heads of each KV group;
4. ``(score + epsilon) * |v|`` with ``use_vnorm``. Sinks and positions a head does not hold: 0
   (the method keeps the sinks by position).
"""

from __future__ import annotations

import numpy as np
import torch


def average_rotation(rotary, start: int, count: int, dim: int) -> torch.Tensor:
    """float64 ``[D, D]``: the mean over positions ``start .. start+count-1`` of RoPE's rotation
    matrix ``cos I + sin P`` (``P x = rotate_half(x) = [-x2, x1]``)."""
    probe = torch.zeros(1, dtype=torch.float64)
    cos, sin = rotary(probe, torch.arange(start, start + count)[None])
    cos, sin = cos[0].double(), sin[0].double()  # [F, D]
    half = dim // 2
    P = torch.zeros(dim, dim, dtype=torch.float64)
    P[half:, :half] = torch.eye(half, dtype=torch.float64)
    P[:half, half:] = -torch.eye(half, dtype=torch.float64)
    eye = torch.eye(dim, dtype=torch.float64)
    return (cos[:, :, None] * eye + sin[:, :, None] * P).mean(0)


def layer_scores(lay, method, rotary, seq_len: int) -> np.ndarray:
    """float ``[Hkv, n]`` for one :class:`~.cache.PrunableLayer` (module docstring)."""
    keys = lay.keys[0].double()  # [Hkv, n, D]
    hkv, n, d = keys.shape
    if lay.q_sum is None:
        hq = hkv
        mu = torch.zeros(hq, d, dtype=torch.float64)
        cov = torch.zeros(hq, d, d, dtype=torch.float64)
    else:
        hq = lay.q_sum.shape[0]
        mu = lay.q_sum / lay.q_count
        cov = lay.q_outer / lay.q_count - mu[:, :, None] * mu[:, None, :]
    R = average_rotation(rotary, seq_len, method.n_future_positions, d)
    mu = mu @ R.T
    k = keys.repeat_interleave(hq // hkv, dim=0)  # [Hq, n, D]
    z = torch.einsum("hd,hnd->hn", mu, k) / d ** 0.5
    if method.use_covariance:
        cov = R @ cov @ R.T
        z = z + torch.einsum("hni,hij,hnj->hn", k, cov, k) / d / 2
    allow = lay.positions[None, :] >= method.n_sink  # [1, n]
    if lay.head_mask is not None:
        allow = allow & lay.head_mask.repeat_interleave(hq // hkv, dim=0)
    allow = allow.expand(hq, n)
    probs = torch.softmax(z.masked_fill(~allow, float("-inf")), dim=-1).nan_to_num(0.0)
    scores = probs.view(hkv, hq // hkv, n).mean(1)
    if method.use_vnorm:
        scores = (scores + method.epsilon) * lay.values[0].double().norm(dim=-1)
    held = allow.view(hkv, hq // hkv, n)[:, 0]
    return torch.where(held, scores, torch.zeros_like(scores)).numpy()


@torch.no_grad()
def expected_heads(cache, method) -> list[np.ndarray]:
    """Per layer, float ``[Hkv, n_l]`` aligned with the layer's positions."""
    seq_len = cache.get_seq_length()
    return [layer_scores(lay, method, cache.rotary, seq_len) for lay in cache.layers]
