"""The chunked-prefill rule in the scheduler (:mod:`sglang_pask.methods.chunks`): a prompt longer
than what the per-unit pools hold whole is prefilled chunk by chunk and compressed at each chunk
end, so the server accepts prompts up to what its full index space holds, not only what one
unit pool holds uncompressed (issue 27).

The rule of this process (:func:`rule`) is fixed once its pools are built
(:func:`after_configure`): ``above`` = the longest prompt SGLang admits with the unit pool as its
capacity (every prompt served before is served exactly as before, written whole), ``size`` =
``--pask-prefill-chunk`` (default: a quarter of the unit pool; 0: off), ``room`` = the unit pool
less a margin (a chunk end compresses only as far as the next chunk needs):
:meth:`~sglang_pask.methods.chunks.ChunkRule.for_pool`. It is off in segment mode
and for methods that read attention statistics (:func:`sglang_pask.methods.chunks.check_method`).

Hooks (registered by :mod:`..seam`):

* ``TpModelWorker.get_worker_info`` (AROUND): ``max_req_len`` / ``max_req_input_len`` from the
  full index space instead of the unit pool (what the tokenizer and the scheduler refuse).
* ``Scheduler.init_req_max_new_tokens`` (AROUND): SGLang clips a request's ``max_new_tokens`` to
  what fits after its prompt in an empty pool -- 0 for a prompt longer than a unit pool; a chunked
  prompt is clipped instead to what fits after its own compressed prompt (:func:`plan`).
* ``validate_input_length`` (AFTER, in :mod:`.prompt_limits`): a chunked prompt whose peak does
  not fit an empty unit pool is refused with a message naming the numbers.
* ``PrefillAdder._select_prefill_admission`` (AROUND, through :mod:`.prefill_hooks`): a chunked prompt
  is admitted on its chunked peak (not its length), and its extend ends at the next chunk end;
  SGLang tracks one chunked request at a time, so while another is in flight it waits.
* ``PrefillAdder.add_chunked_req`` (AROUND): the continuation also ends at the next chunk end,
  waits while the pools cannot take it, and what the request still needs is reserved each round
  (so requests admitted after it cannot take the slots its next chunks need).
* after each chunk is published (``checkpoint_kv_cache``, through :mod:`.prefill_hooks`):
  :func:`compress_chunk` compresses the request at ``seq_len`` = the chunk end when it is one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

from sglang_pask.methods.chunks import MARGIN, ChunkRule, chunked_need
from sglang_pask.srt.managers.request_tags import tags_of
from sglang_pask.srt.state import state

logger = logging.getLogger("sglang_pask")



@dataclass(frozen=True)
class Plan:
    """A chunked prompt's need in unit slots: ``peak`` while it is prefilled, ``after`` once the
    prefill-end compression has run (what decoding starts from)."""
    peak: int
    after: int


def rule() -> Optional[ChunkRule]:
    """This process's chunk rule (None: prompts are written whole), fixed by :func:`configure`
    (from :func:`.prompt_limits.after_configure`) with the unit pool's slots."""
    return state().active_chunk_rule()


def applies(req) -> bool:
    r = rule()
    return r is not None and r.applies(len(req.origin_input_ids))


def configure(config, capacity: int, context_len: int) -> Optional[ChunkRule]:
    """Fix the rule from the serving config and the unit pool's ``capacity`` (slots)."""
    from sglang_pask.methods.chunks import check_method

    size = config.prefill_chunk
    st = state()
    st.capacity, st.chunk_rule = int(capacity), None
    if size == 0 or config.rule.active or config.method.budget >= 1.0:
        return None
    try:
        check_method(config.method)
    except ValueError as e:
        if size is not None:
            raise
        logger.info("sglang_pask: chunked prefill off: %s", e)
        return None
    st.chunk_rule = ChunkRule.for_pool(int(capacity), int(context_len), size)
    return st.chunk_rule


def plan(req, config) -> Plan:
    """The request's :class:`Plan` (computed once per request from its prompt classes)."""
    tags = tags_of(req)
    cached = getattr(tags, "chunk_plan", None)
    if cached is None:
        peak, after = chunked_need(config.method, rule(), config.num_layers, config.groups, config.units,
                                   tags.prompt)
        cached = tags.chunk_plan = Plan(peak, after)
    return cached


def too_big(req, config) -> Optional[str]:
    """Why a chunked prompt can never be served here (None: it can)."""
    p = plan(req, config)
    cap = state().capacity
    if p.peak + MARGIN > cap:
        return (f"the prompt has {len(req.origin_input_ids)} tokens; prefilled in chunks of {rule().size} "
                f"and compressed at each chunk end it still needs {p.peak} slots of a unit pool of {cap} "
                "(raise --max-total-tokens or lower --pask-prefill-chunk)")
    return None


# --- hooks ----------------------------------------------------------------------------------------

def around_worker_info(original, worker, *args, **kwargs):
    info = original(worker, *args, **kwargs)
    r = rule()
    if r is None:
        return info
    from sglang_pask.srt.mem_cache.pools import PaskAllocator

    alloc = getattr(getattr(worker, "model_runner", None), "token_to_kv_pool_allocator", None)
    if not isinstance(alloc, PaskAllocator):
        return info
    info = list(info)
    context_len = int(worker.model_config.context_len)
    max_req_len = min(context_len - 1, int(alloc.size) - 1)  # the full index space bounds a request
    info[4], info[5] = max(info[4], max_req_len), max(info[5], max_req_len - 5)
    return tuple(info)


def around_init_max_new_tokens(original, scheduler, req, *args, **kwargs):
    requested = req.sampling_params.max_new_tokens
    result = original(scheduler, req, *args, **kwargs)
    try:
        if applies(req) and requested is not None:
            from sglang_pask.srt.serving import active_config

            p = plan(req, active_config())
            room = state().capacity - p.after - MARGIN
            limit = int(scheduler.max_req_len) - len(req.origin_input_ids) - 1
            req.sampling_params.max_new_tokens = max(0, min(int(requested), room, limit))
    except Exception as e:  # SGLang's clip stays
        logger.warning("sglang_pask: chunked max_new_tokens for %s: %r", getattr(req, "rid", "?"), e)
    return result


def admission(adder, req, kwargs, original):
    """The chunked prompt's admission (see the module docstring); ``original``: SGLang's
    ``_select_prefill_admission``."""
    from sglang.srt.managers.schedule_policy import AddReqResult, _PrefillAdmission

    from sglang_pask.srt.serving import active_config

    P = len(req.origin_input_ids)
    config = active_config()
    p = plan(req, config)
    prefix = int(req.prefix_len)
    # SGLang's total_tokens is extend + max_new + overheads; the request needs its chunked peak
    # while it is prefilled and what the prefill-end compression keeps plus max_new after
    max_new = _max_new(req)
    extend = len(req.full_untruncated_fill_ids) - prefix
    total = int(kwargs.get("total_tokens", 0)) - extend - max_new + max(p.peak, p.after + max_new)
    adm = original(adder, req, **{**kwargs, "total_tokens": total})
    if not isinstance(adm, _PrefillAdmission):
        return adm
    end = rule().next_end(P, 0, adm.prefix_len)
    if end is None or adm.prefix_len + adm.extend_len <= end:
        return adm
    if kwargs.get("has_chunked_req") or adder.new_chunked_req is not None:
        state().chunked["chunks_deferred"] += 1
        return AddReqResult.OTHER
    if adm.prefix_len == 0:
        state().chunked["chunked_requests"] += 1
    # SGLang's commit reserves this chunk for this round; the rest of the request's need is
    # reserved too, so that requests admitted after it cannot take the slots its next chunks need
    _reserve(adder, max(p.peak, p.after + max_new) - (end - adm.prefix_len))
    return _PrefillAdmission(adm.prefix_len, end - adm.prefix_len, 0, True, adm.replay_len)


def _reserve(adder, tokens: int) -> None:
    """Charge ``tokens`` more to this round's total budget (SGLang's offsets: what new requests
    see as taken)."""
    if tokens > 0:
        adder.memory_budget.total_offset += int(tokens)


def _max_new(req) -> int:
    from sglang.srt.managers.schedule_policy import CLIP_MAX_NEW_TOKENS

    return min(max(req.sampling_params.max_new_tokens - len(req.output_ids), 0), CLIP_MAX_NEW_TOKENS)


def around_add_chunked_req(original, adder, req, *args, **kwargs):
    """The continuation of a chunked prompt: it ends at the next chunk end; it waits (SGLang's
    parked chunk: nothing computed this round) while the pools cannot take that chunk, instead of
    letting the allocation fail; and what it still needs after this chunk is reserved
    (:func:`_reserve`)."""
    r = rule()
    if r is None or not r.applies(len(req.origin_input_ids)):
        return original(adder, req, *args, **kwargs)
    prefix = int(req.prefix_len)
    end = r.next_end(len(req.origin_input_ids), 0, prefix) or len(req.origin_input_ids)
    alloc = adder.token_to_kv_pool_allocator
    if alloc.available_size() < end - prefix + MARGIN:
        state().chunked["chunks_parked"] += 1
        return req
    saved = adder.chunked_req_limit
    adder.chunked_req_limit = end - prefix if saved is None else min(saved, end - prefix)
    try:
        result = original(adder, req, *args, **kwargs)
    finally:
        adder.chunked_req_limit = saved
    if req in adder.can_run_list:
        from sglang_pask.srt.managers.persist import held_positions
        from sglang_pask.srt.serving import active_config

        p = plan(req, active_config())
        row = adder.tree_cache.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :prefix]
        held = max((len(h) for h in held_positions(alloc, row)), default=0)
        _reserve(adder, max(p.peak, p.after + _max_new(req)) - held - (req.extend_end - prefix))
    return result


def compress_chunk(req, req_to_token, allocator, config) -> int:
    """After a chunk of ``req``'s prompt is written (``req.extend_end``): compress it when that
    is a chunk end of the rule, as far as the rule's budget there says (possibly not at all).
    Returns the unit slots freed."""
    r = rule()
    written = int(getattr(req, "extend_end", 0) or 0)
    if r is None or written not in set(r.ends(len(req.origin_input_ids))):
        return 0
    from sglang_pask.srt.managers import persist

    st = state()
    before = st.compression["compressions"]
    freed = persist.compress_request(req, req_to_token, allocator, config, seq_len=written, pick=r.method_for)
    st.chunked["chunk_compressions"] += st.compression["compressions"] - before
    st.chunked["chunk_slots_dropped"] += freed
    return freed
