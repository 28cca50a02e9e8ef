"""A bounded memo of prompt forwards: the same prompt, run again under another KV method, starts
from a copy of the cache its first forward wrote instead of running the model over it again.

Calibration scores one set of entries under many methods (the sensitivity probes: one per (group,
class); every member of the family search), always with the whole prompt prefilled under full
attention before anything is dropped (no segment rule). On a real model on CPU that forward is most
of the cost; the memo makes it once per (prompt, cache kind).

Key: the prompt's token ids and the runner's :meth:`~.runner.Runner.cache_spec` (what the cache
records during the forward: the attention-statistics kind and its window). A runner with an
active segment rule never uses it (its forward compresses the segment inside). Values are
:class:`~.runner.Prompted` forwards that are never decoded: each hit gets a
:meth:`~.runner.Prompted.copy`.

Invariant: a hit gives exactly what a fresh forward would (the same computation on the same model
and inputs; the copy is bitwise), so results with and without the memo are identical; only
timings differ (``prefill_shared``). Bounded by ``max_bytes`` of cache tensors (least recently
used first out); an entry larger than the bound is not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional

import torch

__all__ = ["PrefillMemo"]


def _bytes(prompted) -> int:
    """Bytes of every tensor the memo keeps for one forward (cache layers, the learned scorer's
    attention inputs, logits)."""
    total = prompted.logits.numel() * prompted.logits.element_size()
    total += sum(t.numel() * t.element_size() for t in prompted.cache.layer_inputs)
    for lay in prompted.cache.layers:
        total += sum(v.numel() * v.element_size() for v in vars(lay).values() if isinstance(v, torch.Tensor))
    return total


class PrefillMemo:
    """LRU of prompt forwards, at most ``max_bytes`` of tensors; counts hits and misses."""

    def __init__(self, max_bytes: int):
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._items: OrderedDict = OrderedDict()  # key -> (Prompted, bytes)
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.forward_s = 0.0  # seconds of the forwards put here (rendering included)

    @staticmethod
    def key(token_ids, cache_spec) -> tuple:
        return (tuple(int(t) for t in token_ids), tuple(cache_spec))

    def get(self, key) -> Optional[object]:
        """A private copy of the forward stored under ``key``, or None (counted as a miss)."""
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return item[0].copy()

    def put(self, key, prompted) -> None:
        """Keep a copy of ``prompted`` (its cache not yet compressed), evicting the least recently
        used forwards until it fits; one larger than ``max_bytes`` is not kept."""
        self.forward_s += prompted.seconds
        size = _bytes(prompted)
        if size > self.max_bytes or key in self._items:
            return
        while self.bytes + size > self.max_bytes:
            _, (_, old) = self._items.popitem(last=False)
            self.bytes -= old
        self._items[key] = (prompted.copy(), size)
        self.bytes += size

    def __len__(self) -> int:
        return len(self._items)

    def stats(self) -> dict:
        return {"entries": len(self), "bytes": self.bytes, "max_bytes": self.max_bytes,
                "hits": self.hits, "misses": self.misses, "forward_s": round(self.forward_s, 2)}
