"""Per-unit KV sub-pools behind one canonical "full" index space (mirrors SGLang's SWA pools).

* **Full ids** (``req_to_token``, ``out_cache_loc``, the radix tree) stay canonical, but hold no
  KV bytes: they are an index space of ``full_size`` slots managed by :class:`PaskAllocator`
  (a ``TokenToKVPoolAllocator``, page size 1).
* **Units** (:mod:`..serving`): each unit ``u`` (consecutive layers) has its own
  ``MHATokenToKVPool`` of ``unit_sizes[u]`` slots x ``len(u)`` layers (:func:`unit_sizes_for`:
  b x N each, or in proportion to what the policy's groups hold), and a row of the mapping
  ``mapping[u, full] -> unit slot`` (0: not held in that unit; slot 0 is SGLang's padding slot).
* **Alloc** gives every new token a slot in every unit; **drop** (:meth:`PaskAllocator.drop`)
  frees a token's slot in one unit and zeroes its mapping; **free** releases the unit slots still
  mapped, then the full id.

Invariants (tested): for every unit, ``mapping[u]`` is injective on its non-zero entries;
``available_size() == min(full available, min over units of unit available)``; at idle every
unit allocator is back at its ``unit_sizes[u]`` and the full allocator at ``full_size``. KV bytes held
= the sum over units of (slots in use x ``len(u)`` layers x per-token-layer bytes).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import KVCache, MHATokenToKVPool, unwrap_write_loc

from sglang_pask import ops


class PaskKVPool(KVCache):
    """The KV buffers: one ``MHATokenToKVPool`` per unit, addressed through ``mapping``.

    ``get_key_buffer(layer_id)`` returns the unit buffer ``[unit_sizes[u] + 1, heads, head_dim]``,
    indexed by **unit** slots (``mapping[unit_of[layer_id]][full_ids]``), never by full ids.
    """

    def __init__(self, *, units: Sequence[Sequence[int]], full_size: int, unit_size: int | Sequence[int],
                 dtype: torch.dtype, head_num: int, head_dim: int, v_head_dim: Optional[int],
                 device: str, num_layers: int):
        super().__init__(full_size, 1, dtype, num_layers, device, False)
        self.units = [list(u) for u in units]
        self.unit_of = [0] * num_layers
        self.local = [0] * num_layers
        for u, layers in enumerate(self.units):
            for i, layer in enumerate(layers):
                self.unit_of[layer], self.local[layer] = u, i
        #: slots of each unit's pool (``unit_size``: one int for all units, or one per unit)
        self.unit_sizes = ([int(unit_size)] * len(self.units) if isinstance(unit_size, int)
                           else [int(n) for n in unit_size])
        if len(self.unit_sizes) != len(self.units) or min(self.unit_sizes) < 1:
            raise ValueError(f"unit sizes {self.unit_sizes} for {len(self.units)} unit(s): one size >= 1 per unit")
        self.head_num, self.head_dim = head_num, head_dim
        self.v_head_dim = v_head_dim if v_head_dim is not None else head_dim
        self.pools = [
            MHATokenToKVPool(size, page_size=1, dtype=dtype, head_num=head_num,
                             head_dim=head_dim, v_head_dim=self.v_head_dim, layer_num=len(layers),
                             device=device, enable_memory_saver=False, start_layer=0,
                             enable_alt_stream=False)
            for size, layers in zip(self.unit_sizes, self.units)
        ]
        # int64 [U, full_size + 2]: unit slot of each full id (0: not held); the last column is
        # a sentinel so that padded ids (== full_size + 1) map to the padding slot.
        self.mapping = torch.zeros((len(self.units), full_size + 2), dtype=torch.int64, device=device)
        #: the learned scorer's predictions per full id (:class:`~..attention.learned_scores.LearnedScores`; None
        #: unless the serving method reads ``learned_heads``): set once the model is loaded
        self.learned_scores = None
        self.mem_usage = self.kv_bytes_capacity() / (1 << 30)

    # -- sizes ---------------------------------------------------------------------------------
    def bytes_per_token_layer(self) -> int:
        itemsize = torch.empty((), dtype=self.store_dtype).element_size()
        return self.head_num * (self.head_dim + self.v_head_dim) * itemsize

    def kv_bytes(self, slots_per_unit: Sequence[int]) -> int:
        """Bytes of ``slots_per_unit[u]`` slots in every unit (each slot spans the unit's layers)."""
        return sum(n * len(u) for n, u in zip(slots_per_unit, self.units)) * self.bytes_per_token_layer()

    def kv_bytes_capacity(self) -> int:
        """Bytes of all unit buffers (what the pools hold, allocated at start)."""
        return self.kv_bytes(self.unit_sizes)

    def index_bytes(self) -> int:
        return self.mapping.numel() * self.mapping.element_size()

    def get_kv_size_bytes(self):
        """``(K bytes, V bytes)`` of all unit buffers (SGLang's start-up log and memory report)."""
        total = self.kv_bytes_capacity()  # divisible by head_dim + v_head_dim: exact split
        k = total * self.head_dim // (self.head_dim + self.v_head_dim)
        return k, total - k

    # -- buffers -------------------------------------------------------------------------------
    def _pool(self, layer_id: int) -> tuple[MHATokenToKVPool, int]:
        return self.pools[self.unit_of[layer_id]], self.local[layer_id]

    def get_key_buffer(self, layer_id: int):
        pool, local = self._pool(layer_id)
        return pool.get_key_buffer(local)

    def get_value_buffer(self, layer_id: int):
        pool, local = self._pool(layer_id)
        return pool.get_value_buffer(local)

    def get_kv_buffer(self, layer_id: int):
        pool, local = self._pool(layer_id)
        return pool.get_kv_buffer(local)

    def translate(self, unit: int, full_ids: torch.Tensor) -> torch.Tensor:
        """Unit slots of ``full_ids`` (0 where the unit does not hold the token)."""
        return self.mapping[unit, full_ids.long()]

    def set_kv_buffer(self, layer, loc_info, cache_k, cache_v, k_scale=None, v_scale=None,
                      layer_id_override=None, dcp_kv_mask=None):
        if dcp_kv_mask is not None:
            raise RuntimeError("sglang_pask: decode context parallelism is not supported")
        loc, _, _ = unwrap_write_loc(loc_info)
        layer_id = layer_id_override if layer_id_override is not None else layer.layer_id
        pool, local = self._pool(layer_id)
        slots = self.translate(self.unit_of[layer_id], loc)
        pool.set_kv_buffer(None, slots, cache_k, cache_v, k_scale, v_scale, layer_id_override=local)


class PaskAllocator(TokenToKVPoolAllocator):
    """Full ids (this allocator's own free list) plus one slot allocator per unit."""

    def __init__(self, full_size: int, kvcache: PaskKVPool, device: str, dtype: torch.dtype):
        self.pool = kvcache
        #: bumped whenever a live full id may lose unit slots (free, drop, clear): what the radix
        #: cache's per-node slot counts are memoized against (alloc only maps ids no node holds)
        self.mapping_generation = 0
        self.units = [TokenToKVPoolAllocator(size, dtype=dtype, device=device, kvcache=p, need_sort=False)
                      for size, p in zip(kvcache.unit_sizes, kvcache.pools)]
        super().__init__(full_size, dtype=dtype, device=device, kvcache=kvcache, need_sort=False)
        self.dropped_total = 0  # unit slots freed by drops since start (a counter for tests)

    def clear(self):
        self.mapping_generation += 1
        super().clear()
        for a in self.units:
            a.clear()
        self.pool.mapping.zero_()

    # -- capacity ------------------------------------------------------------------------------
    def full_available_size(self) -> int:
        return super().available_size()

    def unit_available_sizes(self) -> list[int]:
        return [a.available_size() for a in self.units]

    def available_size(self):
        """What the scheduler may still place: a new token needs a full id and a slot in every
        unit, so the tightest of them."""
        return min(self.full_available_size(), *self.unit_available_sizes())

    @property
    def capacity(self) -> int:
        """``available_size()`` at idle: the scheduler's ``max_total_num_tokens``."""
        return min(self.size, *self.pool.unit_sizes)

    # -- alloc / free / drop ---------------------------------------------------------------------
    def alloc(self, need_size: int):
        if need_size > self.available_size():
            return None
        full = super().alloc(need_size)
        if full is None:
            return None
        for u, a in enumerate(self.units):
            slots = a.alloc(need_size)
            assert slots is not None, "unit pool smaller than available_size() said"
            self.pool.mapping[u, full] = slots
        return full

    def free(self, free_index: torch.Tensor):
        if free_index.numel() == 0:
            return
        if self.free_group is not None:
            self.free_group.append(self._copy_for_free_group(free_index))
            return
        idx = free_index.long()
        self.mapping_generation += 1
        for u, a in enumerate(self.units):
            slots = self.pool.mapping[u, idx]
            held = slots[slots > 0]
            if held.numel():
                a.free(held)
            self.pool.mapping[u, idx] = 0
        super().free(free_index)

    def drop(self, unit: int, full_ids: torch.Tensor) -> int:
        """Free the slots of ``full_ids`` in ``unit`` (already-dropped ids are skipped); the full
        ids stay live. Returns how many slots were freed."""
        if full_ids.numel() == 0:
            return 0
        slots = ops.take_slots(self.pool.mapping, unit, full_ids)  # held slots; their mapping now 0
        n = int(slots.numel())
        if n:
            self.mapping_generation += 1
            self.units[unit].free(slots)
            self.dropped_total += n
        return n

    # -- accounting ------------------------------------------------------------------------------
    def unit_slots_in_use(self) -> list[int]:
        return [size - a.available_size() for size, a in zip(self.pool.unit_sizes, self.units)]

    def kv_bytes_in_use(self) -> int:
        return self.pool.kv_bytes(self.unit_slots_in_use())

    def stats(self) -> dict:
        """JSON-ready counters (``/server_info`` -> ``internal_states[0]["pask"]["pools"]``)."""
        return {
            "full_size": int(self.size), "full_available": int(self.full_available_size()),
            "unit_sizes": [int(n) for n in self.pool.unit_sizes], "units": [list(u) for u in self.pool.units],
            "unit_available": [int(x) for x in self.unit_available_sizes()],
            "kv_bytes_capacity": int(self.pool.kv_bytes_capacity()),
            "kv_bytes_in_use": int(self.kv_bytes_in_use()),
            "index_bytes": int(self.pool.index_bytes()),
            "bytes_per_token_layer": int(self.pool.bytes_per_token_layer()),
            "dropped_total": int(self.dropped_total),
        }

    def debug_print(self) -> str:
        return (f"#pask-full-available: {self.full_available_size()}, "
                f"#pask-unit-available: {self.unit_available_sizes()}")


def unit_size_for(full_size: int, budget: float) -> int:
    """Slots per unit for a server started with ``--max-total-tokens full_size`` at budget ``b``:
    ``ceil(b * full_size)`` (about b x N tokens per unit)."""
    import math

    return max(1, int(math.ceil(budget * full_size - 1e-9)))


def unit_sizes_for(full_size: int, budget: float, units: Sequence[Sequence[int]],
                   share: Optional[Sequence[float]] = None, prompt_tokens: Optional[float] = None,
                   output_tokens: float = 0.0) -> list[int]:
    """Slots of each unit's pool for ``--max-total-tokens full_size`` at budget ``b``.

    Without ``share``: :func:`unit_size_for` each (b x N). With ``share`` (per unit, what it holds of
    a prompt: the policy's measured ``pools.share`` of the unit's group), the same slot-layers
    ``T = unit_size_for(full_size, b) x layers``, each rounded down (never more KV bytes than b x N
    each), split so that every unit fills at the same count of running requests: a request of
    ``P = prompt_tokens`` prompt and ``O = output_tokens`` output tokens holds ``share[u] * P + O``
    slots of unit ``u`` once compressed (output tokens are held by every unit alike under the
    ``prefill`` schedule), and a new prompt needs ``P`` free slots in every unit before its
    compression. So ``size[u] = P + R * (share[u] * P + O)`` with ``R`` the requests that fill
    ``T``. Without ``prompt_tokens``: ``size[u]`` in proportion to ``share[u]``. When the equal
    pools cannot hold one such request beside the next prompt (``R < 1``: a server smaller than
    its workload, where prompts are chunked or refused by the pool's size): b x N each, the
    largest pool every unit can have."""
    base = unit_size_for(full_size, budget)
    if share is None:
        return [base] * len(units)
    if len(share) != len(units) or not all(s > 0 for s in share):
        raise ValueError(f"pool shares {list(share)} for {len(units)} unit(s): one share > 0 per unit")
    layers = [len(u) for u in units]
    total = base * sum(layers)
    held = [s * prompt_tokens + output_tokens for s in share] if prompt_tokens else list(share)
    weight = sum(h * n for h, n in zip(held, layers))
    if not prompt_tokens:
        return [max(1, int(total * h / weight)) for h in held]
    requests = (total - prompt_tokens * sum(layers)) / weight
    if requests < 1:
        return [base] * len(units)
    return [max(1, int(prompt_tokens + requests * h)) for h in held]
