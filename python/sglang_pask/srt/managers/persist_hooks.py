"""The hooks that make the server persist KV per unit (active only with a policy; targets declared
in :mod:`..seam`).

* ``KVCacheConfigurator._build_mha_kv_pool`` (AROUND): a :class:`~..mem_cache.pools.PaskKVPool` instead of
  the MHA pool -- ``--max-total-tokens N`` full ids and, per unit, ``ceil(b * N)`` slots (or the same
  bytes split by the policy's measured ``pools.share``: :func:`~..mem_cache.pools.unit_sizes_for`).
* ``KVCacheConfigurator._build_token_to_kv_pool_allocator`` (AROUND): its
  :class:`~..mem_cache.pools.PaskAllocator`.
* ``KVCacheConfigurator.configure`` (AROUND): the scheduler's ``max_total_num_tokens`` becomes
  the allocator's capacity (what ``available_size()`` reports at idle, so SGLang's own idle
  leak check holds), and the pool sizes are logged at start-up.
* ``attention_registry.attn_backend_wrapper`` (AROUND): torch_native -> the PASK torch backend;
  flashinfer -> the PASK FlashInfer backend (one wrapper per unit; per-head selections and KVzip's
  scores are refused there); others are refused by name.
* ``ScheduleBatch.maybe_evict_swa`` (AROUND): after SGLang's own SWA step, the drops
  (:func:`.persist.compress_batch`) for decode batches.
* ``mem_cache.common.release_kv_cache`` (AROUND): before a request's KV is freed, what it holds
  per unit is recorded (:func:`.persist.record_release`).
* ``SchedulerInternalStateController._add_memory_usage`` (AFTER): ``info["pask"]`` -- the
  scheduler's :class:`~..state.PaskState` recorded: pool, tag and compression counters
  (``GET /server_info`` -> ``internal_states[0]``).
* ``PrefillAdder._select_prefill_admission`` and ``mem_cache.common.checkpoint_kv_cache``
  (AROUND): shared segments and chunked prefill (:mod:`.prefill_hooks`).
"""

from __future__ import annotations

import logging

import msgspec

from sglang_pask.environ import envs
from sglang_pask.srt.serving import active_config
from sglang_pask.srt.state import state

logger = logging.getLogger("sglang_pask")


def around_build_pool(original, configurator, *, max_total_num_tokens: int, mha_pool_class,
                      quant_method=None):
    config = active_config()
    if config is None or getattr(configurator, "is_draft_worker", False):
        return original(configurator, max_total_num_tokens=max_total_num_tokens,
                        mha_pool_class=mha_pool_class, quant_method=quant_method)
    from sglang_pask.srt.mem_cache.pools import PaskKVPool, unit_sizes_for

    if getattr(configurator, "is_hybrid_swa", False):
        raise RuntimeError("sglang_pask: sliding-window (hybrid SWA) models are not supported")
    if quant_method is not None:
        raise RuntimeError("sglang_pask: quantized KV caches are not supported")
    # A 1-slot stock pool tells the geometry SGLang would use (heads, dims, dtype, layers).
    probe = original(configurator, max_total_num_tokens=1, mha_pool_class=mha_pool_class)
    if probe.start_layer != 0 or probe.layer_num != config.num_layers:
        raise RuntimeError(f"sglang_pask: the policy has {config.num_layers} layers, the KV pool "
                           f"{probe.layer_num} from layer {probe.start_layer} (pipeline parallelism "
                           "is not supported)")
    pool = PaskKVPool(units=config.units, full_size=max_total_num_tokens,
                      unit_size=unit_sizes_for(max_total_num_tokens, config.budget, config.units, config.unit_share,
                                               *(config.pool_tokens or ())),
                      dtype=probe.dtype,
                      head_num=probe.head_num, head_dim=probe.head_dim, v_head_dim=probe.v_head_dim,
                      device=probe.device, num_layers=config.num_layers)
    del probe
    return pool


def around_build_allocator(original, configurator, *, sizes, token_to_kv_pool, **kwargs):
    from sglang_pask.srt.mem_cache.pools import PaskAllocator, PaskKVPool

    if not isinstance(token_to_kv_pool, PaskKVPool):
        return original(configurator, sizes=sizes, token_to_kv_pool=token_to_kv_pool, **kwargs)
    return PaskAllocator(sizes.max_total_num_tokens, token_to_kv_pool,
                         device=token_to_kv_pool.device, dtype=configurator.kv_cache_dtype)


def around_configure(original, configurator, *args, **kwargs):
    from sglang_pask.srt.mem_cache.pools import PaskAllocator

    result = original(configurator, *args, **kwargs)
    alloc = result.token_to_kv_pool_allocator
    if not isinstance(alloc, PaskAllocator):
        return result
    pool = alloc.pool
    full_bytes = alloc.size * pool.layer_num * pool.bytes_per_token_layer()
    config = active_config()
    logger.info("sglang_pask: %s", config.describe())
    if config.method.needs_attention == "kvzip_heads" and config.method.schedule != "prefill":
        logger.warning("sglang_pask: %s reads KVzip's scores, one forward of the context per compression; "
                       "under schedule %s that is every %d decode step(s) once a request is over its budget "
                       "(KVzip's authors score once: --pask-schedule prefill)", config.method.name,
                       config.method.schedule, config.method.interval)
    logger.info("sglang_pask: KV pools: %d full ids (index only), %d unit(s) of %s slots; KV %.2f MB "
                "(Full KV for %d tokens: %.2f MB, ratio %.3f) + indices %.2f MB; the scheduler sees "
                "max_total_num_tokens=%d", alloc.size, len(pool.units), pool.unit_sizes,
                pool.kv_bytes_capacity() / 1e6, alloc.size, full_bytes / 1e6,
                pool.kv_bytes_capacity() / max(full_bytes, 1), pool.index_bytes() / 1e6, alloc.capacity)
    return msgspec.structs.replace(result, max_total_num_tokens=alloc.capacity)


def around_attn_wrapper(original, runner, full_attn_backend):
    from sglang_pask.srt.mem_cache.pools import PaskKVPool

    backend = original(runner, full_attn_backend)
    if not isinstance(getattr(runner, "token_to_kv_pool", None), PaskKVPool):
        return backend
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    if type(backend) is TorchNativeAttnBackend:
        from sglang_pask.srt.attention.torch_native_backend import PaskTorchNativeAttnBackend

        return PaskTorchNativeAttnBackend(runner)
    if type(backend).__name__ == "FlashInferAttnBackend":
        from sglang_pask.srt.attention.flashinfer_backend import PaskFlashInferAttnBackend

        config = active_config()
        if config is not None and config.method.needs_attention == "kvzip_heads":
            raise RuntimeError(f"sglang_pask: {config.method.name} reads KVzip's scores, whose reconstruction "
                               "forward runs on the torch backend only; use --attention-backend torch_native")
        if config is not None and getattr(config.method, "per_head", False):
            raise RuntimeError(f"sglang_pask: {config.method.name} selects per KV head, which the FlashInfer "
                               "kernels cannot mask per head; use --attention-backend torch_native")

        return PaskFlashInferAttnBackend(runner)
    raise RuntimeError(f"sglang_pask: attention backend {type(backend).__name__} cannot read per-unit "
                       "KV pools; use --attention-backend torch_native (CPU) or flashinfer (GPU)")


def around_evict(original, batch):
    result = original(batch)
    from sglang_pask.srt.mem_cache.pools import PaskAllocator

    alloc = batch.token_to_kv_pool_allocator
    if isinstance(alloc, PaskAllocator) and batch.forward_mode is not None and batch.forward_mode.is_decode():
        from sglang_pask.srt.managers.persist import compress_batch

        compress_batch(batch, alloc, active_config())
    return result


def around_release(original, req, *args, **kwargs):
    """Record what a request holds just before its KV is released
    (:attr:`~..state.PaskState.released`); its row's statistics, head masks and view go."""
    try:
        from sglang_pask.srt.managers.persist import record_release
        from sglang_pask.srt.mem_cache.pools import PaskAllocator

        tree = kwargs.get("tree_cache", args[0] if args else None)
        alloc = getattr(tree, "token_to_kv_pool_allocator", None)
        if isinstance(alloc, PaskAllocator):
            record_release(req, tree.req_to_token_pool.req_to_token, alloc)
            from sglang_pask.srt.attention import head_masks, window_stats
            from sglang_pask.srt.mem_cache import segment_views

            window_stats.forget(req.kv.req_pool_idx)
            head_masks.forget(req.kv.req_pool_idx)
            segment_views.clear(req.kv.req_pool_idx)
    except Exception as e:  # accounting must never break serving
        logger.warning("sglang_pask: release record failed for %s: %r", getattr(req, "rid", "?"), e)
    return original(req, *args, **kwargs)


def after_memory_usage(_result, controller, info) -> None:
    """``info["pask"]``: the scheduler's :class:`~..state.PaskState`, recorded."""
    try:
        from sglang_pask import ops
        from sglang_pask.srt.managers.persist import batched
        from sglang_pask.srt.mem_cache.pools import PaskAllocator

        scheduler = controller.scheduler
        alloc = scheduler.token_to_kv_pool_allocator
        pask = isinstance(alloc, PaskAllocator)
        owned = getattr(scheduler, "_pask_state", None) or state()
        config = active_config()
        info["pask"] = owned.record(config, alloc if pask else None,
                                    getattr(scheduler, "tree_cache", None) if pask else None,
                                    kernels=ops.implementation(),  # whether this method's compression runs batched
                                    batched=envs.SGLANG_PASK_BATCHED_COMPRESSION.get() and config is not None
                                    and batched(config))
    except Exception as e:  # never break /server_info
        info["pask"] = {"error": repr(e)}
