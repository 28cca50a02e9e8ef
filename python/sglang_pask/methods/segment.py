"""Segment compression: a shared prefix is compressed once as its own span (issue 13).

A request whose prompt starts with a segment ``[0, S)`` that other requests share (the system /
tools message: :attr:`sglang_pask.rendering.RenderedPrompt.segment_end`) is compressed in two
spans, by the same method:

* the **segment** ``[0, S)``, once, when its KV is complete: :func:`segment_kept` applies the
  method to the segment alone (its classes, its length, every position held, no protected tail)
  at the segment budget ``b_s`` (default: the method's budget ``b``). The result is a function of
  (segment classes, ``S``, method with its policy, ``b_s``, layer groups) only, so every request
  that shares the segment holds exactly the same positions of it, whichever request computed it,
  and however the radix tree holds it;
* the request's **own** tokens ``[S, T)``, at every compression point of the method's schedule:
  :func:`own_view` is the view of those positions alone, shifted to start at 0, and
  :func:`own_kept` maps the method's selection back. Segment positions are never touched, and
  they are counted in the request's budget (:func:`own_slots`): the own span may keep
  ``max(floor(b*L*(T - S)), floor(b*L*T) - segment slots)``, or, with an own budget ``b_o``
  (``--pask-own-budget``), ``floor(b_o*L*(T - S))`` (``b_o = 1``: the request's own tokens are
  never dropped; only the shared prefix is compressed). With ``b_s == b`` that is the
  proportional split (the segment ``b*S``, the own span ``b*(T - S)``: a cache holding one
  segment for R requests holds about ``b x`` (prefix + every own token)); with ``b_s < b`` what
  the segment does not keep goes to the request's own tokens, up to the request's whole budget
  ``b*T`` counting the segment.

What the own tokens are prefilled against (:data:`PREFILLS`): ``compressed`` (default): the
segment's kept positions only -- a request that hits the radix tree reuses the segment's KV and
computes only its own tokens; ``full``: the whole segment, then the segment is cut to the same
kept positions -- the own tokens' KV is then exactly what Full KV computes for them (the server
recomputes the segment for each request and shares its memory, not its prefill compute). The
kept segment positions are the same in both: they depend on the segment alone.

With ``S == 0`` (no shared segment) the own view is the whole view: the ordinary rule.
Engine-agnostic, like the rest of :mod:`sglang_pask.methods`; per-KV-head methods are refused
(their head masks do not split across spans).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from sglang_pask.methods.base import AttentionStats, CacheView, KVMethod
from sglang_pask.policy.operating_point import PREFILLS, SEGMENTS, SegmentRule

# The rule's options (segment, its budget, the own budget, the prefill mode) are one value,
# :class:`~sglang_pask.policy.operating_point.SegmentRule`, its only validator; this module applies
# it. SEGMENTS: where a shared segment ends (``system``: the end of the system/tools message,
# :attr:`~sglang_pask.rendering.RenderedPrompt.segment_end`); PREFILLS: what a request's own tokens
# are prefilled against (module docstring).
__all__ = ["PREFILLS", "SEGMENTS", "SegmentRule", "check_method", "own_budget", "own_due", "own_kept", "own_method",
           "own_held", "own_slots", "own_view", "segment_kept", "with_budget"]


def check_method(method: KVMethod) -> None:
    """Raise ValueError when ``method`` cannot compress by segments."""
    if getattr(method, "per_head", False):
        raise ValueError(f"{method.name}: per_head selection does not support segment compression")


def with_budget(method: KVMethod, budget: Optional[float]) -> KVMethod:
    """``method`` at ``budget`` (itself when None or equal)."""
    if budget is None or float(budget) == method.budget:
        return method
    return dataclasses.replace(method, budget=float(budget))


def segment_kept(method: KVMethod, num_layers: int, groups: Sequence[Sequence[int]],
                 classes: Sequence[int], attention: Optional[AttentionStats] = None,
                 segment_budget: Optional[float] = None) -> list[np.ndarray]:
    """Per layer, int64 sorted positions of the segment ``[0, S)`` (``S = len(classes)``) that
    persist, at ``segment_budget`` (default: the method's). ``attention``: statistics aligned
    with every position (methods that need them)."""
    check_method(method)
    method = with_budget(method, segment_budget)
    s = len(classes)
    if s == 0:
        return [np.zeros(0, np.int64) for _ in range(num_layers)]
    every = np.arange(s, dtype=np.int64)
    view = CacheView(num_layers=num_layers, groups=groups, seq_len=s, classes=np.asarray(classes, np.int64),
                     retained=[every] * num_layers, protected_tail=0, attention=attention, prompt_len=s)
    sel = method.select(view)
    return [np.asarray(k, dtype=np.int64) for k in sel.kept]


def own_view(num_layers: int, groups: Sequence[Sequence[int]], seq_len: int, classes: Sequence[int],
             retained: Sequence[np.ndarray], segment_end: int, protected_tail: int, prompt_len: int,
             attention: Optional[AttentionStats] = None) -> CacheView:
    """The view of positions ``[segment_end, seq_len)`` alone, shifted by ``-segment_end``
    (``retained`` and ``attention`` entries of segment positions are left out; ``start`` is
    ``segment_end``, so the sequence's sinks, which the segment holds, are not re-anchored on
    the own span's first tokens)."""
    s = int(segment_end)
    if not 0 <= s <= seq_len - protected_tail:
        raise ValueError(f"segment end {s} outside [0, seq_len - protected_tail = {seq_len - protected_tail}]")
    masks = [np.asarray(r, np.int64) >= s for r in retained]
    stats = None
    if attention is not None:
        def cut(arrays, two_d=False):
            if arrays is None:
                return None
            return [np.asarray(a)[:, m] if two_d else np.asarray(a)[m] for a, m in zip(arrays, masks)]
        stats = AttentionStats(accumulated=cut(attention.accumulated), window=cut(attention.window),
                               window_size=attention.window_size,
                               window_heads=cut(attention.window_heads, two_d=True),
                               expected_heads=cut(attention.expected_heads, two_d=True),
                               kvzip_heads=cut(attention.kvzip_heads, two_d=True))
    return CacheView(num_layers=num_layers, groups=groups, seq_len=seq_len - s,
                     classes=np.asarray(classes, np.int64)[s:seq_len],
                     retained=[np.asarray(r, np.int64)[m] - s for r, m in zip(retained, masks)],
                     protected_tail=protected_tail, attention=stats, prompt_len=max(prompt_len - s, 0), start=s)


def own_held(view: CacheView) -> int:
    """Slots the own span holds."""
    return int(view.held().sum())


def own_slots(method: KVMethod, num_layers: int, seq_len: int, segment_end: int, segment_slots: int,
              own_budget: Optional[float] = None) -> int:
    """Token-layer slots the own span ``[S, T)`` may keep: its proportional share, or the
    request's whole budget less what the segment keeps, whichever is larger; with ``own_budget``
    ``b_o``: ``floor(b_o*L*(T - S))`` (module)."""
    own = num_layers * (seq_len - segment_end)
    if own_budget is not None:
        return own if own_budget >= 1.0 else int(np.floor(own_budget * own + 1e-9))
    if method.budget >= 1.0:
        return own
    total = int(np.floor(method.budget * num_layers * seq_len + 1e-9))
    share = int(np.floor(method.budget * num_layers * (seq_len - segment_end) + 1e-9))
    return max(share, total - int(segment_slots))


def own_due(method: KVMethod, step: int, view: CacheView, slots: int) -> bool:
    """The method's schedule, and the own span holds more than ``slots``."""
    return method.checks_at(step) and own_held(view) > slots


def own_budget(method: KVMethod, num_layers: int, own_len: int, slots: int) -> float:
    """The budget ``b`` whose ``floor(b*L*T_own)`` is ``slots`` (capped at 1; ``method``'s own
    when it keeps everything): what :func:`own_method` selects the own span at."""
    if method.budget >= 1.0:
        return method.budget
    return min(1.0, (slots + 1e-6) / (num_layers * own_len))


def own_method(method: KVMethod, view: CacheView, slots: int) -> KVMethod:
    """``method`` at :func:`own_budget` for ``view`` (an own view)."""
    return with_budget(method, own_budget(method, view.num_layers, view.seq_len, slots))


def own_kept(method: KVMethod, view: CacheView, segment_end: int, slots: Optional[int] = None) -> list[np.ndarray]:
    """Per layer, int64 sorted absolute positions of the own span that persist (``view`` from
    :func:`own_view`; ``slots``: its allocation, from :func:`own_slots`; None: the method's budget
    of the own span)."""
    check_method(method)
    if slots is not None:
        method = own_method(method, view, slots)
    sel = method.select(view)
    return [np.asarray(k, dtype=np.int64) + int(segment_end) for k in sel.kept]
