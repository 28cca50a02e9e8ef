"""Attention that reads only the persisted slots of each unit (CPU: derived from SGLang's
``torch_native`` backend; GPU: :mod:`.flashinfer_backend`).

Per forward, :meth:`PaskTorchNativeAttnBackend.init_forward_metadata` builds, for every unit
``u`` and request ``i`` of the batch, ``slots[u][i]`` (int64 ``[n]``: the unit slots the request
holds, in logical order) and ``positions[u][i]`` (int64 ``[n]``: their logical positions), from
``mapping[u, req_to_token[row, :seq_len]] > 0``. The tokens written by this forward are mapped
(allocation precedes the forward) and always held, so causality is the mask ``key position <=
query position`` over held positions; RoPE is already in K, so dropping never moves a position.

Decode runs batched: per unit, one padded matrix of held slots per forward
(:func:`padded_held_slots`) and one SDPA call per layer over the whole batch
(:func:`padded_decode_attention`), since a decode query follows every held key. Extend runs request
by request; a request that holds every position and queries them all (a fresh prefill, nothing
dropped) takes SDPA's causal path, which equals the position mask and skips building it.

When the serving method needs attention statistics (:mod:`.window_stats`), every request's queries
of every layer are handed to the recorder, with the held keys they attended to (request by request:
a decode batch is batched only while no row of it is recorded).
"""

from __future__ import annotations

from typing import Optional

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from torch.nn.functional import scaled_dot_product_attention

from sglang_pask.srt import window_stats


def held_slots(mapping_u: torch.Tensor, full_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(slots, positions)`` of the tokens a unit holds among ``full_ids`` (logical order).
    ``mapping_u``: int64 ``[full_size + 2]``; ``full_ids``: ``[seq_len]``."""
    slots = mapping_u[full_ids.long()]
    positions = torch.nonzero(slots > 0, as_tuple=False).flatten()
    return slots[positions], positions


def sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor,
                     k_pos: torch.Tensor, scaling: float, enable_gqa: bool) -> torch.Tensor:
    """Reference: ``q [heads, nq, d]``, ``k/v [kv_heads, nk, d]``, causal by logical position
    (``k_pos[j] <= q_pos[i]``; ``q_pos=None``: every key precedes every query, as in decode).
    Returns ``[heads, nq, d_v]``. The torch reference every kernel is tested against."""
    mask = None if q_pos is None else k_pos[None, :] <= q_pos[:, None]
    return scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask,
                                        enable_gqa=enable_gqa, scale=scaling).squeeze(0)


def padded_held_slots(mapping_u: torch.Tensor, req_to_token: torch.Tensor, rows: torch.Tensor,
                      lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every request's held slots at once: ``(slots [B, L], valid [B, L] bool)``. Row ``i`` holds
    :func:`held_slots` of ``req_to_token[rows[i], :lens[i]]`` in its first ``valid[i].sum()``
    entries (logical order) and the padding slot 0 after them; ``L`` is the largest count.
    ``rows``, ``lens``: int64 ``[B]`` (``B >= 1``)."""
    width = int(lens.max())
    slots = mapping_u[req_to_token[rows, :width].long()]  # [B, width]
    held = (slots > 0) & (torch.arange(width, device=slots.device)[None, :] < lens[:, None])
    counts = held.sum(1)
    length = int(counts.max())
    # stable sort of "not held": each row's held entries first, in logical order
    order = torch.sort((~held).to(torch.int8), dim=1, stable=True).indices[:, :length]
    valid = torch.arange(length, device=slots.device)[None, :] < counts[:, None]
    return slots.gather(1, order).masked_fill_(~valid, 0), valid


def padded_decode_attention(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                            valid: torch.Tensor, scaling: float, enable_gqa: bool) -> torch.Tensor:
    """One decode query per request over its held keys, the whole batch in one SDPA call.
    ``q [B, heads, d]``; ``k_buf/v_buf [unit_size + 1, kv_heads, d]``; ``slots``, ``valid``
    ``[B, L]`` (:func:`padded_held_slots`; every row has a valid entry). Returns
    ``[B, heads, d_v]``, row ``i`` equal to :func:`sparse_attention` over row ``i``'s held keys."""
    b, n = slots.shape  # index_select of the flat slots: several times faster than k_buf[slots] on CPU
    k = k_buf.index_select(0, slots.flatten()).view(b, n, *k_buf.shape[1:]).movedim(1, 2).to(q.dtype)
    v = v_buf.index_select(0, slots.flatten()).view(b, n, *v_buf.shape[1:]).movedim(1, 2).to(q.dtype)
    # k, v: [B, kv_heads, L, d]
    return scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=valid[:, None, None, :],
                                        enable_gqa=enable_gqa, scale=scaling).squeeze(2)


class PaskTorchNativeAttnBackend(TorchNativeAttnBackend):
    """torch SDPA per request over each unit's held slots (no sliding window, no cross
    attention, no encoder-decoder: the plugin refuses those models)."""

    def __init__(self, model_runner):
        super().__init__(model_runner)
        self.pool = self.token_to_kv_pool
        self.unit_meta: Optional[list[list[tuple[torch.Tensor, torch.Tensor]]]] = None
        #: a batched decode forward's ``(slots, valid)`` per unit (:func:`padded_held_slots`)
        self.padded: Optional[list[tuple[torch.Tensor, torch.Tensor]]] = None
        from sglang_pask.srt.serving import active_config

        config = active_config()
        #: the statistics recorder the serving method needs (None: it needs none)
        self.recorder = window_stats.setup(config.method) if config is not None else None
        self.rows: list[int] = []  # this forward's request-pool rows, in batch order

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        req_to_token = self.req_to_token_pool.req_to_token
        rows = forward_batch.req_pool_indices.tolist()
        lens = forward_batch.seq_lens.tolist()
        self.unit_meta, self.padded, self.rows = [], None, rows
        decode = forward_batch.forward_mode.is_decode()
        if self.recorder is not None and not forward_batch.forward_mode.is_idle():
            firsts = [n - 1 for n in lens] if decode else forward_batch.extend_prefix_lens.tolist()
            for r, first, n in zip(rows, firsts, lens):
                self.recorder.begin(r, int(first), int(n))
        if decode and rows and (self.recorder is None or not self.recorder.recording(rows)):
            idx = forward_batch.req_pool_indices.long()
            lens_t = forward_batch.seq_lens.to(device=idx.device, dtype=torch.int64)
            self.padded = [padded_held_slots(m, req_to_token, idx, lens_t) for m in self.pool.mapping]
            return
        for u in range(len(self.pool.units)):
            m = self.pool.mapping[u]
            self.unit_meta.append([held_slots(m, req_to_token[r, :n]) for r, n in zip(rows, lens)])

    def _attend(self, q, layer, q_lens, q_starts):
        """``q [tokens, heads, d]`` -> ``[tokens, heads, d_v]``; request ``i``'s queries sit at
        logical positions ``q_starts[i] ..< q_starts[i] + q_lens[i]`` (``q_starts=None``: decode,
        one query per request after every held key)."""
        unit = self.pool.unit_of[layer.layer_id]
        k_buf = self.pool.get_key_buffer(layer.layer_id)
        v_buf = self.pool.get_value_buffer(layer.layer_id)
        gqa = layer.tp_q_head_num != layer.tp_k_head_num
        if q_starts is None and self.padded is not None:
            slots, valid = self.padded[unit]
            return padded_decode_attention(q, k_buf, v_buf, slots, valid, layer.scaling, gqa)
        out = q.new_empty((q.shape[0], layer.tp_q_head_num, layer.v_head_dim))
        start = 0
        for i, nq in enumerate(q_lens):
            slots, k_pos = self.unit_meta[unit][i]
            qi = q[start:start + nq].movedim(0, 1)  # [heads, nq, d]
            k = k_buf[slots].movedim(0, 1).to(qi.dtype)
            v = v_buf[slots].movedim(0, 1).to(qi.dtype)
            q_pos = None if q_starts is None else torch.arange(q_starts[i], q_starts[i] + nq, device=q.device)
            if self.recorder is not None:  # decode: the one query sits at the newest held position
                self.recorder.record(self.rows[i], layer.layer_id, qi, k, k_pos[-1:] if q_pos is None else q_pos,
                                     k_pos, layer.scaling)
            if q_pos is not None and q_starts[i] == 0 and len(k_pos) == nq:
                # every position 0 ..< nq held and queried: the position mask is SDPA's causal one
                o = scaled_dot_product_attention(qi.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=True,
                                                 enable_gqa=gqa, scale=layer.scaling).squeeze(0)
            else:
                o = sparse_attention(qi, k, v, q_pos, k_pos, layer.scaling, gqa)
            out[start:start + nq] = o.movedim(0, 1)
            start += nq
        return out

    def _write(self, layer, forward_batch, k, v, save_kv_cache):
        if save_kv_cache and k is not None and v is not None:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc(forward_batch.out_cache_loc, None), k, v)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        self._write(layer, forward_batch, k, v, save_kv_cache)
        q_ = q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim)
        o = self._attend(q_, layer, forward_batch.extend_seq_lens.tolist(),
                         forward_batch.extend_prefix_lens.tolist())
        return o.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        self._write(layer, forward_batch, k, v, save_kv_cache)
        q_ = q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim)
        o = self._attend(q_, layer, [1] * len(forward_batch.req_pool_indices), None)
        return o.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)
