"""The two prefill hooks (registered by :mod:`..seam`), shared by the rules that shape a prompt's
prefill: the shared-segment rule (:mod:`.segments`, segment mode) and the chunked prefill rule
(:mod:`.chunked`, no segment). Each request is under one of them at most.

* ``PrefillAdder._select_prefill_admission`` (AROUND): a chunked prompt is admitted by
  :func:`.chunked.admission` (on its planned peak, ending at its next chunk end); otherwise
  SGLang's admission, then :func:`.segments.segment_admission` in segment mode.
* ``mem_cache.common.checkpoint_kv_cache`` (AROUND): after SGLang publishes a prefill or chunk,
  :func:`.chunked.compress_chunk` (no segment) or :func:`.segments.publish` (segment mode, the
  radix cache off). Errors are logged and counted; the request is then served with more KV.
"""

from __future__ import annotations

import logging

from sglang_pask.srt.managers import chunked, segments
from sglang_pask.srt.serving import active_config
from sglang_pask.srt.state import state

logger = logging.getLogger("sglang_pask")


def around_select_admission(original, adder, req, **kwargs):
    config = active_config()
    if config is None:
        return original(adder, req, **kwargs)
    if chunked.applies(req):
        try:
            return chunked.admission(adder, req, kwargs, original)
        except Exception as e:  # SGLang's own admission (the request waits until it fits whole)
            state().chunked["errors"] += 1
            logger.exception("sglang_pask: chunked admission failed for %s: %r", req.rid, e)
    admission = original(adder, req, **kwargs)
    if not config.rule.active:
        return admission
    return segments.segment_admission(admission, adder, req, config, kwargs)


def around_checkpoint(original, req, tree_cache, *args, **kwargs):
    result = original(req, tree_cache, *args, **kwargs)
    from sglang_pask.srt.mem_cache.pools import PaskAllocator

    config = active_config()
    alloc = getattr(tree_cache, "token_to_kv_pool_allocator", None)
    if config is None or not isinstance(alloc, PaskAllocator):
        return result
    if config.rule.active:
        segments.publish(req, tree_cache, config)
        return result
    try:  # the chunked prefill rule: compressed at each chunk end
        chunked.compress_chunk(req, tree_cache.req_to_token_pool.req_to_token, alloc, config)
    except Exception as e:  # the chunk then stays whole; serving goes on
        state().chunked["errors"] += 1
        logger.exception("sglang_pask: chunk compression failed for %s: %r", req.rid, e)
    return result
