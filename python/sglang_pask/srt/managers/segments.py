"""Shared segments in the scheduler (segment mode: ``--pask-segment system``, the default with the
radix cache on): the segment ``[0, S)`` of a request is prefilled alone, compressed once by
:func:`sglang_pask.methods.segment.segment_kept`, and only then is the rest of the prompt
prefilled, against what the segment kept -- the reference runner's ``segment="system"`` order.
Whether the segment came from the radix tree or was computed by this request, the request's own
tokens see the same persisted segment slots.

Called from the prefill hooks (:mod:`.prefill_hooks`):

* SGLang's admission (:func:`segment_admission`): a request whose prefill would cross its
  segment end (a cache miss: the prefix it matched ends before ``S``) is admitted as a chunked
  prefill ending at ``S``; SGLang tracks one chunked request at a time, so while another is in
  flight the request waits for the next round (``AddReqResult.OTHER``).
* after SGLang publishes a prefill or chunk, :func:`ensure_segment` drops, in every unit, the
  segment positions the rule does not keep: in :meth:`..mem_cache.radix_cache.PaskRadixCache.checkpoint`
  right after the tree's insert (capped at ``S`` by :mod:`..mem_cache.radix_tags`; also the insert of a
  request that finishes at prefill), and with the radix cache off after
  ``mem_cache.common.checkpoint_kv_cache`` (:func:`publish`). Idempotent: a segment the tree already
  holds compressed loses nothing more; deterministic: any request computes the same set.

With ``--pask-segment-prefill full`` the order is the runner's ``segment_prefill="full"``:
nothing is chunked at ``S``, and a request's own tokens attend to the whole segment. With the
radix cache off, a request cuts its segment (:func:`ensure_segment`) once its whole prompt is
prefilled. With the radix cache on, the tree keeps the segment whole (stamped ``/full``): a
request that matches it reuses it (no recompute), a miss publishes its own once its whole prompt
is prefilled (SGLang frees the copy of a request that finds the segment already there and points
it at the tree's slots), and either then reads only the kept positions through its view
(:mod:`..mem_cache.segment_views`); nothing is cut.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from sglang_pask.srt.managers.request_tags import tags_of
from sglang_pask.srt.state import state

logger = logging.getLogger("sglang_pask")



def segment_kept_units(req, config) -> list[np.ndarray]:
    """Per unit, int64 sorted segment positions that persist (computed once per request)."""
    tags = tags_of(req)
    if tags.segment_kept is None:
        from sglang_pask.methods.segment import segment_kept

        kept = segment_kept(config.method, config.num_layers, config.groups, tags.prompt[:tags.segment_end],
                            segment_budget=config.rule.segment_budget)
        units = []
        for layers in config.units:
            for layer in layers[1:]:
                if not np.array_equal(kept[layer], kept[layers[0]]):
                    raise RuntimeError(f"{config.method.name} kept different sets within unit {list(layers)}")
            units.append(kept[layers[0]])
        tags.segment_kept = units
        tags.segment_slots = sum(len(k) for k in kept)  # token-layer slots
    return tags.segment_kept


def segment_ready(req, config, written: int) -> bool:
    """The request's segment may be published and cut, its KV written up to ``written``: the
    segment's end (``compressed``), or the whole prompt (``full``: its own tokens saw it whole)."""
    s = tags_of(req).segment_end
    need = len(req.origin_input_ids) if config.rule.segment_prefill == "full" else s
    return s > 0 and written >= need


def ensure_segment(req, req_to_token: torch.Tensor, allocator, config) -> int:
    """Make the request's segment hold exactly its kept positions in every unit, once its KV is
    written (:func:`segment_ready` of ``req.extend_end``). Returns the unit slots freed (0 when
    it already did)."""
    tags = tags_of(req)
    s = tags.segment_end
    if req.kv.req_pool_idx is None or not segment_ready(req, config, int(getattr(req, "extend_end", 0) or 0)):
        return 0
    full_ids = req_to_token[req.kv.req_pool_idx, :s]
    freed = 0
    for u, kept in enumerate(segment_kept_units(req, config)):
        drop = np.setdiff1d(np.arange(s, dtype=np.int64), kept)
        if drop.size:
            freed += allocator.drop(u, full_ids[torch.from_numpy(drop)])
    if freed:
        state().segments["segments_compressed"] += 1
        state().segments["segment_slots_dropped"] += freed
    return freed


def publish(req, tree_cache, config) -> None:
    """After SGLang published a prefill or chunk with the radix cache off (PASK pools: the caller
    checked): cut the request's segment once it is ready (:func:`ensure_segment`); errors are
    logged (the segment then stays Full KV for this request; serving goes on)."""
    if getattr(tree_cache, "compresses_segments", False):
        return  # the PASK radix cache's checkpoint did it
    try:
        ensure_segment(req, tree_cache.req_to_token_pool.req_to_token, tree_cache.token_to_kv_pool_allocator, config)
    except Exception as e:
        logger.exception("sglang_pask: segment compression failed for %s: %r", req.rid, e)


def segment_admission(admission, adder, req, config, kwargs):
    """SGLang's admission of ``req`` (``admission``), ended at the segment end when its prefill
    would cross it (a cache miss), or deferred while another chunked request is in flight."""
    from sglang.srt.managers.schedule_policy import AddReqResult, _PrefillAdmission

    if config.rule.segment_prefill == "full" or not isinstance(admission, _PrefillAdmission):
        return admission
    try:
        s = tags_of(req).segment_end
    except Exception:
        return admission
    end = admission.prefix_len + admission.extend_len
    if not admission.prefix_len < s < end:
        return admission
    if kwargs.get("has_chunked_req") or adder.new_chunked_req is not None:
        state().segments["segment_chunks_deferred"] += 1
        return AddReqResult.OTHER
    state().segments["segment_chunks_forced"] += 1
    return _PrefillAdmission(admission.prefix_len, s - admission.prefix_len, 0, True, admission.replay_len)
