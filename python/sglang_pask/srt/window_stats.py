"""Attention statistics in the server, as the reference runner records them
(``hf/attention.py`` ``_record``), for the methods whose ``needs_attention`` is ``"window"``
(SnapKV and PyramidKV per layer, PASK with ``attention_blend > 0``) or ``"accumulated"`` (H2O).

The torch attention backend (:mod:`.attention`) hands every forward's queries to
:meth:`Recorder.record` (extend and decode alike); :mod:`.persist` reads a request's statistics
with :meth:`Recorder.stats` when it builds the request's view (and retires them after step 0 under
the ``prefill`` schedule); :func:`forget` drops them when the request's KV is released. The
FlashInfer backend records nothing: the server refuses such a method there.

State per request-pool row, per layer, over LOGICAL positions ``[0, P)`` (P: the positions seen so
far; zero where a key was not held when a query ran, so indexing by the positions a layer holds
gives the runner's values, whose columns are the held keys):

* ``window``: float32 ``[q, P]``, one row per kept query -- the newest ``window_size`` -- each the
  attention it paid to every position, summed over all query heads;
* ``accumulated``: float32 ``[P]``, the same summed over every query so far.

A forward whose first query position is not the row's next one (a new request in a reused row, a
retracted one) starts the row afresh. Scores are computed as the runner computes them: ``q k^T *
scale`` in the model's dtype, masked by logical position (``key <= query``), softmax in float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from sglang_pask.methods.base import AttentionStats, window_size

#: the statistics kinds the server records (others -- per KV head, expected, KVzip -- it refuses)
KINDS = ("window", "accumulated")
#: queries scored at a time (the runner's chunk, hf/attention.py)
CHUNK = 256


@dataclass
class _Row:
    next_pos: int = 0
    #: False once nothing will read this request's statistics again (:meth:`Recorder.retire`)
    active: bool = True
    #: layer id -> float32 [q, P] (window) or [P] (accumulated)
    layers: dict = field(default_factory=dict)


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    return t if t.shape[-1] >= width else F.pad(t, (0, width - t.shape[-1]))


class Recorder:
    """One per scheduler process (:data:`RECORDER`, set up by the attention backend when the
    serving method needs statistics). ``kind``: ``"window"`` or ``"accumulated"``."""

    def __init__(self, kind: str, size: int = 0):
        if kind not in KINDS:
            raise ValueError(f"the server records attention statistics {', '.join(KINDS)}; not {kind!r}")
        self.kind, self.size = kind, int(size)
        self.rows: dict[int, _Row] = {}

    def begin(self, row: int, first: int, end: int) -> None:
        """A forward of request row ``row`` runs queries at logical positions ``first ..< end``
        (called once per forward, before any layer records): a row whose next position is not
        ``first`` -- a new request in a reused row, a retracted one -- starts afresh."""
        state = self.rows.get(row)
        if state is None or state.next_pos != first:
            state = self.rows[row] = _Row()
        state.next_pos = end

    def recording(self, rows) -> bool:
        """Whether :meth:`record` would keep anything for any of ``rows`` (after :meth:`begin`)."""
        return any(state is None or state.active for state in map(self.rows.get, rows))

    def record(self, row: int, layer: int, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor,
               k_pos: torch.Tensor, scaling: float) -> None:
        """Fold one request's queries at one layer into its statistics. ``q [heads, nq, d]`` at
        logical positions ``q_pos [nq]`` (consecutive); ``k [kv_heads, nk, d]`` the held keys at
        ``k_pos [nk]`` (sorted; this forward's own keys included)."""
        state = self.rows.get(row)  # every layer of every forward: no tensor read before this check
        if state is None:
            state = self.rows[row] = _Row(next_pos=int(q_pos[-1]) + 1)
        elif not state.active:
            return
        if self.kind == "window" and q.shape[1] > self.size:  # only the newest `size` queries count
            q, q_pos = q[:, -self.size:], q_pos[-self.size:]
        hq, hkv = q.shape[0], k.shape[0]
        kk = k.repeat_interleave(hq // hkv, dim=0) if hq != hkv else k
        rows = []
        for s in range(0, q.shape[1], CHUNK):  # [heads, CHUNK, nk] at a time: a long prefill's
            qc, pc = q[:, s:s + CHUNK], q_pos[s:s + CHUNK]  # whole score matrix never exists at once
            scores = torch.matmul(qc, kk.transpose(-1, -2)) * scaling  # [heads, c, nk]
            scores = scores.masked_fill(k_pos[None, None, :] > pc[None, :, None], float("-inf"))
            rows.append(torch.softmax(scores.float(), dim=-1).sum(0))  # [c, nk], summed over query heads
        probs = torch.cat(rows)  # [nq, nk]
        width = int(q_pos[-1]) + 1
        dense = probs.new_zeros(probs.shape[0], width)
        dense[:, k_pos.long()] = probs
        old = state.layers.get(layer)
        if self.kind == "window":
            old = dense.new_zeros(0, width) if old is None else _pad(old, width)
            state.layers[layer] = torch.cat([old, dense])[-self.size:].contiguous()
        else:
            old = dense.new_zeros(width) if old is None else _pad(old, width)
            state.layers[layer] = old + dense.sum(0)

    def stats(self, row: int, retained: list[np.ndarray]) -> AttentionStats:
        """The row's statistics aligned with ``retained[l]`` (each layer's held positions), as the
        runner's ``_stats`` gives them: ``window[l]`` summed over the kept queries, or
        ``accumulated[l]``. A layer with no record gets zeros."""
        state = self.rows.get(row)
        arrays = []
        for layer, pos in enumerate(retained):
            t = None if state is None else state.layers.get(layer)
            if t is None:
                arrays.append(np.zeros(len(pos), np.float32))
                continue
            v = t.sum(0) if self.kind == "window" else t
            v = _pad(v, int(pos.max()) + 1 if len(pos) else 0)
            arrays.append(v[torch.from_numpy(np.asarray(pos, dtype=np.int64))].cpu().numpy())
        if self.kind == "window":
            return AttentionStats(window=arrays, window_size=self.size)
        return AttentionStats(accumulated=arrays)

    def retire(self, row: int) -> None:
        """Nothing reads this request's statistics again (the ``prefill`` schedule after step 0):
        its record is dropped and its later forwards are not recorded (a new request in the row,
        seen by :meth:`begin`, is)."""
        state = self.rows.get(row)
        if state is not None:
            state.active, state.layers = False, {}

    def forget(self, row: int) -> None:
        """The request's KV was released: its record goes."""
        self.rows.pop(row, None)


#: this process's recorder (None: the serving method needs no statistics)
RECORDER: Optional[Recorder] = None


def setup(method) -> Optional[Recorder]:
    """The recorder ``method`` needs (None: it needs none); raises ValueError naming a kind the
    server does not record."""
    global RECORDER
    kind = method.needs_attention
    if kind is None:
        RECORDER = None
    else:
        RECORDER = Recorder(kind, window_size(method) if kind == "window" else 0)
    return RECORDER


def forget(row: Optional[int]) -> None:
    if RECORDER is not None and row is not None:
        RECORDER.forget(int(row))
