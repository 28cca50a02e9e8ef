"""Drops at SGLang's eviction point: the same ``methods`` registry the reference runner uses.

Called from the ``ScheduleBatch.maybe_evict_swa`` hook (before a decode batch allocates its next
slots; overlap scheduling is off with a policy). For each request of the batch, with
``seq_len = req.kv.kv_committed_len`` (tokens whose KV is written: the prompt and the first
``k = req.decode_batch_idx`` outputs -- the runner's state at its decode step ``k``; ``k = 0``
is prefill end):

1. ``retained[u]`` = logical positions whose ``mapping[u, req_to_token[row, pos]] > 0`` (read
   from the pools: the truth);
2. if ``method.due(k, slots held, seq_len, L)``: build a :class:`~sglang_pask.methods.CacheView`
   (``protected_tail = 1``: the newest written token) with the request's classes, call
   ``method.select`` and drop, per unit, what the unit's first layer did not keep -- only
   request-owned positions (``>= req.kv.cache_protected_len``; the tree's are never dropped here).
   In segment mode (:mod:`.segments`) the view, the due check and the drops cover only the
   request's own positions ``>= S``: the segment keeps what its own compression kept.

A method that selects per KV head (its selection's ``head_mask``) keeps the union of its heads'
sets in the unit and leaves each head's own set in :mod:`..attention.head_masks` (attention reads it; the
next view of the request gets it as ``head_mask``).

With ``--pask-kept-log DIR`` each compression appends ``{"rid", "step", "seq_len", "kept":
{unit: positions}}`` (and, per head, ``"heads": {unit: [positions of each KV head]}``) to
``DIR/kept-<pid>.jsonl`` (the parity test reads it).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Optional

import numpy as np
import torch

from sglang_pask.environ import envs
from sglang_pask.methods.base import AttentionStats, CacheView
from sglang_pask.methods.padded import PaddedBatch
from sglang_pask.srt.attention import head_masks
from sglang_pask.srt.managers.request_tags import tags_of
from sglang_pask.srt.mem_cache import segment_views
from sglang_pask.srt.state import state

logger = logging.getLogger("sglang_pask")

PROTECTED_TAIL = 1
#: a gap between two decode steps' eviction points longer than this is idle time, not a step
#: (:attr:`~..state.PaskState.times`)
IDLE_GAP_S = 5.0


def held_positions(allocator, full_ids: torch.Tensor) -> list[np.ndarray]:
    """Per unit, int64 sorted logical positions held (``full_ids``: ``[seq_len]``)."""
    m = allocator.pool.mapping[:, full_ids.long()].cpu()
    return [torch.nonzero(row > 0, as_tuple=False).flatten().numpy() for row in m]


def compress_request(req, req_to_token: torch.Tensor, allocator, config, seq_len: Optional[int] = None,
                     pick=None) -> int:
    """Apply the method to one request if due; returns the unit slots it freed (0: not due).
    ``seq_len`` and ``pick(view, method)``: a chunk end of the prompt and the method at that
    end's budget, None: nothing to compress (:mod:`.chunked`; default: the KV written so far,
    the config's method). No shared segment with ``pick``."""
    chunk_end = seq_len is not None
    seq_len = int(req.kv.kv_committed_len) if seq_len is None else int(seq_len)
    if seq_len <= PROTECTED_TAIL or req.kv.req_pool_idx is None:
        return 0
    step = int(req.decode_batch_idx)
    method = config.method
    if not method.checks_at(step):  # before touching the pools: this runs every decode step
        return 0
    full_ids = req_to_token[req.kv.req_pool_idx, :seq_len]
    held = held_positions(allocator, full_ids)
    units = config.units
    tags = tags_of(req)
    # segment mode: the segment was compressed when it was published (.segments); the due check,
    # the view and the drops cover the own span [seg, seq_len) only, at its own allocation
    seg = tags.segment_end if config.rule.active else 0
    if seg:
        from sglang_pask.methods.segment import own_kept, own_slots, own_view
        from sglang_pask.srt.managers.segments import segment_kept_units

        segment_kept_units(req, config)  # computed once per request; sets tags.segment_slots
        allowed = own_slots(method, config.num_layers, seq_len, seg, tags.segment_slots, config.rule.own_budget)
        slots = sum(int((h >= seg).sum()) * len(u) for h, u in zip(held, units))
        if slots <= allowed:
            return 0
    else:
        slots = sum(len(h) * len(u) for h, u in zip(held, units))
        if pick is None and not method.due(step, slots, seq_len, config.num_layers):
            return 0
    retained = [None] * config.num_layers
    for h, layers in zip(held, units):
        for layer in layers:
            retained[layer] = h
    classes = tags.classes(req, seq_len)
    row = int(req.kv.req_pool_idx)
    masks = [head_masks.view_mask(row, u, held[u]) for u in range(len(units))]
    attention = _attention(req, retained, step, method, seq_len, allocator, full_ids,
                           [masks[u] for u, layers in enumerate(units) for _ in layers])
    if seg:
        view = own_view(config.num_layers, config.groups, seq_len, classes, retained, seg,
                        PROTECTED_TAIL, tags.prompt_len, attention=attention)
        kept_own = own_kept(method, view, seg, allowed)
        sel_kept = [np.concatenate([r[r < seg], k]) for r, k in zip(retained, kept_own)]
    else:
        view = CacheView(num_layers=config.num_layers, groups=config.groups, seq_len=seq_len,
                         classes=classes, retained=retained, protected_tail=PROTECTED_TAIL,
                         prompt_len=tags.prompt_len, attention=attention,
                         head_mask=None if all(m is None for m in masks) else
                         [masks[u] for u, layers in enumerate(units) for _ in layers])
        if pick is not None:
            method = pick(view, method)
            if method is None or not method.due(step, slots, seq_len, config.num_layers):
                return 0
        sel = method.select(view)
        sel_kept, sel_heads = sel.kept, sel.head_mask
    lo = max(int(req.kv.cache_protected_len), seg)
    kept_log, heads_log, freed = {}, {}, 0
    for u, layers in enumerate(units):
        kept = np.asarray(sel_kept[layers[0]], dtype=np.int64)
        for layer in layers[1:]:
            if not np.array_equal(sel_kept[layer], kept) or (
                    not seg and sel_heads is not None and not np.array_equal(sel_heads[layer], sel_heads[layers[0]])):
                raise RuntimeError(f"{method.name} kept different sets within unit {list(layers)}")
        drop = np.setdiff1d(held[u], kept)
        drop = drop[drop >= lo]
        if drop.size:
            allocator.drop(u, full_ids[torch.from_numpy(drop)])
            freed += int(drop.size)
        kept_log[str(u)] = segment_views.visible(req.kv.req_pool_idx, u, kept).tolist()
        if not seg and sel_heads is not None:  # each head's own set (the unit holds their union)
            mask = np.asarray(sel_heads[layers[0]], dtype=bool)
            head_masks.store(req.kv.req_pool_idx, u, kept, mask)
            heads_log[str(u)] = [kept[m].tolist() for m in mask]
    counts = state().compression
    counts["compressions"] += 1
    if step == 0 and not chunk_end:
        counts["requests_compressed"] += 1
    if config.kept_log:
        _log(config.kept_log, {"rid": req.rid, "step": step, "seq_len": seq_len, "kept": kept_log,
                               **({"heads": heads_log} if heads_log else {})})
    return freed


def _attention(req, retained, step: int, method, seq_len: int, allocator=None, full_ids=None, masks=None):
    """The request's attention statistics aligned with ``retained`` (None: the method needs
    none). Under the ``prefill`` schedule nothing after step 0 reads them: the recorder stops.
    KVzip's scores come from a reconstruction forward run now (:mod:`..attention.reconstruct`); the learned
    scorer's were stored by full id when the forwards wrote the tokens (:mod:`..attention.learned_scores`;
    ``full_ids`` int64 ``[seq_len]``, ``masks[l]`` the layer's per-head view mask or None)."""
    if method.needs_attention == "learned_heads":
        learned = getattr(getattr(allocator, "pool", None), "learned_scores", None)
        if learned is None:
            raise RuntimeError(f"{method.name} reads the learned scorer's predictions, which this process does not "
                               "capture (no scorer installed on the model)")
        return AttentionStats(learned_heads=learned.heads(full_ids, retained, masks))
    if method.needs_attention == "kvzip_heads":
        from sglang_pask.srt.attention.reconstruct import kvzip_heads

        return AttentionStats(kvzip_heads=kvzip_heads(req, seq_len, retained, method))
    rec = state().recorder
    if rec is None or method.needs_attention is None:
        return None
    row = int(req.kv.req_pool_idx)
    stats = rec.stats(row, retained)
    if step == 0 and method.schedule == "prefill":
        rec.retire(row)
    return stats


def compress_batch(batch, allocator, config) -> None:
    """Every request of a decode batch (errors are logged and counted; serving goes on).

    The due requests are selected together (:func:`compress_padded`: one pool read, one padded
    selection, one free per unit; in segment mode, of their own spans); should that fail, each
    request is retried alone so that only a failing one keeps its Full KV. For a method that
    reads attention statistics each request is compressed alone (:func:`compress_request`), except
    PASK reading the learned scorer group-wide (:func:`batched`), whose predictions are stored by
    full id and read in one gather.

    When drops freed unit slots, ``batch.batch_is_full`` is cleared: SGLang sets it when a waiting
    request did not fit and clears it only when a request leaves the running batch (or, for its
    hybrid SWA pools, every step), so without this the slots freed by compression would never
    admit anyone until some request finished."""
    st = state()
    t0 = time.perf_counter()
    last, st.last_step = st.last_step, t0
    if last is not None and t0 - last < IDLE_GAP_S:
        st.times["decode_steps"] += 1
        st.times["step_s"] += t0 - last
    try:
        _compress_batch(batch, allocator, config)
    finally:
        st.times["compress_s"] += time.perf_counter() - t0


def _compress_batch(batch, allocator, config) -> None:
    req_to_token = batch.req_to_token_pool.req_to_token
    freed = None
    # $SGLANG_PASK_BATCHED_COMPRESSION=0: request by request (the reference path the batched one is measured against)
    if envs.SGLANG_PASK_BATCHED_COMPRESSION.get() and batched(config):
        try:
            freed = compress_padded(batch.reqs, req_to_token, allocator, config)
        except Exception as e:
            state().compression["batch_fallbacks"] += 1
            logger.warning("sglang_pask: batched compression failed (%r); compressing request by request", e)
    if freed is None:
        freed = 0
        for req in batch.reqs:
            try:
                freed += compress_request(req, req_to_token, allocator, config)
            except Exception as e:
                state().compression["errors"] += 1
                logger.exception("sglang_pask: compression failed for %s (kept Full KV): %r", req.rid, e)
    if freed:
        batch.batch_is_full = False


def compress_padded(reqs, req_to_token: torch.Tensor, allocator, config) -> int:
    """:func:`compress_request` for every request of ``reqs`` at once: the same due rule and the
    same kept sets (:meth:`~sglang_pask.methods.base.KVMethod.select_padded` equals ``select`` per
    request), with one gather of the pools for all requests and one ``drop`` per unit. In segment
    mode a request's row is its own span ``[S, T)`` shifted to column 0 (``starts = S``), selected
    at the budget of its own allocation (:func:`~sglang_pask.methods.segment.own_budget`), as
    :func:`~sglang_pask.methods.segment.own_view` and ``own_kept`` do; segment positions are
    never dropped. Python per request: the O(1) due check and its tags. Returns the unit slots
    freed. Shapes: ``R`` candidate requests, ``T`` their longest ``seq_len``, ``T'`` the longest
    own span, ``U`` units."""
    method, units, L = config.method, config.units, config.num_layers
    cand = []
    for req in reqs:
        seq_len, row = int(req.kv.kv_committed_len), req.kv.req_pool_idx
        if seq_len > PROTECTED_TAIL and row is not None and method.checks_at(int(req.decode_batch_idx)):
            cand.append(req)
    if not cand:
        return 0
    lens = np.array([int(r.kv.kv_committed_len) for r in cand], dtype=np.int64)
    segs, allowed = _own_spans(cand, lens, config)  # [R], [R]
    rows = torch.tensor([int(r.kv.req_pool_idx) for r in cand], dtype=torch.long)
    T = int(lens.max())
    ids = req_to_token[rows, :T].long()  # [R, T]; past a request's seq_len: stale, masked below
    pos = np.arange(T, dtype=np.int64)[None, :]
    held = (allocator.pool.mapping[:, ids] > 0).cpu().numpy() & (pos < lens[:, None])[None]  # [U, R, T]
    width = np.array([len(u) for u in units], dtype=np.int64)
    slots = ((held & (pos >= segs[:, None])[None]).sum(axis=2) * width[:, None]).sum(axis=0)  # [R]: own span
    due = np.array([n > a if s else method.due(int(r.decode_batch_idx), int(n), int(t), L)
                    for r, n, t, s, a in zip(cand, slots, lens, segs, allowed)], dtype=bool)
    if not due.any():
        return 0
    idx = np.flatnonzero(due)
    reqs_due = [cand[i] for i in idx]
    lens, segs, allowed, held, ids = lens[idx], segs[idx], allowed[idx], held[:, idx], ids[torch.from_numpy(idx)]
    R, T = len(idx), int(lens.max())
    held, ids, pos = held[:, :, :T], ids[:, :T], pos[:, :T]
    own = lens - segs  # [R]
    if (own < PROTECTED_TAIL).any():
        raise ValueError(f"segment ends {segs.tolist()} leave no current step in sequences {lens.tolist()}")
    classes = np.zeros((R, T), dtype=np.int64)
    prompt_lens = np.empty(R, dtype=np.int64)
    for i, req in enumerate(reqs_due):
        tags = tags_of(req)
        classes[i, : lens[i]] = tags.classes(req, int(lens[i]))
        prompt_lens[i] = tags.prompt_len
    unit_of = np.empty(L, dtype=np.int64)
    for u, layers in enumerate(units):
        unit_of[list(layers)] = u
    if segs.any():  # own spans, shifted: column t of row r is position segs[r] + t
        from sglang_pask.methods.segment import own_budget

        rr, tt = np.nonzero(np.arange(int(own.max()))[None, :] < own[:, None])  # valid (row, column)
        cols = segs[rr] + tt
        own_held = np.zeros((len(units), R, int(own.max())), dtype=bool)
        own_held[:, rr, tt] = held[:, rr, cols]
        own_classes = np.zeros((R, int(own.max())), dtype=np.int64)
        own_classes[rr, tt] = classes[rr, cols]
        budgets = np.array([own_budget(method, L, int(n), int(a)) if s else method.budget
                            for n, a, s in zip(own, allowed, segs)])
        view = PaddedBatch(L, config.groups, own, own_classes, own_held[unit_of],
                           np.maximum(prompt_lens - segs, 0), PROTECTED_TAIL, starts=segs, budgets=budgets)
        kept = np.zeros((L, R, T), dtype=bool)  # [L, R, T]: the segment's held, then the own selection
        kept[:, rr, cols] = method.select_padded(view)[:, rr, tt]
        kept |= held[unit_of] & (pos < segs[:, None])[None]
    else:
        stats = field = None
        if method.needs_attention == "learned_heads":  # the learned scorer's, stored by full id
            field, stats = method.needs_attention, _padded_learned(allocator, ids, held[unit_of])
        view = PaddedBatch(L, config.groups, lens, classes, held[unit_of], prompt_lens, PROTECTED_TAIL,
                           stats=stats, stats_field=field)
        kept = method.select_padded(view)  # [L, R, T]
    lo = np.maximum([int(r.kv.cache_protected_len) for r in reqs_due], segs)  # [R]
    freed = 0
    for u, layers in enumerate(units):
        k = kept[layers[0]]
        for layer in layers[1:]:
            if not np.array_equal(kept[layer], k):
                raise RuntimeError(f"{method.name} kept different sets within unit {list(layers)}")
        drop = held[u] & ~k & (pos >= lo[:, None])
        if drop.any():
            freed += allocator.drop(u, ids[torch.from_numpy(drop)])
    counts = state().compression
    counts["compressions"] += len(reqs_due)
    counts["requests_compressed"] += sum(int(r.decode_batch_idx) == 0 for r in reqs_due)
    if config.kept_log:
        for i, req in enumerate(reqs_due):
            _log(config.kept_log, {"rid": req.rid, "step": int(req.decode_batch_idx), "seq_len": int(lens[i]),
                                   "kept": {str(u): segment_views.visible(req.kv.req_pool_idx, u,
                                                                          np.flatnonzero(kept[layers[0], i])).tolist()
                                            for u, layers in enumerate(units)}})
    return freed


def _padded_learned(allocator, ids: torch.Tensor, held: np.ndarray) -> np.ndarray:
    """float32 ``[L, H, R, T]``: the learned scorer's predictions at every held position of a padded
    batch (``ids`` int64 ``[R, T]`` full ids, ``held`` bool ``[L, R, T]``), 0 elsewhere, as
    :meth:`~..attention.learned_scores.LearnedScores.heads` gives them request by request."""
    learned = getattr(allocator.pool, "learned_scores", None)
    if learned is None:
        raise RuntimeError("the learned scorer's predictions are not captured in this process")
    s = learned.scores[:, ids.cpu()].permute(0, 3, 1, 2).numpy()  # [L, H, R, T]
    s = np.where(held[:, None], s, np.float32(0.0))
    if np.isnan(s).any():
        raise RuntimeError("the learned scorer has no score for some held positions")
    return s


def batched(config) -> bool:
    """Whether the server's batched compression (:func:`compress_padded`) runs ``config``'s method:
    every method that reads no attention statistics, and PASK whose residual reads the learned
    scorer group-wide (:attr:`~sglang_pask.methods.residual.ResidualScorer.batched`) outside segment mode."""
    method = config.method
    if method.needs_attention is None:
        return True
    scorer = getattr(method, "residual_scorer", None)
    return (method.needs_attention == "learned_heads" and scorer is not None and scorer.batched
            and not config.rule.active)


def _own_spans(reqs, lens: np.ndarray, config) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``[R]`` segment ends (0: no shared segment, the ordinary rule) and ``[R]`` the
    token-layer slots each own span may keep (:func:`~sglang_pask.methods.segment.own_slots`;
    -1 where there is no segment)."""
    segs = np.zeros(len(reqs), dtype=np.int64)
    allowed = np.full(len(reqs), -1, dtype=np.int64)
    if not config.rule.active:
        return segs, allowed
    from sglang_pask.methods.segment import own_slots
    from sglang_pask.srt.managers.segments import segment_kept_units

    for i, req in enumerate(reqs):
        tags = tags_of(req)
        if tags.segment_end:
            segment_kept_units(req, config)  # computed once per request; sets tags.segment_slots
            segs[i] = tags.segment_end
            allowed[i] = own_slots(config.method, config.num_layers, int(lens[i]), segs[i], tags.segment_slots,
                                   config.rule.own_budget)
    return segs, allowed


def _log(folder: str, record: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"kept-{os.getpid()}.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def record_release(req, req_to_token: torch.Tensor, allocator) -> None:
    """Append ``{"rid", "seq_len", "unit_slots", "kv_bytes", "full_kv_bytes"}`` to
    :attr:`~..state.PaskState.released`: the unit slots the request's row still maps (read from the pools),
    their bytes, and the bytes Full KV would hold for ``seq_len`` tokens."""
    row = req.kv.req_pool_idx
    seq_len = int(req.kv.kv_committed_len)
    if row is None or seq_len <= 0:
        return
    slots = [len(h) for h in held_positions(allocator, req_to_token[row, :seq_len])]
    pool = allocator.pool
    state().released.append({"rid": req.rid, "seq_len": seq_len, "unit_slots": slots,
                     "kv_bytes": pool.kv_bytes(slots), "full_kv_bytes": pool.kv_bytes([seq_len] * len(slots)),
                     "finished": bool(req.finished())})
