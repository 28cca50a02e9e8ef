"""Contracts of the structure subpackage: prompt region taggers and output trackers.

A request's tags are one :class:`~.classes.StructClass` per token, prompt then output. Prompt
tags are computed once at admission (:class:`PromptTags`); output tags grow by one per accepted
token through an :class:`OutputTracker`. Both convert to span tags with :func:`~.spans.to_spans`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

from .classes import StructClass
from .spans import RankMap, Span, to_spans


@dataclass
class PromptContext:
    """What a :class:`RegionTagger` may read. ``text`` is the rendered prompt; ``messages`` the
    request's messages (contents flattened to strings); ``content_spans[i]`` is the char range of
    ``messages[i]["content"]`` in ``text`` (``None`` if empty or not located)."""

    text: str
    messages: list[dict]
    tools: list[dict]
    schema: dict | None
    content_spans: list[tuple[int, int] | None]
    notes: list[str] = field(default_factory=list)


@dataclass
class PromptTags:
    """The tags of one rendered prompt. ``offsets[i]`` is token i's char range in ``text``;
    ``classes[i]`` its class. Invariant: ``len(token_ids) == len(offsets) == len(classes)``."""

    text: str
    token_ids: list[int]
    offsets: list[tuple[int, int]]
    classes: list[StructClass]
    notes: list[str] = field(default_factory=list)

    def spans(self) -> list[Span]:
        return to_spans(self.classes)


class RegionTagger(ABC):
    """Finds one kind of structure (tool JSON, a JSON schema, SQL DDL) in a rendered prompt."""

    #: registry name (``structure.TAGGERS``)
    name: str = ""

    @abstractmethod
    def paint(self, ctx: PromptContext, rmap: RankMap) -> None:
        """Overwrite the char ranks of the regions it recognises in ``ctx.text``; leave every other
        char unchanged. Must not raise on well-formed (already validated) requests; a region it
        expected but could not find is reported by appending to ``ctx.notes``."""


class OutputTracker(ABC):
    """Incremental tagger of generated tokens, fed the exact bytes of each accepted token.

    Contract for consumers:

    * ``feed(b)`` appends exactly one class (token ``len(self) - 1``); ``feed(b"")`` is valid
      (a token that decodes to no bytes) and gets the class of the context it sits in.
    * A class may change after it was appended only for tokens at index ``>= self.stable``
      (relabelling when a later byte resolves a pending lexeme, e.g. a ``<tool_call>`` marker
      split over several tokens, or an SQL word that becomes a keyword). Tokens ``< stable`` are
      final until a rollback removes them. ``stable`` never decreases except through rollback.
    * ``rollback(k)`` removes the last ``k`` tokens; afterwards the tracker is indistinguishable
      (classes, ``stable``, internal state) from one fed only the remaining tokens.
    * Never raises on unexpected bytes: invalid structure degrades to text classes.
    """

    #: registry name (``structure.TRACKERS``)
    name: str = ""

    @abstractmethod
    def feed(self, data: bytes) -> StructClass:
        """Consume one accepted token's bytes; return its (possibly provisional) class."""

    @abstractmethod
    def rollback(self, k: int) -> None:
        """Forget the last ``k`` tokens (``0 <= k <= len(self)``), restoring the earlier state."""

    @abstractmethod
    def reset(self) -> None:
        """Forget everything (as if newly constructed with the same arguments)."""

    @property
    @abstractmethod
    def classes(self) -> Sequence[int]:
        """Current class of every fed token (a read-only view; ints of StructClass)."""

    @property
    @abstractmethod
    def stable(self) -> int:
        """Number of leading tokens whose class is final (see the class docstring)."""

    @abstractmethod
    def state_key(self) -> Any:
        """A hashable summary of the full state; equal for trackers in the same state."""

    def __len__(self) -> int:
        return len(self.classes)

    def _rollback_needed(self, k: int) -> bool:
        """Check ``0 <= k <= len(self)`` (ValueError otherwise); False when ``k == 0``."""
        if not 0 <= k <= len(self):
            raise ValueError(f"rollback({k}) with {len(self)} tokens")
        return k > 0

    def feed_all(self, tokens: Sequence[bytes]) -> None:
        for t in tokens:
            self.feed(t)

    def spans(self) -> list[Span]:
        return to_spans(self.classes)
