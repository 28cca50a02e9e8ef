"""The ``pask`` attention function: causal by *stored logical positions*, per layer.

transformers builds one mask per layer type from one layer's sizes, which breaks any ``q_len > 1``
forward once layers hold different numbers of slots (research/engine.md §3.3). Registered under
:data:`NAME`, this function is absent from transformers' mask registry, so the model passes no mask
and the function builds its own: query ``i`` (logical position ``position_ids[0, i]``) may read
stored slot ``j`` iff ``positions[j] <= position_ids[0, i]``. It reads the layer's positions from
the :class:`~.cache.PrunableCache` passed as the ``pask_cache`` forward kwarg (without one, the
keys are taken to be the contiguous positions ending at the last query: plain causal attention).

A layer with a per-KV-head ``head_mask`` (per-head selection, see cache.py) additionally hides
from the query heads of KV head ``h`` the slots ``h`` no longer holds (the mask expanded to query
heads for GQA: query head ``i`` reads KV head ``i // (Hq / Hkv)``).

When the cache asks for attention statistics it runs eager attention (query chunks of
:data:`CHUNK`) and records, per layer, the softmax probabilities summed over all query heads, or
per KV head over the query heads of its group; for ``expected_heads`` it records the pre-RoPE
queries' sums instead (see cache.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

NAME = "pask"
CHUNK = 256  # queries per eager block when recording statistics (bounds [H, CHUNK, n] memory)
#: statistics read off the attention probabilities (eager attention); ``expected_heads`` records
#: the queries only and ``kvzip_heads`` the token ids (the fast path still runs; KVzip's scores come
#: from a separate forward, ``PrunableCache.reconstruct``, hf/kvzip.py)
ATTENTION_KINDS = ("accumulated", "window", "window_heads")


def _key_positions(kwargs, layer_idx: int, n: int, qpos: torch.Tensor) -> tuple[torch.Tensor, object]:
    cache = kwargs.get("pask_cache")
    if cache is None:
        return torch.arange(n, device=qpos.device) + (qpos[-1] + 1 - n), None
    lay = cache.layers[layer_idx]
    if lay.positions.shape[0] != n:
        raise RuntimeError(f"layer {layer_idx}: {n} keys but {lay.positions.shape[0]} stored positions")
    return lay.positions, lay


def pask_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """query ``[1, Hq, q, D]``; key/value ``[1, Hkv, n, D]`` (every stored slot of this layer,
    the new ones included). Returns ``([1, q, Hq, D], None)``."""
    if query.shape[0] != 1:
        raise ValueError("the pask attention function serves batch size 1")
    qpos = kwargs.get("position_ids")
    if qpos is None:
        raise ValueError("the pask attention function needs explicit position_ids")
    qpos = qpos[0].to(query.device)
    n = key.shape[-2]
    kpos, lay = _key_positions(kwargs, module.layer_idx, n, qpos)
    allow = kpos[None, :] <= qpos[:, None]  # [q, n]
    hq, hkv = query.shape[1], key.shape[1]
    head_mask = None if lay is None else lay.head_mask
    if head_mask is not None:  # [Hkv, n] -> [Hq, q, n]
        allow = allow[None] & head_mask.repeat_interleave(hq // hkv, dim=0)[:, None, :]
    cache = kwargs.get("pask_cache")
    if cache is not None and cache.stats == "expected_heads":
        _record_queries(query, qpos, lay, cache)
    if cache is not None and cache.reconstruct is not None:  # KVzip's scoring forward
        a, b, sinks, new = cache.reconstruct
        allow = allow & ((kpos < sinks) | ((kpos >= a) & (kpos < b)) | (kpos >= new))
        out = _eager_recording(query, key, value, allow, scaling, lay, cache)
    elif cache is not None and cache.stats in ATTENTION_KINDS:
        out = _eager_recording(query, key, value, allow, scaling, lay, cache)
    else:
        # Fast paths: every key visible (decode), or a fresh causal prefill (keys == queries).
        causal = head_mask is None and query.shape[2] == n and bool(torch.equal(kpos, qpos))
        mask = None if causal or bool(allow.all()) else allow
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                             is_causal=causal and n > 1,
                                             enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _eager_recording(query, key, value, allow, scaling, lay, cache) -> torch.Tensor:
    hq, hkv = query.shape[1], key.shape[1]
    k = key.repeat_interleave(hq // hkv, dim=1)
    v = value.repeat_interleave(hq // hkv, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    allow = allow if allow.dim() == 3 else allow[None]  # [Hq or 1, q, n]
    outs, rows = [], []
    for s in range(0, query.shape[2], CHUNK):
        q = query[:, :, s:s + CHUNK]
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # [1, Hq, c, n]
        scores = scores.masked_fill(~allow[:, s:s + CHUNK], float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1)
        outs.append(torch.matmul(probs.to(v.dtype), v))
        grouped = probs[0].view(hkv, hq // hkv, *probs.shape[2:])  # [Hkv, g, c, n]
        # KVzip: [Hkv, n], the most any query of the group pays; else [Hkv, c, n] summed over the group
        rows.append(grouped.amax(dim=(1, 2)) if cache.reconstruct is not None else grouped.sum(1))
    if cache.reconstruct is not None:
        top = torch.stack(rows).amax(0)
        lay.kvzip_max = top if lay.kvzip_max is None else torch.maximum(lay.kvzip_max, top)
    else:
        _record(lay, cache, torch.cat(rows, dim=1), key.shape[-2])
    return torch.cat(outs, dim=2)


def _record_queries(query, qpos, lay, cache) -> None:
    """Fold this forward's queries (``[1, Hq, q, D]``, post-RoPE at logical positions ``qpos``)
    into the layer's pre-RoPE sums, leaving out positions ``< cache.query_skip``: RoPE rotates
    each pair of dims by the position's angle, so rotating back by it (``q cos - rot(q) sin``)
    recovers the projection the rotation was applied to."""
    keep = qpos >= cache.query_skip
    if not bool(keep.any()):
        return
    q = query[0][:, keep].double()  # [Hq, q', D]
    cos, sin = cache.rotary(q, qpos[keep][None])  # [1, q', D]
    cos, sin = cos[0].double(), sin[0].double()
    half = q.shape[-1] // 2
    rot = torch.cat([-q[..., half:], q[..., :half]], dim=-1)  # transformers' rotate_half
    pre = q * cos - rot * sin
    lay.q_count += int(pre.shape[1])
    s, o = pre.sum(1), torch.einsum("hqi,hqj->hij", pre, pre)
    lay.q_sum = s if lay.q_sum is None else lay.q_sum + s
    lay.q_outer = o if lay.q_outer is None else lay.q_outer + o


def _record(lay, cache, rows: torch.Tensor, n: int) -> None:
    """Fold this forward's per-KV-head per-query rows ``[Hkv, q, n]`` into the layer's statistics."""
    if cache.stats == "accumulated":
        acc = lay.accumulated if lay.accumulated is not None else rows.new_zeros(0)
        lay.accumulated = F.pad(acc, (0, n - acc.shape[0])) + rows.sum((0, 1))
    elif cache.stats == "window":
        old = lay.window_rows if lay.window_rows is not None else rows.new_zeros(0, n)
        old = F.pad(old, (0, n - old.shape[1]))
        lay.window_rows = torch.cat([old, rows.sum(0)])[-cache.window_size:].contiguous()
    elif cache.stats == "window_heads":
        old = lay.window_head_rows if lay.window_head_rows is not None else rows.new_zeros(rows.shape[0], 0, n)
        old = F.pad(old, (0, n - old.shape[2]))
        lay.window_head_rows = torch.cat([old, rows], dim=1)[:, -cache.window_size:].contiguous()


def register() -> str:
    """Register :func:`pask_attention` with transformers (idempotent); returns its name."""
    AttentionInterface.register(NAME, pask_attention)
    return NAME


def use_pask_attention(model) -> None:
    """Switch ``model`` (a transformers PreTrainedModel) to the ``pask`` attention function.
    Only full-attention layers are supported (the function applies no sliding window)."""
    kinds = set(getattr(model.config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        raise NotImplementedError(f"the pask attention function serves full attention only; "
                                  f"this model has layer types {sorted(kinds)}")
    register()
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, AttributeError):
        model.config._attn_implementation = NAME
