"""Span tags: run-length ``(start, end, class)`` over a request's tokens, and per-char rank maps.

Invariant of a span list produced here: spans are sorted, non-empty, contiguous
(``spans[i].end == spans[i+1].start``), cover ``[0, n)`` and adjacent spans differ in class.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from .classes import BY_RANK, RANK, StructClass


class Span(NamedTuple):
    start: int
    end: int  # exclusive
    cls: StructClass


def to_spans(classes: Sequence[int], offset: int = 0) -> list[Span]:
    """Per-token classes -> run-length spans (token indices shifted by ``offset``)."""
    out: list[Span] = []
    n = len(classes)
    i = 0
    while i < n:
        c = classes[i]
        j = i + 1
        while j < n and classes[j] == c:
            j += 1
        out.append(Span(i + offset, j + offset, StructClass(c)))
        i = j
    return out


def from_spans(spans: Iterable[Sequence[int]], n: int | None = None) -> list[StructClass]:
    """Run-length spans -> per-token classes. Gaps (if any) raise: every token needs a class."""
    out: list[StructClass] = []
    for start, end, cls in spans:
        if start != len(out) or end < start:
            raise ValueError(f"spans are not contiguous at token {len(out)}: ({start}, {end})")
        out.extend([StructClass(cls)] * (end - start))
    if n is not None and len(out) != n:
        raise ValueError(f"spans cover {len(out)} tokens, expected {n}")
    return out


class RankMap:
    """A per-character map of precedence ranks over one text (``bytearray`` of RANK values).

    ``paint`` overwrites; ``raise_to`` keeps the higher rank. ``token_classes`` resolves each
    token's ``[start, end)`` char range to its highest-precedence class.
    """

    __slots__ = ("ranks",)

    def __init__(self, n: int, fill: StructClass = StructClass.OTHER):
        self.ranks = bytearray([RANK[fill]]) * n

    def paint(self, start: int, end: int, cls: StructClass) -> None:
        if end > start:
            self.ranks[start:end] = bytes([RANK[cls]]) * (end - start)

    def cls_at(self, i: int) -> StructClass:
        return BY_RANK[self.ranks[i]]

    def token_classes(self, offsets: Sequence[tuple[int, int]]) -> list[StructClass]:
        ranks = self.ranks
        out = []
        for s, e in offsets:
            out.append(BY_RANK[max(ranks[s:e]) if e > s else 0])
        return out
