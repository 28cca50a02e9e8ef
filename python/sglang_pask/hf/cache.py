"""A per-layer prunable KV cache for transformers models that stores logical positions.

Each layer holds its own post-RoPE keys/values ``[1, kv_heads, n_l, head_dim]`` and the logical
position of every stored slot (``positions``: int64 ``[n_l]``, strictly increasing). Layers may
hold different positions. Invariants:

* ``get_seq_length()`` is the *logical* length (tokens ever written), never the physical one, so
  transformers' default position ids and ``generate`` continuation stay correct;
* slot ``i`` of ``keys``/``values``/``stats`` is the token at logical position ``positions[i]``;
* :meth:`PrunableCache.keep` rebuilds smaller tensors (new storage, no views of the old one), so a
  drop really frees memory; survivors keep their RoPE rotation and their positions.

Attention statistics (for H2O / SnapKV) live next to the slots they describe and are pruned with
them: ``accumulated`` float32 ``[n_l]`` (attention mass each slot has received, summed over heads
and all queries), ``window_rows`` float32 ``[w', n_l]`` (per-query attention of the last
``w' <= window_size`` queries, summed over heads; columns of keys newer than a query are 0),
``window_head_rows`` float32 ``[kv_heads, w', n_l]`` (the same per KV head, summed over the query
heads of its group; stats kind ``window_heads``). Stats kind ``expected_heads`` (Expected
Attention) records the queries instead, per layer and not per slot (never pruned): ``q_count``
(queries at logical positions ``>= query_skip``), ``q_sum`` float64 ``[heads, head_dim]`` and
``q_outer`` float64 ``[heads, head_dim, head_dim]``, their pre-RoPE sum and sum of outer
products (un-rotated with ``PrunableCache.rotary``, the model's rotary embedding). Stats kind
``kvzip_heads`` (KVzip) keeps the token ids written (``PrunableCache.token_ids``, by logical
position); KVzip's scoring forward runs on a copy with ``reconstruct = (a, b, sinks, new)`` set:
queries at positions ``>= new`` see only keys at positions ``< sinks``, in ``[a, b)`` or ``>=
new``, and each layer folds into ``kvzip_max`` float32 ``[kv_heads, n_l]`` the most attention
any query of a KV group pays each slot. Stats kind ``learned_heads`` (KVzap, the learned scorer)
keeps each layer's attention input per logical position (``PrunableCache.layer_inputs[l]`` float32
``[T, hidden]``, written by forward hooks on ``input_layernorm`` during the forwards that wrote the
slots, :mod:`.learned`; never pruned, like ``token_ids``): the scorer maps the held ones to scores
at a compression.

Per-KV-head selection (SnapKV ``per_head``): a layer physically holds the union of its heads'
kept positions and ``head_mask`` bool ``[kv_heads, n_l]`` (None: every head holds every slot)
says which slots each KV head still holds; the ``pask`` attention function hides the others
from that head's query heads. New slots are held by every head; the mask is pruned with the
slots. Memory is counted per head: :meth:`PrunableCache.token_head_slots` (held token-head
slots) and :meth:`PrunableCache.kv_bytes` (the physical K/V bytes times each layer's held
share), :meth:`PrunableCache.physical_kv_bytes` the storage itself.
"""

from __future__ import annotations

import copy

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

STATS_KINDS = (None, "accumulated", "window", "window_heads", "expected_heads", "kvzip_heads", "learned_heads")


class PrunableLayer(CacheLayerMixin):
    is_sliding = False
    is_croppable = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cumulative_length = 0
        self.positions = torch.empty(0, dtype=torch.long)
        self.accumulated: torch.Tensor | None = None
        self.window_rows: torch.Tensor | None = None
        self.window_head_rows: torch.Tensor | None = None
        self.head_mask: torch.Tensor | None = None
        self.q_count = 0
        self.q_sum: torch.Tensor | None = None
        self.q_outer: torch.Tensor | None = None
        self.kvzip_max: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        shape = (*key_states.shape[:2], 0, key_states.shape[-1])
        self.keys = key_states.new_empty(shape)
        self.values = value_states.new_empty((*value_states.shape[:2], 0, value_states.shape[-1]))
        self.positions = torch.empty(0, dtype=torch.long, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append ``n`` new slots (key_states ``[1, kv_heads, n, head_dim]``) at logical
        positions ``cumulative_length .. cumulative_length + n - 1``; returns all stored K/V."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        new = torch.arange(self.cumulative_length, self.cumulative_length + n, device=self.device)
        self.positions = torch.cat([self.positions, new])
        self.cumulative_length += n
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        if self.head_mask is not None:  # new slots: every head holds them
            self.head_mask = torch.cat([self.head_mask, self.head_mask.new_ones(self.head_mask.shape[0], n)], 1)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # Only used by transformers' own mask builders (not by the "pask" attention function):
        # retained slots look like the contiguous window just before the new tokens.
        q = query_length if isinstance(query_length, int) else query_length.shape[0]
        phys = self.physical_length()
        return phys + q, self.cumulative_length - phys

    def physical_length(self) -> int:
        return 0 if not self.is_initialized else self.keys.shape[-2]

    def keep(self, idx: torch.Tensor) -> None:
        """Keep slots ``idx`` (int64, sorted, unique, into the current slots); rebuild tensors."""
        self.keys = self.keys.index_select(-2, idx).contiguous()
        self.values = self.values.index_select(-2, idx).contiguous()
        self.positions = self.positions.index_select(0, idx).clone()
        if self.accumulated is not None:
            self.accumulated = self.accumulated.index_select(0, idx).clone()
        if self.window_rows is not None:
            self.window_rows = self.window_rows.index_select(1, idx).contiguous()
        if self.window_head_rows is not None:
            self.window_head_rows = self.window_head_rows.index_select(2, idx).contiguous()
        if self.head_mask is not None:
            self.head_mask = self.head_mask.index_select(1, idx).contiguous()

    def clone(self) -> "PrunableLayer":
        """An independent copy: every attribute copied, each tensor (keys, values, positions, the
        attention statistics, the head mask) cloned into new storage with the same shape and
        values; plain fields (written length, device, initialised) copied. K/V own their storage
        exactly (``update``/``keep`` build them by cat/index_select), so the clone's
        :meth:`PrunableCache.kv_bytes` agrees. Nothing is shared: either copy may grow or be
        pruned alone."""
        new = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, torch.Tensor):
                setattr(new, name, value.clone())
        return new

    def token_head_slots(self) -> int:
        """Slots held summed over KV heads (``kv_heads * n_l`` without a head mask)."""
        if not self.is_initialized:
            return 0
        if self.head_mask is not None:
            return int(self.head_mask.sum())
        return int(self.keys.shape[1] * self.keys.shape[-2])

    def reset(self) -> None:
        self.keys = self.values = None
        self.is_initialized = False
        self.cumulative_length = 0
        self.positions = torch.empty(0, dtype=torch.long)
        self.accumulated = self.window_rows = self.window_head_rows = self.head_mask = None
        self.q_count, self.q_sum, self.q_outer, self.kvzip_max = 0, None, None, None


class PrunableCache(Cache):
    """One :class:`PrunableLayer` per model layer. ``stats`` selects which attention statistic
    the ``pask`` attention function records (one of :data:`STATS_KINDS`); ``window_size`` is the
    number of latest queries the window statistic covers; ``query_skip`` how many first positions
    the query statistics leave out and ``rotary`` the model's rotary embedding (``expected_heads``)."""

    def __init__(self, num_layers: int, stats: str | None = None, window_size: int = 0,
                 query_skip: int = 0, rotary=None):
        if stats not in STATS_KINDS:
            raise ValueError(f"stats must be one of {STATS_KINDS}, got {stats!r}")
        if stats in ("window", "window_heads") and window_size < 1:
            raise ValueError("the window statistic needs window_size >= 1")
        if stats == "expected_heads" and rotary is None:
            raise ValueError("the query statistics need the model's rotary embedding")
        super().__init__(layers=[PrunableLayer() for _ in range(num_layers)])
        self.stats = stats
        self.window_size = int(window_size)
        self.query_skip = int(query_skip)
        self.rotary = rotary
        self.token_ids: list[int] = []  # kvzip_heads: the token written at each logical position
        self.reconstruct: tuple[int, int, int, int] | None = None  # KVzip's scoring forward only
        #: learned_heads: per layer float32 [T, hidden], the attention input at each logical position
        self.layer_inputs: list[torch.Tensor] = []

    def clone(self) -> "PrunableCache":
        """An independent copy of the whole cache: the statistics kind and window size, and per
        layer :meth:`PrunableLayer.clone` (K/V slots, logical positions, written length,
        accumulated / window statistics, head mask). Continuing either copy gives what continuing
        the original would have given (a shared prefill, :mod:`sglang_pask.hf.shared`)."""
        new = copy.copy(self)
        new.layers = [lay.clone() for lay in self.layers]
        new.token_ids = list(self.token_ids)
        new.layer_inputs = [t.clone() for t in self.layer_inputs]
        return new

    def positions(self, layer: int) -> torch.Tensor:
        """int64 ``[n_l]``: the logical positions layer ``layer`` holds, ascending."""
        return self.layers[layer].positions

    def keep(self, layer: int, positions, head_mask=None) -> None:
        """Keep exactly the logical ``positions`` (a subset of what the layer holds) in ``layer``.
        ``head_mask``: None (each head keeps what it held of ``positions``) or bool
        ``[kv_heads, len(positions)]``, which of them each KV head keeps (a subset of what it
        held; every position kept by some head)."""
        lay = self.layers[layer]
        pos = torch.as_tensor(positions, dtype=torch.long, device=lay.positions.device)
        idx = torch.searchsorted(lay.positions, pos)
        if len(pos) and (idx.max() >= len(lay.positions) or not torch.equal(lay.positions[idx], pos)):
            raise ValueError(f"layer {layer}: keep() got positions the layer does not hold")
        if len(pos) > 1 and not bool((pos[1:] > pos[:-1]).all()):
            raise ValueError(f"layer {layer}: keep() positions must be sorted and unique")
        m = None
        if head_mask is not None:  # checked before anything changes
            m = torch.as_tensor(head_mask, dtype=torch.bool, device=lay.positions.device)
            if m.dim() != 2 or m.shape != (lay.keys.shape[1], len(pos)):
                raise ValueError(f"layer {layer}: head_mask must be [{lay.keys.shape[1]}, {len(pos)}], "
                                 f"got {tuple(m.shape)}")
            if len(pos) and not bool(m.any(0).all()):
                raise ValueError(f"layer {layer}: head_mask leaves a kept position with no head")
            if lay.head_mask is not None and bool((m & ~lay.head_mask[:, idx]).any()):
                raise ValueError(f"layer {layer}: head_mask gives a head a position it dropped")
        if len(pos) != len(lay.positions):
            lay.keep(idx)
        if m is not None:
            lay.head_mask = None if bool(m.all()) else m.clone()

    def head_mask(self, layer: int) -> torch.Tensor | None:
        """bool ``[kv_heads, n_l]`` (which slots each KV head holds) or None (all of them)."""
        return self.layers[layer].head_mask

    def token_head_slots(self) -> int:
        """Held token-head slots: sum over layers and KV heads of the positions each holds."""
        return sum(lay.token_head_slots() for lay in self.layers)

    @property
    def num_kv_heads(self) -> int:
        lay = next((lay for lay in self.layers if lay.is_initialized), None)
        return 0 if lay is None else int(lay.keys.shape[1])

    def physical_lengths(self) -> list[int]:
        return [lay.physical_length() for lay in self.layers]

    def physical_kv_bytes(self) -> int:
        """Bytes of the K/V tensors' storage, all layers (what this reference cache allocates)."""
        return sum(t.untyped_storage().nbytes() for lay in self.layers if lay.is_initialized
                   for t in (lay.keys, lay.values))

    def kv_bytes(self) -> int:
        """Bytes of K/V held, counted per head: each layer's physical bytes times its held share
        ``token_head_slots / (kv_heads * n_l)`` (exact: a whole number of head slots). Without
        head masks this is :meth:`physical_kv_bytes` (what a drop frees)."""
        total = 0
        for lay in self.layers:
            if not lay.is_initialized:
                continue
            full = lay.keys.shape[1] * lay.keys.shape[-2]
            for t in (lay.keys, lay.values):
                nbytes = t.untyped_storage().nbytes()
                total += nbytes if lay.head_mask is None or full == 0 else nbytes * lay.token_head_slots() // full
        return total
