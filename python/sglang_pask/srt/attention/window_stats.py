"""Attention statistics in the server, as the reference runner records them
(``hf/attention.py`` ``_record``), for the methods whose ``needs_attention`` is ``"window"``
(SnapKV and PyramidKV per layer, PASK with a ``window`` residual scorer), ``"window_heads"`` (SnapKV
and PyramidKV per KV head, AdaKV, PASK's ``per_head`` scorer) or ``"accumulated"`` (H2O).

The torch attention backend (:mod:`.torch_native_backend`) hands every forward's queries to
:meth:`Recorder.record` (extend and decode alike); :mod:`..managers.persist` reads a request's statistics
with :meth:`Recorder.stats` when it builds the request's view (and retires them after step 0 under
the ``prefill`` schedule); :func:`forget` drops them when the request's KV is released. The
FlashInfer backend (:mod:`.flashinfer_backend`) hands over the same queries and held keys after
each layer's kernels (it refuses per-KV-head selections, whose masks its kernels cannot apply).

State per request-pool row, per layer, over LOGICAL positions ``[0, P)`` (P: the positions seen so
far; zero where a key was not held when a query ran, so indexing by the positions a layer holds
gives the runner's values, whose columns are the held keys):

* ``window``: float32 ``[q, P]``, one row per kept query -- the newest ``window_size`` -- each the
  attention it paid to every position, summed over all query heads;
* ``window_heads``: float32 ``[kv_heads, q, P]``, the same summed over the query heads of each KV
  head's group (query head ``i`` reads KV head ``i // (heads / kv_heads)``);
* ``accumulated``: float32 ``[P]``, the same summed over every query so far.

A forward whose first query position is not the row's next one (a new request in a reused row, a
retracted one) starts the row afresh. Scores are computed as the runner computes them: ``q k^T *
scale`` in the model's dtype, masked by logical position (``key <= query``), softmax in float32.
Where a per-head selection hid positions from a KV head (:mod:`.head_masks`), ``allow`` masks them
for that head's query heads, as the runner's ``head_mask`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from sglang_pask.methods.base import AttentionStats, window_size
from sglang_pask.srt.state import state

#: the statistics kinds the recorder keeps
KINDS = ("window", "window_heads", "accumulated")
#: the kinds the server computes: the recorder's, KVzip's scores from a reconstruction forward
#: (:mod:`.reconstruct`, torch backend) and the learned scorer's predictions from the attention
#: input of the forwards that run (:mod:`.learned_scores`); Expected Attention's it refuses
SERVED_KINDS = (*KINDS, "kvzip_heads", "learned_heads")
#: the kinds that keep the newest ``window_size`` queries
WINDOWED = ("window", "window_heads")
#: queries scored at a time (the runner's chunk, hf/attention.py)
CHUNK = 256


@dataclass
class _Row:
    next_pos: int = 0
    #: False once nothing will read this request's statistics again (:meth:`Recorder.retire`)
    active: bool = True
    #: layer id -> float32 [q, P] (window), [kv_heads, q, P] (window_heads) or [P] (accumulated)
    layers: dict = field(default_factory=dict)


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    return t if t.shape[-1] >= width else F.pad(t, (0, width - t.shape[-1]))


class Recorder:
    """One per scheduler process (:attr:`~..state.PaskState.recorder`, set up by the attention backend when the
    serving method needs statistics). ``kind``: one of :data:`KINDS`; ``size``: the window's queries
    (windowed kinds); ``kv_heads``: the rows of a ``window_heads`` layer with no record yet."""

    def __init__(self, kind: str, size: int = 0, kv_heads: int = 1):
        if kind not in KINDS:
            raise ValueError(f"the server records attention statistics {', '.join(KINDS)}; not {kind!r}")
        self.kind, self.size, self.kv_heads = kind, int(size), int(kv_heads)
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
               k_pos: torch.Tensor, scaling: float, allow: Optional[torch.Tensor] = None) -> None:
        """Fold one request's queries at one layer into its statistics. ``q [heads, nq, d]`` at
        logical positions ``q_pos [nq]`` (consecutive); ``k [kv_heads, nk, d]`` the held keys at
        ``k_pos [nk]`` (sorted; this forward's own keys included); ``allow``: None or bool
        ``[kv_heads, nk]``, which held keys each KV head still reads."""
        state = self.rows.get(row)  # every layer of every forward: no tensor read before this check
        if state is None:
            state = self.rows[row] = _Row(next_pos=int(q_pos[-1]) + 1)
        elif not state.active:
            return
        if self.kind in WINDOWED and q.shape[1] > self.size:  # only the newest `size` queries count
            q, q_pos = q[:, -self.size:], q_pos[-self.size:]
        hq, hkv = q.shape[0], k.shape[0]
        group = hq // hkv
        kk = k.repeat_interleave(group, dim=0) if hq != hkv else k
        hidden = None if allow is None else ~allow.repeat_interleave(group, dim=0)[:, None, :]  # [heads, 1, nk]
        rows = []
        for s in range(0, q.shape[1], CHUNK):  # [heads, CHUNK, nk] at a time: a long prefill's
            qc, pc = q[:, s:s + CHUNK], q_pos[s:s + CHUNK]  # whole score matrix never exists at once
            scores = torch.matmul(qc, kk.transpose(-1, -2)) * scaling  # [heads, c, nk]
            masked = k_pos[None, None, :] > pc[None, :, None]
            scores = scores.masked_fill(masked if hidden is None else masked | hidden, float("-inf"))
            probs = torch.softmax(scores.float(), dim=-1)  # [heads, c, nk]
            # [kv_heads, c, nk] summed over each KV head's query heads, or [c, nk] over all
            rows.append(probs.unflatten(0, (hkv, group)).sum(1) if self.kind == "window_heads" else probs.sum(0))
        probs = torch.cat(rows, dim=-2)  # [nq, nk] or [kv_heads, nq, nk]
        width = int(q_pos[-1]) + 1
        dense = probs.new_zeros(*probs.shape[:-1], width)
        dense[..., k_pos.long()] = probs
        old = state.layers.get(layer)
        if self.kind in WINDOWED:
            old = dense.new_zeros(*dense.shape[:-2], 0, width) if old is None else _pad(old, width)
            state.layers[layer] = torch.cat([old, dense], dim=-2)[..., -self.size:, :].contiguous()
        else:
            old = dense.new_zeros(width) if old is None else _pad(old, width)
            state.layers[layer] = old + dense.sum(0)

    def stats(self, row: int, retained: list[np.ndarray]) -> AttentionStats:
        """The row's statistics aligned with ``retained[l]`` (each layer's held positions), as the
        runner's ``_stats`` gives them: ``window[l]`` summed over the kept queries (and
        ``window_heads[l]`` ``[kv_heads, n]`` per KV head, ``window`` then their sum), or
        ``accumulated[l]``. A layer with no record gets zeros (``kv_heads`` rows: :attr:`kv_heads`)."""
        state = self.rows.get(row)
        arrays = []
        for layer, pos in enumerate(retained):
            t = None if state is None else state.layers.get(layer)
            if t is None:
                shape = (self.kv_heads, len(pos)) if self.kind == "window_heads" else (len(pos),)
                arrays.append(np.zeros(shape, np.float32))
                continue
            v = t.sum(-2) if self.kind in WINDOWED else t
            v = _pad(v, int(pos.max()) + 1 if len(pos) else 0)
            arrays.append(v[..., torch.from_numpy(np.asarray(pos, dtype=np.int64))].cpu().numpy())
        if self.kind == "window_heads":
            return AttentionStats(window=[a.sum(0) for a in arrays], window_heads=arrays, window_size=self.size)
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


def setup(method, kv_heads: int = 1) -> Optional[Recorder]:
    """The recorder ``method`` needs (None: it needs none); raises ValueError naming a kind the
    server does not record. ``kv_heads``: the model's KV heads (per-head statistics)."""
    kind = method.needs_attention
    st = state()
    st.recorder = None if kind is None else Recorder(kind, window_size(method) if kind in WINDOWED else 0, kv_heads)
    return st.recorder


def forget(row: Optional[int]) -> None:
    rec = state().recorder
    if rec is not None and row is not None:
        rec.forget(int(row))
