"""The chunked-prefill rule: a prompt too long to be written whole before it is compressed is
written chunk by chunk, and compressed at every chunk end (issue 27).

A prompt of ``P`` tokens with more than ``above`` tokens (``above = 0``: every prompt longer
than one chunk) is written in chunks of ``size`` tokens from position 0 (a shared segment rule
does not combine with it yet): the chunk ends are :meth:`ChunkRule.ends`, ``k*size`` for
``k >= 1`` below ``P``. After the KV of ``[0, e)`` is written, at each chunk end ``e``, the
method compresses the request as at prefill end (decode step 0, its due rule, protected tail 1)
with ``seq_len = e`` and the classes of ``[0, e)``, at the budget :meth:`ChunkRule.budget_at`
gives (the method's, or with a ``room`` only as far as the next chunk needs); the next chunk
attends to what was kept. After the last chunk the prompt's end is the ordinary prefill-end
compression. The ends and budgets are fixed by the rule and ``P`` alone, so an engine that
prefills in other pieces (SGLang's own chunked prefill, a scheduler that splits as memory allows)
must still end a piece at every chunk end and compress only there: the reference runner and the
server then hold the same positions after every chunk.

A prompt of at most ``above`` tokens, or ``size = 0``, is written whole: the calibrated rule.
The server sets ``above`` to the longest prompt its per-unit pools hold whole (so every prompt
it served before is served exactly as before) and refuses only prompts whose chunked peak does
not fit (:func:`chunked_need`). Methods that read attention statistics are refused (a chunk's
statistics would depend on how the engine splits the forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from sglang_pask.methods.base import CacheView, KVMethod

__all__ = ["ChunkRule", "MARGIN", "check_method", "chunked_need"]

#: unit slots a server keeps free beyond a chunked request's own need (SGLang's page + 1)
MARGIN = 2


@dataclass(frozen=True)
class ChunkRule:
    """``size``: tokens per chunk (0: prompts are written whole); ``above``: prompts of at most
    this many tokens are written whole; ``room``: the slots a request may hold per layer while it
    is prefilled (None: every chunk end compresses to the method's budget) -- a chunk end then
    compresses only as far as the next chunk needs (:meth:`budget_at`)."""

    size: int = 0
    above: int = 0
    room: Optional[int] = None

    def __post_init__(self):
        for name in ("size", "above", "room"):
            v = getattr(self, name)
            if name == "room" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"chunked prefill: {name} must be an integer >= 0, got {v!r}")
            object.__setattr__(self, name, int(v))
        if self.room is not None and self.size and self.room <= self.size:
            raise ValueError(f"chunked prefill: room {self.room} must exceed the chunk size {self.size}")

    @classmethod
    def for_pool(cls, capacity: int, context_len: int, size: Optional[int] = None) -> "ChunkRule":
        """The rule of a server whose unit pools hold ``capacity`` slots: prompts SGLang admits
        whole (fewer than ``min(context_len, capacity) - 6`` tokens) stay whole; longer ones in
        chunks of ``size`` (default a quarter of the pool) within a room of the pool less
        :data:`MARGIN`."""
        size = max(16, capacity // 4) if size is None else int(size)
        return cls(size=size, above=max(min(context_len, capacity) - 7, 0), room=max(int(capacity) - MARGIN, size + 1))

    def budget_at(self, end: int, budget: float) -> float:
        """The budget a chunk end ``end`` compresses to (1: none): the method's ``budget``, or with
        a ``room`` the larger ``(room - size) / end`` -- what leaves room for the next chunk --
        capped at 1. A prompt is then compressed mid-prefill only as far as it must be."""
        if self.room is None:
            return float(budget)
        return min(1.0, max(float(budget), (self.room - self.size) / max(int(end), 1)))

    @property
    def active(self) -> bool:
        return self.size > 0

    def applies(self, prompt_len: int) -> bool:
        """Whether a prompt of ``prompt_len`` tokens is written in chunks."""
        return self.active and prompt_len > max(self.above, 0)

    def ends(self, prompt_len: int, start: int = 0) -> list[int]:
        """The chunk ends ``start + k*size < prompt_len`` (``k >= 1``) where the request is
        compressed; [] when the rule does not apply."""
        if not self.applies(prompt_len):
            return []
        return list(range(int(start) + self.size, int(prompt_len), self.size))

    def next_end(self, prompt_len: int, start: int, written: int) -> Optional[int]:
        """The first chunk end after ``written`` (None: none before the prompt's end)."""
        return next((e for e in self.ends(prompt_len, start) if e > written), None)

    def record(self) -> dict:
        return {"size": self.size, "above": self.above, "room": self.room}

    def method_for(self, view: CacheView, method: KVMethod) -> Optional[KVMethod]:
        """``method`` at the budget chunk end ``view.seq_len`` compresses to (None: nothing is
        compressed there): :meth:`budget_at`; with a ``room``, lowered (never below the method's
        budget) until no layer keeps more than ``room - size`` (a method may give some layers
        more than the average), by bisection over the total slots of ``method.allocation``."""
        from sglang_pask.methods.segment import with_budget

        e, L = view.seq_len, view.num_layers
        b0 = self.budget_at(e, method.budget)
        if b0 >= 1.0:
            return None
        if self.room is None:
            return with_budget(method, b0)
        cap = self.room - self.size

        def at(total: int) -> KVMethod:  # floor(b * L * e) == total exactly
            return with_budget(method, min(1.0, (total + 1e-6) / (L * e)))

        def fits(total: int) -> bool:
            return int(np.max(at(total).allocation(view))) <= cap

        lo = int(np.floor(method.budget * L * e + 1e-9))
        hi = int(np.floor(b0 * L * e + 1e-9))
        if fits(hi):
            return at(hi)
        if not fits(lo):
            return method
        while hi - lo > 1:  # fits(lo), not fits(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return at(lo)


def check_method(method: KVMethod) -> None:
    """Raise ValueError when ``method`` cannot compress chunk by chunk."""
    if method.needs_attention is not None:
        raise ValueError(f"{method.name} reads attention statistics ({method.needs_attention}); the "
                         "chunked prefill rule supports methods that read none")
    if getattr(method, "per_head", False):
        raise ValueError(f"{method.name}: per_head selection does not support the chunked prefill rule")


def chunked_need(method: KVMethod, rule: ChunkRule, num_layers: int, groups: Sequence[Sequence[int]],
                 units: Sequence[Sequence[int]], classes: Sequence[int]) -> tuple[int, int]:
    """``(peak, after)``: the most slots any unit holds while the prompt (classes ``[P]``) is
    written under ``rule`` from position 0 with no shared segment -- at each chunk end, what the
    method kept of the previous chunks plus the new chunk -- and the most any unit holds after the
    prefill-end compression (what decoding starts from). Exact for methods that read no
    attention statistics (their selection is a function of the classes and what is held).
    ``units``: the engine's KV units (layers sharing one pool)."""
    P = len(classes)
    classes = np.asarray(classes, dtype=np.int64)
    held = [np.zeros(0, np.int64)] * num_layers
    peak, prev = 0, 0
    ends = rule.ends(P)
    for e in ends + [P]:
        held = [np.concatenate([h, np.arange(prev, e, dtype=np.int64)]) for h in held]
        peak = max(peak, max(len(held[u[0]]) for u in units))
        view = CacheView(num_layers=num_layers, groups=groups, seq_len=e, classes=classes[:e], retained=held,
                         protected_tail=1, prompt_len=P)
        m = method if e == P else rule.method_for(view, method)
        if m is not None and m.due(0, sum(len(h) for h in held), e, num_layers):
            held = [np.asarray(k, np.int64) for k in m.select(view).kept]
        prev = e
    return peak, max(len(held[u[0]]) for u in units)
