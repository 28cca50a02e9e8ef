"""Prompts the scheduler refuses, each with one line naming the limit (active only with a policy;
targets declared in :mod:`sglang_pask.srt.seam`; the HTTP side of request errors is
:mod:`sglang_pask.srt.entrypoints.error_hooks`).

AFTER ``validate_input_length``: a request whose signed structure tags do not validate
(:func:`sglang_pask.srt.managers.request_tags.validate`) is refused with that line, so no method
reads them and the request never keeps Full KV by a failed compression. SGLang refuses a prompt of
``max_req_input_len`` tokens or more with a generic "exceeds the maximum allowed length". With a
policy that limit is usually the per-unit KV pool (``ceil(b x --max-total-tokens)`` slots: a
prompt is prefilled whole before it is compressed), far below what the same
``--max-total-tokens`` admits stock; the message names the limit that refused it
(:func:`length_message`). The pool geometry is recorded AFTER ``KVCacheConfigurator.configure``
(:attr:`~sglang_pask.srt.state.PaskState.limits`, one per scheduler process), where the chunked
prefill rule is fixed too (:func:`sglang_pask.srt.managers.chunked.configure`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sglang_pask.methods.chunks import MARGIN as MARGIN_SLOTS
from sglang_pask.srt.state import state


@dataclass(frozen=True)
class PromptLimits:
    """What bounds a prompt in one scheduler process: the model's ``context_len`` and the slots
    per unit of the PASK pool (``capacity``: the scheduler's ``max_total_num_tokens``) at
    ``budget``. SGLang's ``max_req_input_len`` is ``min(context_len, capacity) - 6``."""
    context_len: int
    capacity: int
    budget: float


def length_message(tokens: int, max_req_input_len: int, limits: PromptLimits) -> str:
    """The 400 for a prompt of ``tokens`` refused at ``max_req_input_len`` (SGLang refuses
    ``tokens >= max_req_input_len``), naming the limit that refused it."""
    head = f"the prompt has {tokens} tokens; "
    at_most = max_req_input_len - 1
    if limits.capacity < limits.context_len and at_most <= limits.capacity:
        return (f"{head}with --pask-policy at budget {limits.budget:g} the server accepts at most {at_most} "
                f"(the per-unit KV pool of {limits.capacity} slots holds a whole prompt before it is "
                "compressed; raise --max-total-tokens)")
    return f"{head}the server accepts at most {at_most} (the model's context length is {limits.context_len} tokens)"


def after_configure(result, configurator=None, *args, **kwargs):
    """Record this process's :class:`PromptLimits` (:attr:`~..state.PaskState.limits`; None: no
    PASK pool here) when the pools built are PASK's; the result unchanged."""
    from sglang_pask.srt.mem_cache.pools import PaskAllocator
    from sglang_pask.srt.serving import active_config

    alloc, config = getattr(result, "token_to_kv_pool_allocator", None), active_config()
    if isinstance(alloc, PaskAllocator) and config is not None:
        from sglang_pask.srt.managers import chunked

        context_len = int(configurator.model_config.context_len)
        state().limits = PromptLimits(context_len, int(alloc.capacity), config.budget)
        r = chunked.configure(config, int(alloc.capacity), context_len)
        logging.getLogger("sglang_pask").info("sglang_pask: chunked prefill: %s",
                                              chunked_line(r, int(alloc.capacity), min(context_len, alloc.size) - 7))
    return result


def chunked_line(rule, capacity: int, longest: int) -> str:
    """What the start-up line says of the chunked prefill rule (``rule`` None: off): which prompts
    are written whole, which in chunks, and exactly which are refused."""
    if rule is None:
        return f"off (a prompt must fit a unit pool of {capacity} slots whole)"
    if rule.above >= longest:
        return (f"not needed (a unit pool of {capacity} slots holds every prompt the server admits, {longest} "
                "tokens, whole)")
    return (f"a prompt over {rule.above} tokens is prefilled in chunks of {rule.size} and compressed at each chunk "
            f"end to the budget; it is served when, at every chunk end, what the method keeps of it in one KV "
            f"unit plus the next chunk fits that unit's {capacity} slots (less {MARGIN_SLOTS}), and refused "
            f"with a 400 naming its need otherwise (at most {longest} tokens in any case)")


def after_validate_length(result, req=None, max_req_input_len=None, *args, **kwargs):
    """SGLang's refusal of a too-long prompt, reworded by :func:`length_message`; None (accepted,
    or truncated with ``--allow-auto-truncate``) unchanged."""
    limits = state().limits
    if limits is None or req is None or max_req_input_len is None:
        return result
    if result is None:  # tags the server signed but that do not fit the request: refused, never Full KV
        from sglang_pask.srt.managers.request_tags import tags_of

        if err := tags_of(req).error:
            return err
    from sglang_pask.srt.managers import chunked

    if result is None and chunked.applies(req):  # accepted by length: does its chunked peak fit?
        from sglang_pask.srt.serving import active_config

        return chunked.too_big(req, active_config())
    if not isinstance(result, str):
        return result
    return length_message(len(req.origin_input_ids), int(max_req_input_len), limits)
