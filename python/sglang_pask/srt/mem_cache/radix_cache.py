"""The PASK radix cache (``--radix-cache-backend pask``, set by the plugin when a policy runs with
the radix cache on): SGLang's ``UnifiedRadixCache`` with :class:`.radix_tags.PaskFullComponent`
as FULL (Python tree core), caching exactly one span per request, its shared segment.

What the tree holds (invariants):

* only segments: an insert stops at the request's segment end ``S``
  (:meth:`~.radix_tags.PaskFullComponent.prepare_for_caching_req`); a request without a segment
  inserts nothing. Its own tokens stay its own (compressed per request, freed with it);
* in a namespace per segment: every request's ``extra_key`` carries a digest of its segment's
  token ids and the server's :attr:`~..serving.ServingConfig.stamp` (:mod:`..entrypoints.prompt_tags`), so two
  requests share tree nodes only when their whole segments are equal. Inside a namespace the
  tree holds one path of ``S`` tokens; no node boundary falls inside it (all requests agree on
  all ``S`` tokens), except transiently while a segment longer than one prefill chunk is
  inserted;
* with ``--pask-segment-prefill full`` (the accurate mode) whole: the node is stamped
  ``<stamp>/full`` and never cut; a request that matches it reuses it (no recompute), prefills its
  own tokens against the whole block, and then reads only the block's kept positions
  (:mod:`.segment_views`);
* otherwise compressed once: the node that completes a segment is stamped (``metadata["pask_segment"] =
  stamp``) and the request that inserted it drops, right after the insert and before any other
  request can match it, what :func:`sglang_pask.methods.segment.segment_kept` does not keep
  (:mod:`..managers.segments`); a match is valid only at a node with the server's stamp, so no request
  ever reads a segment that is incomplete or compressed under another policy or budget;
* accounting in the scheduler's currency: evicting a compressed node frees ``S`` full ids but
  only the slots it still holds in each unit, so :meth:`PaskRadixCache.evictable_size` reports
  what the scheduler could place after evicting every evictable node, less what it can place
  now. At idle ``available + evictable == max_total_num_tokens`` exactly when no slot leaked
  (SGLang's idle check).

Eviction is SGLang's (LRU over leaves): a leaf is a whole segment, so there is nothing finer for
structure to rank. In the accurate mode a cold whole segment is demoted first
(:meth:`PaskRadixCache.demote`, from :meth:`PaskRadixCache.evict_for_alloc`); ``stats()`` reports
the tiers (whole, compressed) and the demotions.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from sglang_pask.srt.state import state

logger = logging.getLogger("sglang_pask")



def _nodes(root):
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


class PaskRadixCache(UnifiedRadixCache):
    """SGLang's unified radix cache whose sizes are counted in schedulable tokens (module)."""

    #: its :meth:`checkpoint` compresses the segment it inserts (read by :mod:`..managers.segments`)
    compresses_segments = True
    #: :meth:`_node_slots`' memo: ``id(cd) -> (cd.value, slots per unit)``, for one allocator generation
    #: (made on the first call: no generation is None)
    _slots_memo: dict
    _slots_generation = None

    def _full_data(self, evictable_only: bool = True):
        """The FULL component data of every node holding ids (with ``evictable_only``: unlocked)."""
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

        root = self.tree_core.root_node
        for node in _nodes(root):
            if node is root:
                continue
            cd = node.component_data[ComponentType.FULL]
            if cd.value is not None and (cd.lock_ref == 0 or not evictable_only):
                yield cd

    def _ids(self, evictable_only: bool = True) -> torch.Tensor:
        """int64 full ids the tree holds (with ``evictable_only``: in unlocked nodes)."""
        parts = [cd.value for cd in self._full_data(evictable_only)]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)

    def stats(self) -> dict:
        """JSON-ready: full ids (tokens) and unit slots the tree holds, evictable or not, and what
        the scheduler is told (``/server_info`` -> ``internal_states[0]["pask"]["tree"]``)."""
        from sglang_pask.srt.mem_cache.pools import PaskAllocator

        ids = self._ids(evictable_only=False)
        alloc = self.token_to_kv_pool_allocator
        slots = (alloc.pool.mapping[:, ids.long()] > 0).sum(dim=1).tolist() \
            if isinstance(alloc, PaskAllocator) else None
        return {"tokens": int(ids.numel()), "unit_slots": slots,
                "kv_bytes": alloc.pool.kv_bytes(slots) if slots is not None else None,
                "evictable_tokens": int(self.tree_core.evictable_size()),
                "protected_tokens": int(self.tree_core.protected_size()),
                "evictable_schedulable": int(self.evictable_size()),
                "nodes": sum(1 for _ in _nodes(self.tree_core.root_node)) - 1,
                "tiers": self.tiers(), **state().demotion}

    def _node_slots(self, cd, alloc) -> tuple[int, ...]:
        """Unit slots ``cd``'s full ids hold, per unit. Memoized per node until the allocator's
        ``mapping_generation`` moves (a free, drop or clear: the only ways a live id loses slots);
        an entry is valid only for the same ``cd.value`` object (a split node gets new ones)."""
        if self._slots_generation != alloc.mapping_generation:
            self._slots_memo, self._slots_generation = {}, alloc.mapping_generation
        hit = self._slots_memo.get(id(cd))
        if hit is not None and hit[0] is cd.value:
            return hit[1]
        held = tuple((alloc.pool.mapping[:, cd.value.long()] > 0).sum(dim=1).tolist())
        # holding cd.value keeps it alive: a later node reusing id(cd) cannot have this value object
        self._slots_memo[id(cd)] = (cd.value, held)
        return held

    def _schedulable_evictable(self, fresh: bool = False) -> int:
        """What the scheduler could place after evicting every evictable node, less what it can
        place now (module). ``fresh``: recount every slot (the memo's oracle, for tests)."""
        from sglang_pask.srt.mem_cache.pools import PaskAllocator

        alloc = self.token_to_kv_pool_allocator
        tokens = self.tree_core.evictable_size()
        if not isinstance(alloc, PaskAllocator) or tokens == 0:
            return tokens
        if fresh:
            ids = self._ids()
            n, held = int(ids.numel()), (alloc.pool.mapping[:, ids.long()] > 0).sum(dim=1).tolist()
        else:
            n, held = 0, [0] * len(alloc.units)
            for cd in self._full_data():
                n += len(cd.value)
                held = [h + x for h, x in zip(held, self._node_slots(cd, alloc))]
        room = min(alloc.full_available_size() + n,
                   *(a + int(h) for a, h in zip(alloc.unit_available_sizes(), held)))
        return max(room - alloc.available_size(), 0)

    def evictable_size(self) -> int:
        return self._schedulable_evictable()

    def checkpoint(self, req, *, up_to: int, **kwargs) -> None:
        """SGLang's insert (capped at the segment end), then the segment's compression, before
        any other request can match the new node (both run on the scheduler thread)."""
        super().checkpoint(req, up_to=up_to, **kwargs)
        from sglang_pask.srt.managers.segments import ensure_segment
        from sglang_pask.srt.mem_cache.pools import PaskAllocator
        from sglang_pask.srt.serving import active_config

        config = active_config()
        alloc = self.token_to_kv_pool_allocator
        if config is None or not config.rule.active or not isinstance(alloc, PaskAllocator):
            return
        if config.rule.segment_prefill == "full":  # the tree keeps the block whole; the request reads its view
            from sglang_pask.srt.managers.request_tags import tags_of
            from sglang_pask.srt.managers.segments import segment_kept_units, segment_ready
            from sglang_pask.srt.mem_cache import segment_views

            try:
                if segment_ready(req, config, int(getattr(req, "extend_end", 0) or 0)) and not req.finished():
                    s = int(tags_of(req).segment_end)
                    ids = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :s].long()
                    demoted = not bool((alloc.pool.mapping[:, ids] > 0).all())  # a hit on a demoted block
                    segment_views.set_view(req, segment_kept_units(req, config), demoted=demoted,
                                           device=alloc.pool.mapping.device)
            except Exception as e:  # logged; the request then reads the whole block
                logger.exception("sglang_pask: segment view failed for %s: %r", req.rid, e)
            return
        try:
            ensure_segment(req, self.req_to_token_pool.req_to_token, alloc, config)
        except Exception as e:  # logged; the node then holds the segment uncompressed
            logger.exception("sglang_pask: segment compression failed for %s: %r", req.rid, e)

    def full_evictable_size(self) -> int:
        return self._schedulable_evictable()

    # -- demotion before eviction (the accurate mode) ------------------------------------------
    def evict_for_alloc(self, params, **kwargs):
        """SGLang's eviction for an allocation, after demotion: while the allocator is short of
        ``params.num_tokens`` more, cold whole blocks are demoted first (:meth:`demote`); LRU
        then evicts leaves, demoted ones included, only for what is still missing."""
        from sglang.srt.mem_cache.base_prefix_cache import EvictResult

        need = int(getattr(params, "num_tokens", 0) or 0)
        if need > 0 and kwargs.get("allocation_reclaim_satisfied") is None:
            alloc = self.token_to_kv_pool_allocator
            target = alloc.available_size() + need
            self.demote(target)
            short = target - alloc.available_size()
            if short <= 0:
                return EvictResult()
            params.num_tokens = short
        return super().evict_for_alloc(params, **kwargs)

    def demote(self, target: int) -> int:
        """Until the allocator can place ``target`` tokens: the least recently used cold whole
        block (stamped ``/full``, no request holding it) keeps only the positions the rule keeps
        -- its other slots are freed in every unit -- and is stamped compressed. It stays in the
        tree; a later hit prefills its own tokens against it (the ``compressed`` mode). Blocks in
        use are never demoted. Returns the unit slots freed."""
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

        from sglang_pask.methods.segment import segment_kept
        from sglang_pask.srt.mem_cache.pools import PaskAllocator
        from sglang_pask.srt.mem_cache.radix_tags import SEGMENT_KEY, node_stamp, path_classes
        from sglang_pask.srt.serving import active_config

        config = active_config()
        alloc = self.token_to_kv_pool_allocator
        if config is None or config.rule.segment_prefill != "full" or not isinstance(alloc, PaskAllocator):
            return 0
        whole, root = node_stamp(config), self.tree_core.root_node

        def data(node):
            return node.component_data[ComponentType.FULL]

        cold = sorted((n for n in _nodes(root) if n.parent is root and data(n).lock_ref == 0
                       and data(n).metadata.get(SEGMENT_KEY) == whole), key=lambda n: n.last_access_time)
        freed = 0
        for node in cold:
            if alloc.available_size() >= target:
                break
            classes = path_classes(node, ComponentType.FULL)
            if classes is None or len(classes) != len(data(node).value):
                continue  # untagged: it stays whole until LRU evicts it
            kept = segment_kept(config.method, config.num_layers, config.groups, classes,
                                segment_budget=config.rule.segment_budget)
            ids = data(node).value
            for u, layers in enumerate(config.units):
                drop = np.setdiff1d(np.arange(len(classes), dtype=np.int64), kept[layers[0]])
                if drop.size:
                    freed += alloc.drop(u, ids[torch.from_numpy(drop)])
            data(node).metadata[SEGMENT_KEY] = config.stamp
            state().demotion["demoted"] += 1
        state().demotion["demoted_slots"] += freed
        return freed

    def tiers(self) -> dict:
        """Blocks and KV bytes per tier: ``whole`` (hot, full KV), ``compressed`` (demoted, or
        cut at insert in the compressed mode)."""
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

        from sglang_pask.srt.mem_cache.pools import PaskAllocator
        from sglang_pask.srt.mem_cache.radix_tags import SEGMENT_KEY

        alloc = self.token_to_kv_pool_allocator
        out = {"whole": {"blocks": 0, "kv_bytes": 0}, "compressed": {"blocks": 0, "kv_bytes": 0}}
        if not isinstance(alloc, PaskAllocator):
            return out
        root = self.tree_core.root_node
        for node in _nodes(root):
            stamp = node.component_data[ComponentType.FULL].metadata.get(SEGMENT_KEY) if node is not root else None
            if stamp is None:
                continue
            ids = node.component_data[ComponentType.FULL].value.long()
            slots = (alloc.pool.mapping[:, ids] > 0).sum(dim=1).tolist()
            tier = out["whole" if stamp.endswith("/full") else "compressed"]
            tier["blocks"] += 1
            tier["kv_bytes"] += int(alloc.pool.kv_bytes(slots))
        return out


def pask_radix_cache_factory(ctx):
    """``--radix-cache-backend pask``: the unified radix cache with the PASK FULL component."""
    from sglang.srt.mem_cache.registry import create_unified_radix_cache
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    from sglang_pask.srt.mem_cache.radix_tags import PaskFullComponent

    if ctx.is_hybrid_swa or ctx.is_hybrid_ssm or ctx.enable_hierarchical_cache:
        raise RuntimeError("sglang_pask: the PASK radix cache supports full-attention models without HiCache")
    params = ctx.params
    params.component_registry_override = {**(params.component_registry_override or {}),
                                          ComponentType.FULL: PaskFullComponent}
    params.tree_core_backend = "python"  # what any component override gets; said explicitly
    cache = create_unified_radix_cache(ctx, cache_class=PaskRadixCache)
    from sglang_pask.srt.serving import active_config

    config = active_config()
    if config is not None and config.rule.segment_prefill == "full":
        logger.info("sglang_pask: radix cache: PASK, tiers (each shared segment whole while hot, read through "
                    "views; a cold one demoted to its compressed form before LRU evicts it)")
    else:
        logger.info("sglang_pask: radix cache: PASK (caches each request's shared segment, compressed once)")
    return cache
