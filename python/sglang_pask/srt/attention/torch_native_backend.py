"""Attention that reads only the persisted slots of each unit (CPU: derived from SGLang's
``torch_native`` backend; GPU: :mod:`.flashinfer_backend`).

Per forward, :meth:`PaskTorchNativeAttnBackend.init_forward_metadata` builds, for every unit
``u`` and request ``i`` of the batch, ``slots[u][i]`` (int64 ``[n]``: the unit slots the request
holds, in logical order) and ``positions[u][i]`` (int64 ``[n]``: their logical positions), from
``mapping[u, req_to_token[row, :seq_len]] > 0``. The tokens written by this forward are mapped
(allocation precedes the forward) and always held, so causality is the mask ``key position <=
query position`` over held positions; RoPE is already in K, so dropping never moves a position.

Decode runs batched: per unit, one padded matrix of held slots per forward
(:func:`padded_held_slots`) and one call per layer over the whole batch
(:func:`sglang_pask.ops.decode_attention`: csrc reads the held rows in place; its torch reference
gathers them for one SDPA call), since a decode query follows every held key. Consecutive decode
steps of the same batch, with no slot lost in between (no free, drop or clear: the allocator's
``mapping_generation`` did not move) and no segment view, only append each row's new token
(:func:`padded_append`: O(batch x width) copies instead of a gather, a cumsum and a scatter over
every unit's positions). Extend runs request
by request; a request that holds every position and queries them all (a fresh prefill, nothing
dropped) takes SDPA's causal path, which equals the position mask and skips building it.

When the serving method needs attention statistics (:mod:`.window_stats`), every request's queries
of every layer are handed to the recorder, with the held keys they attended to (request by request:
a decode batch is batched only while no row of it is recorded).

After a per-KV-head selection (:mod:`.head_masks`) a request's query heads read only their KV
head's positions: the position mask gets a head axis (``[heads, nq, nk]``), request by request (a
decode batch is batched only while no row of it has a head mask).
"""

from __future__ import annotations

from typing import Optional

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from torch.nn.functional import scaled_dot_product_attention

from sglang_pask import ops
from sglang_pask.environ import envs
from sglang_pask.srt.attention import head_masks, window_stats
from sglang_pask.srt.mem_cache import segment_views
from sglang_pask.srt.mem_cache.segment_views import held_slots
from sglang_pask.srt.state import state


def sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor,
                     k_pos: torch.Tensor, scaling: float, enable_gqa: bool,
                     allow: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Reference: ``q [heads, nq, d]``, ``k/v [kv_heads, nk, d]``, causal by logical position
    (``k_pos[j] <= q_pos[i]``; ``q_pos=None``: every key precedes every query, as in decode).
    ``allow``: None or bool ``[kv_heads, nk]``, the keys each KV head reads (query head ``i``
    reads KV head ``i // (heads / kv_heads)``). Returns ``[heads, nq, d_v]``. The torch reference
    every kernel is tested against."""
    mask = None if q_pos is None else k_pos[None, :] <= q_pos[:, None]  # [nq, nk]
    if allow is not None:  # [heads, nq | 1, nk]
        heads = allow.repeat_interleave(q.shape[0] // allow.shape[0], dim=0)[:, None, :]
        mask = heads if mask is None else heads & mask[None]
    return scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask,
                                        enable_gqa=enable_gqa, scale=scaling).squeeze(0)


def padded_held_slots(mapping_u: torch.Tensor, req_to_token: torch.Tensor, rows: torch.Tensor,
                      lens: torch.Tensor, unit: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Every request's held slots at once: ``(slots [B, L], counts [B])``, both int64. Row ``i``
    holds :func:`held_slots` of ``req_to_token[rows[i], :lens[i]]`` in its first ``counts[i]``
    entries (logical order) and the padding slot 0 after them; ``L`` is the largest count.
    ``rows``, ``lens``: int64 ``[B]`` (``B >= 1``); ``unit``: whose views apply (:mod:`..mem_cache.segment_views`)."""
    width = int(lens.max())
    slots = mapping_u[req_to_token[rows, :width].long()]  # [B, width]
    if segment_views.views():
        segment_views.hide_(slots, rows.tolist(), unit)
    held = (slots > 0) & (torch.arange(width, device=slots.device)[None, :] < lens[:, None])
    counts = held.sum(1)
    length = int(counts.max())
    # a held entry goes to column (held entries before it), in logical order; the others to a
    # scratch column `length`, cut off after
    dest = torch.where(held, held.cumsum(1) - 1, length)
    out = slots.new_zeros((slots.shape[0], length + 1)).scatter_(1, dest, slots)[:, :length]
    return out.contiguous(), counts


def padded_append(prev: tuple[torch.Tensor, torch.Tensor], mapping_u: torch.Tensor, req_to_token: torch.Tensor,
                  rows: torch.Tensor, lens: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`padded_held_slots` of the next decode step from the step before it: ``prev`` was
    built for the same ``rows`` at ``lens - 1``, and since then only each row's token at ``lens - 1``
    was mapped (the caller checks that no slot was lost). None when a new token is not held in this
    unit (the caller then builds it whole)."""
    slots, counts = prev
    new = mapping_u[req_to_token[rows, lens - 1].long()]  # [B]: each row's newest token's slot
    if not bool((new > 0).all()):
        return None
    out = slots.new_zeros((slots.shape[0], int(counts.max()) + 1))
    out[:, :slots.shape[1]] = slots
    out.scatter_(1, counts[:, None], new[:, None])  # column counts[i]: after row i's held slots
    return out, counts + 1


class PaskTorchNativeAttnBackend(TorchNativeAttnBackend):
    """torch SDPA per request over each unit's held slots (no sliding window, no cross
    attention, no encoder-decoder: the plugin refuses those models)."""

    def __init__(self, model_runner):
        super().__init__(model_runner)
        self.pool = self.token_to_kv_pool
        #: per unit, per request: (held slots, their positions, which of them each KV head reads --
        #: :func:`.head_masks.allow`, None: all), once per forward, shared by the unit's layers
        self.unit_meta: Optional[list[list[tuple]]] = None
        #: a batched decode forward's ``(slots, counts)`` per unit (:func:`padded_held_slots`)
        self.padded: Optional[list[tuple[torch.Tensor, torch.Tensor]]] = None
        from sglang_pask.srt.serving import active_config

        config = active_config()
        self.model_runner = model_runner
        #: KVzip's scoring forward in progress (:mod:`.reconstruct`: no writes, its own attention)
        self.reconstruct = None
        kind = None if config is None else config.method.needs_attention
        #: the statistics recorder the serving method needs (None: it needs none, or KVzip's)
        self.recorder = (window_stats.setup(config.method, self.pool.head_num)  # KV heads on this rank
                         if kind in window_stats.KINDS else None)
        if kind == "kvzip_heads":
            state().reconstruct_backend = self
        self.rows: list[int] = []  # this forward's request-pool rows, in batch order
        #: the last batched decode forward's ``((rows, lens, allocator generation), padded)``: what
        #: :func:`padded_append` may extend (None: build the next one whole)
        self.last_decode: Optional[tuple[tuple, list]] = None

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        req_to_token = self.req_to_token_pool.req_to_token
        rows = forward_batch.req_pool_indices.tolist()
        lens = forward_batch.seq_lens.tolist()
        self.unit_meta, self.padded, self.rows = [], None, rows
        last, self.last_decode = self.last_decode, None
        decode = forward_batch.forward_mode.is_decode()
        if not decode and head_masks.masks():  # a fresh prefill (prefix 0) is a new request in its row
            for r, first in zip(rows, forward_batch.extend_prefix_lens.tolist()):
                if int(first) == 0:  # (a MIXED batch's decode rows extend from their last position)
                    head_masks.forget(r)
        if self.recorder is not None and not forward_batch.forward_mode.is_idle():
            firsts = [n - 1 for n in lens] if decode else forward_batch.extend_prefix_lens.tolist()
            for r, first, n in zip(rows, firsts, lens):
                self.recorder.begin(r, int(first), int(n))
        # $SGLANG_PASK_BATCHED_DECODE=0: request by request (what experiments/decode_profile.py compares)
        batched = envs.SGLANG_PASK_BATCHED_DECODE.get()
        if (batched and decode and rows and (self.recorder is None or not self.recorder.recording(rows))
                and not head_masks.masked(rows)):
            idx = forward_batch.req_pool_indices.long()
            lens_t = forward_batch.seq_lens.to(device=idx.device, dtype=torch.int64)
            generation = getattr(getattr(self.model_runner, "token_to_kv_pool_allocator", None),
                                 "mapping_generation", None)
            if (last is not None and last[0] == (tuple(rows), [n - 1 for n in lens], generation)
                    and not segment_views.views()):
                grown = [padded_append(p, m, req_to_token, idx, lens_t) for p, m in zip(last[1], self.pool.mapping)]
                self.padded = None if any(g is None for g in grown) else grown
            counts = state().decode_index
            if self.padded is None:
                self.padded = [padded_held_slots(m, req_to_token, idx, lens_t, u)
                               for u, m in enumerate(self.pool.mapping)]
                counts["built"] += 1
            else:
                counts["appended"] += 1
            if generation is not None and not segment_views.views():
                self.last_decode = ((tuple(rows), lens, generation), self.padded)
            return
        for u in range(len(self.pool.units)):
            m = self.pool.mapping[u]
            held = [held_slots(m, req_to_token[r, :n], r, u) for r, n in zip(rows, lens)]
            self.unit_meta.append([(slots, pos, head_masks.allow(r, u, pos) if head_masks.masks() else None)
                                   for r, (slots, pos) in zip(rows, held)])

    def _attend(self, q, layer, q_lens, q_starts):
        """``q [tokens, heads, d]`` -> ``[tokens, heads, d_v]``; request ``i``'s queries sit at
        logical positions ``q_starts[i] ..< q_starts[i] + q_lens[i]`` (``q_starts=None``: decode,
        one query per request after every held key)."""
        unit = self.pool.unit_of[layer.layer_id]
        k_buf = self.pool.get_key_buffer(layer.layer_id)
        v_buf = self.pool.get_value_buffer(layer.layer_id)
        if q_starts is None and self.padded is not None:
            slots, counts = self.padded[unit]
            return ops.decode_attention(q, k_buf, v_buf, slots, counts, layer.scaling)
        gqa = layer.tp_q_head_num != layer.tp_k_head_num
        out = q.new_empty((q.shape[0], layer.tp_q_head_num, layer.v_head_dim))
        start = 0
        for i, nq in enumerate(q_lens):
            slots, k_pos, allow = self.unit_meta[unit][i]  # allow: [kv_heads, nk] or None
            qi = q[start:start + nq].movedim(0, 1)  # [heads, nq, d]
            k = k_buf[slots].movedim(0, 1).to(qi.dtype)
            v = v_buf[slots].movedim(0, 1).to(qi.dtype)
            q_pos = None if q_starts is None else torch.arange(q_starts[i], q_starts[i] + nq, device=q.device)
            if self.recorder is not None:  # decode: the one query sits at the newest held position
                self.recorder.record(self.rows[i], layer.layer_id, qi, k, k_pos[-1:] if q_pos is None else q_pos,
                                     k_pos, layer.scaling, allow)
            if allow is None and q_pos is not None and q_starts[i] == 0 and len(k_pos) == nq:
                # every position 0 ..< nq held and queried: the position mask is SDPA's causal one
                o = scaled_dot_product_attention(qi.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=True,
                                                 enable_gqa=gqa, scale=layer.scaling).squeeze(0)
            else:
                o = sparse_attention(qi, k, v, q_pos, k_pos, layer.scaling, gqa, allow)
            out[start:start + nq] = o.movedim(0, 1)
            start += nq
        return out

    def _write(self, layer, forward_batch, k, v, save_kv_cache):
        if save_kv_cache and k is not None and v is not None:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc(forward_batch.out_cache_loc, None), k, v)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if self.reconstruct is not None:  # KVzip's scoring forward: nothing written
            return self.reconstruct.attend(q, k, v, layer, self.pool)
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
