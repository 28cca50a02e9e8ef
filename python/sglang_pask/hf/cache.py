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
``w' <= window_size`` queries, summed over heads; columns of keys newer than a query are 0).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

STATS_KINDS = (None, "accumulated", "window")


class PrunableLayer(CacheLayerMixin):
    is_sliding = False
    is_croppable = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cumulative_length = 0
        self.positions = torch.empty(0, dtype=torch.long)
        self.accumulated: torch.Tensor | None = None
        self.window_rows: torch.Tensor | None = None

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

    def reset(self) -> None:
        self.keys = self.values = None
        self.is_initialized = False
        self.cumulative_length = 0
        self.positions = torch.empty(0, dtype=torch.long)
        self.accumulated = self.window_rows = None


class PrunableCache(Cache):
    """One :class:`PrunableLayer` per model layer. ``stats`` selects which attention statistic
    the ``pask`` attention function records (None, "accumulated" or "window");
    ``window_size`` is the number of latest queries the window statistic covers."""

    def __init__(self, num_layers: int, stats: str | None = None, window_size: int = 0):
        if stats not in STATS_KINDS:
            raise ValueError(f"stats must be one of {STATS_KINDS}, got {stats!r}")
        if stats == "window" and window_size < 1:
            raise ValueError("the window statistic needs window_size >= 1")
        super().__init__(layers=[PrunableLayer() for _ in range(num_layers)])
        self.stats = stats
        self.window_size = int(window_size)

    def positions(self, layer: int) -> torch.Tensor:
        """int64 ``[n_l]``: the logical positions layer ``layer`` holds, ascending."""
        return self.layers[layer].positions

    def keep(self, layer: int, positions) -> None:
        """Keep exactly the logical ``positions`` (a subset of what the layer holds) in ``layer``."""
        lay = self.layers[layer]
        pos = torch.as_tensor(positions, dtype=torch.long, device=lay.positions.device)
        idx = torch.searchsorted(lay.positions, pos)
        if len(pos) and (idx.max() >= len(lay.positions) or not torch.equal(lay.positions[idx], pos)):
            raise ValueError(f"layer {layer}: keep() got positions the layer does not hold")
        if len(pos) > 1 and not bool((pos[1:] > pos[:-1]).all()):
            raise ValueError(f"layer {layer}: keep() positions must be sorted and unique")
        if len(pos) != len(lay.positions):
            lay.keep(idx)

    def physical_lengths(self) -> list[int]:
        return [lay.physical_length() for lay in self.layers]

    def kv_bytes(self) -> int:
        """Bytes held by the K/V tensors of all layers (what a drop frees)."""
        return sum(t.untyped_storage().nbytes() for lay in self.layers if lay.is_initialized
                   for t in (lay.keys, lay.values))
