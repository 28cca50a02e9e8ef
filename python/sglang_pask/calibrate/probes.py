"""Probe methods for calibration (unregistered: they measure, they are never served).

Both compress once, at prefill end (decode step 0), and touch only the layers they name; every
other layer keeps all it holds (Full KV). The current step's token is always kept.

* :class:`DropClass`: the named layers drop every prompt token of one structural class
  (task-error sensitivity S[g][c], DESIGN.md §5).
* :class:`DropDelimiters`: the named layers keep every token of one class but drop the span
  delimiters next to it (``SCHEMA_PUNCT`` / ``OUT_DELIM`` tokens at distance 1: the quotes, colons
  and commas around a name), the interaction DESIGN.md §4 warns about.
* :class:`RecencyGroup`: the named layers keep the first ``sinks`` positions and the newest ones,
  ``floor(budget * P)`` in all (``P`` the prompt length): structure-agnostic compression of one
  group for the attention-output distortion D[g](b).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sglang_pask.methods.base import CacheView, KVMethod, Selection
from sglang_pask.methods.pask import DELIMITERS


@dataclass(frozen=True)
class _GroupProbe(KVMethod):
    """``layers``: the layers this probe compresses (the others keep everything)."""

    layers: tuple = ()
    schedule: str = "prefill"

    def due(self, decode_step: int, slots_held: int, seq_len: int, num_layers: int) -> bool:
        return decode_step == 0

    def keep(self, view: CacheView, held: np.ndarray) -> np.ndarray:
        """bool ``[len(held)]``: what a probed layer keeps (the current step is added after)."""
        raise NotImplementedError

    def _kept(self, view: CacheView) -> list[np.ndarray]:
        out = []
        for layer, held in enumerate(view.retained):
            if layer in self.layers:
                held = held[self.keep(view, held) | (held >= view.tail_start)]
            out.append(held.copy())
        return out

    def allocation(self, view: CacheView) -> np.ndarray:
        return np.array([k.size for k in self._kept(view)], dtype=np.int64)

    def select(self, view: CacheView) -> Selection:
        return Selection(self._kept(view), {"method": self.name})


@dataclass(frozen=True)
class DropClass(_GroupProbe):
    """Drop every held token of class ``cls`` (a StructClass int) in ``layers``."""

    name = "drop-class"
    cls: int = 0

    def keep(self, view: CacheView, held: np.ndarray) -> np.ndarray:
        return view.classes[held] != self.cls


@dataclass(frozen=True)
class DropDelimiters(_GroupProbe):
    """Drop the delimiter tokens adjacent to a token of class ``cls`` in ``layers``."""

    name = "drop-delimiters"
    cls: int = 0

    def keep(self, view: CacheView, held: np.ndarray) -> np.ndarray:
        of_c = np.flatnonzero(view.classes == self.cls)
        near = np.setdiff1d(np.union1d(of_c - 1, of_c + 1), of_c)
        delim = np.isin(view.classes[held], DELIMITERS) & np.isin(held, near)
        return ~delim


@dataclass(frozen=True)
class RecencyGroup(_GroupProbe):
    """Keep ``sinks`` + the newest positions, ``floor(budget * seq_len)`` in all, in ``layers``."""

    name = "recency-group"
    sinks: int = 4

    def keep(self, view: CacheView, held: np.ndarray) -> np.ndarray:
        n = int(np.floor(self.budget * view.seq_len + 1e-9))
        sink = held < self.sinks
        rest = np.flatnonzero(~sink)
        newest = np.zeros(held.size, dtype=bool)
        room = max(n - int(sink.sum()), 0)
        if room:
            newest[rest[-room:]] = True
        return sink | newest
