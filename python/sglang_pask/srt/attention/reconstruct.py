"""KVzip's scores in the server: the context-reconstruction forward, through SGLang's own model.

For the methods whose ``needs_attention`` is ``"kvzip_heads"`` (KVzip; PASK whose
residual scorer reads ``stat = "kvzip"``), :func:`kvzip_heads` runs, when a request is compressed, the same
scoring forwards as the reference runner (``hf/kvzip.py``, :func:`~sglang_pask.hf.kvzip.reconstruction_chunks`):
per chunk ``[a, b)`` of the context (the request's ``T`` written tokens), the repeat request, the
chat template's turn change and the chunk teacher-forced, at positions ``T ..``. Each runs as one
EXTEND forward of the model's layers (``model.model``: no logits) over the request's row, with the
torch backend in a *no-write* mode (:class:`Pass`): nothing is allocated or written to the pools;
the forward's own K/V are read from the forward itself. Its queries see the held context positions
``< sinks`` and in ``[a, b)`` (with the row's per-head masks, :mod:`.head_masks`) and, causally,
themselves. Per layer, a held position's score is the most attention any query of its KV group
pays it (max over the group's query heads and the queries), kept for positions inside the chunk
and folded by max over chunks; positions a KV head no longer reads score 0 for that head.

The repeat's positions run past the context's (to about ``2T``), which may pass the model's
``max_position_embeddings``: the rotary tables grow to reach them (:func:`_grow_rotary`), as the
reference runner computes RoPE at any position. Cost: one extra forward of about the context's
length per compression (KVzip's own price).
Invariants: the pools, the request table and every request's state are unchanged by a pass; the
backend leaves no-write mode when the pass ends, also on error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from sglang_pask.srt.attention import head_masks
from sglang_pask.srt.mem_cache.segment_views import held_slots
from sglang_pask.srt.state import state

#: queries scored at a time (the runner's chunk, hf/attention.py)
CHUNK = 256


@dataclass
class Pass:
    """One scoring forward of request row ``row`` for chunk ``[a, b)`` of a ``T``-token context.
    ``meta[u]``: the unit's visible context ``(slots int64 [nk], positions int64 [nk], allow bool
    [kv_heads, nk] or None)``; ``top[layer]``: float32 ``[kv_heads, nk_u]``, the most attention
    each visible position got from a query of each KV head's group."""

    row: int
    a: int
    b: int
    sinks: int
    T: int
    meta: list = field(default_factory=list)
    top: dict = field(default_factory=dict)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer, pool) -> torch.Tensor:
        """``q [n, heads * d]``, ``k``/``v`` this forward's ``[n, kv_heads * d]`` (positions ``T ..``)
        -> ``[n, heads * d_v]``; records ``top[layer]``. Scores ``q k^T * scale`` in the model's
        dtype, masked, softmax in float32 (as the runner's ``_eager_recording``). Each KV head's
        query heads are scored together against its keys (``[kv_heads, group * c, nk + n]``: no
        copy of K/V per query head); the visible context needs no mask but a per-head one, the
        pass's own keys the causal one."""
        slots, _, allow = self.meta[pool.unit_of[layer.layer_id]]
        hq, hkv, dv = layer.tp_q_head_num, layer.tp_k_head_num, layer.v_head_dim
        g = hq // hkv
        n = q.shape[0]
        qh = q.reshape(n, hkv, g, -1).permute(1, 2, 0, 3)  # [Hkv, g, n, d]: query head h*g + j
        kc = pool.get_key_buffer(layer.layer_id)[slots].movedim(0, 1).to(qh.dtype)  # [Hkv, nk, d]
        vc = pool.get_value_buffer(layer.layer_id)[slots].movedim(0, 1).to(qh.dtype)
        nk = kc.shape[1]
        K = torch.cat([kc, k.reshape(n, hkv, -1).movedim(0, 1).to(qh.dtype)], 1)  # [Hkv, nk + n, d]
        V = torch.cat([vc, v.reshape(n, hkv, dv).movedim(0, 1).to(qh.dtype)], 1)
        hidden = None if allow is None else ~allow.to(q.device)[:, None, None, :]  # [Hkv, 1, 1, nk]
        own = torch.arange(n, device=q.device)
        outs, top = [], None
        for s in range(0, n, CHUNK):
            qc = qh[:, :, s:s + CHUNK]
            c = qc.shape[2]
            scores = torch.matmul(qc.reshape(hkv, g * c, -1), K.transpose(-1, -2)).view(hkv, g, c, nk + n)
            scores = (scores * layer.scaling).float()  # [Hkv, g, c, nk + n]
            scores[..., nk:].masked_fill_(own[None, :] > own[s:s + c, None], float("-inf"))
            if hidden is not None:
                scores[..., :nk].masked_fill_(hidden, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            outs.append(torch.matmul(probs.view(hkv, g * c, -1).to(V.dtype), V).view(hkv, g, c, dv))
            t = probs[..., :nk].amax(dim=(1, 2))  # [Hkv, nk]
            top = t if top is None else torch.maximum(top, t)
        self.top[layer.layer_id] = top
        out = torch.cat(outs, 2).reshape(hq, n, dv)  # [Hq, n, dv]
        return out.movedim(0, 1).reshape(n, hq * dv).to(q.dtype)


def _visible(backend, row: int, T: int, a: int, b: int, sinks: int) -> list[tuple]:
    """Per unit, the context positions a pass's queries see: held, ``< sinks`` or in ``[a, b)``."""
    full_ids = backend.req_to_token_pool.req_to_token[row, :T]
    out = []
    for u, m in enumerate(backend.pool.mapping):
        slots, pos = held_slots(m, full_ids, row, u)
        allow = head_masks.allow(row, u, pos) if head_masks.masks() else None
        keep = (pos < sinks) | ((pos >= a) & (pos < b))
        out.append((slots[keep], pos[keep], None if allow is None else allow[:, keep]))
    return out


def _grow_rotary(model, last: int) -> None:
    """Let every rotary embedding of ``model`` reach position ``last``: the repeat runs after the
    context (positions ``T .. ~2T``), which may pass the model's ``max_position_embeddings`` --
    SGLang's cos/sin table ends there, while the reference runner computes RoPE for any position.
    SGLang's own growth (``_ensure_cos_sin_cache_length``) appends rows by the same formula; the
    rows below ``last`` are unchanged."""
    for module in model.modules():
        grow = getattr(module, "_ensure_cos_sin_cache_length", None)
        if grow is not None and getattr(module, "cos_sin_cache", None) is not None:
            grow(int(last))


def _forward(backend, row: int, T: int, tokens: list[int], scoring: Pass) -> None:
    """Run ``tokens`` at positions ``T ..`` of row ``row`` through the model's layers, the backend
    in no-write mode (``scoring``)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    runner = backend.model_runner
    device = backend.device
    n = len(tokens)
    i64 = dict(dtype=torch.int64, device=device)
    batch = ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=1, input_ids=torch.tensor(tokens, **i64),
        req_pool_indices=torch.tensor([row], **i64), seq_lens=torch.tensor([T + n], **i64),
        out_cache_loc=torch.zeros(n, **i64), seq_lens_sum=T + n, seq_lens_cpu=torch.tensor([T + n]),
        positions=torch.arange(T, T + n, **i64), extend_num_tokens=n,
        extend_seq_lens=torch.tensor([n], **i64), extend_prefix_lens=torch.tensor([T], **i64),
        extend_start_loc=torch.zeros(1, **i64), extend_seq_lens_cpu=[n], extend_prefix_lens_cpu=[T])
    _grow_rotary(runner.model, T + n - 1)
    backend.reconstruct = scoring
    try:
        with torch.inference_mode(), forward_context(ForwardContext(attn_backend=backend)):
            runner.model.model(batch.input_ids, batch.positions, batch)
    finally:
        backend.reconstruct = None


def kvzip_heads(req, seq_len: int, retained: list[np.ndarray], method, backend=None) -> list[np.ndarray]:
    """Per layer, float32 ``[kv_heads, len(retained[l])]``: KVzip's score of each held position
    of request ``req``'s first ``seq_len`` tokens (``method``: its ``chunk_size`` and ``n_sink``),
    as the reference runner's ``hf/kvzip.kvzip_heads``. A position a KV head no longer reads
    scores 0 for that head: the pass's attention already hid it (:func:`_visible`)."""
    from sglang_pask.hf.kvzip import reconstruction_chunks

    st = state()
    backend = backend or st.reconstruct_backend  # the torch backend sets itself there
    if backend is None:
        raise RuntimeError("KVzip's scores need the torch attention backend (--attention-backend torch_native)")
    tokenizer = getattr(req, "tokenizer", None)
    if tokenizer is None:
        raise RuntimeError(f"KVzip's scores need the tokenizer (request {req.rid} has none)")
    t0 = time.perf_counter()
    row, T = int(req.kv.req_pool_idx), int(seq_len)
    ids = (list(req.origin_input_ids) + list(req.output_ids))[:T]
    H = backend.pool.head_num
    dense = [torch.zeros(H, T) for _ in range(len(retained))]  # [Hkv, T] per layer
    for a, b, sinks, tokens in reconstruction_chunks(tokenizer, ids, method.chunk_size, method.n_sink):
        scoring = Pass(row, a, b, sinks, T, meta=_visible(backend, row, T, a, b, sinks))
        _forward(backend, row, T, tokens, scoring)
        st.reconstruction["forwards"] += 1
        st.reconstruction["tokens"] += len(tokens)
        for layer, top in scoring.top.items():  # the chunks partition [0, T): each position scored once
            pos = scoring.meta[backend.pool.unit_of[layer]][1]
            inside = (pos >= a) & (pos < b)
            dense[layer][:, pos[inside].cpu()] = top[:, inside].float().cpu()
    out = [dense[layer][:, torch.from_numpy(np.asarray(pos, dtype=np.int64))].numpy().astype(np.float32)
           for layer, pos in enumerate(retained)]
    st.reconstruction["scored"] += 1
    st.reconstruction["seconds"] += time.perf_counter() - t0
    return out
