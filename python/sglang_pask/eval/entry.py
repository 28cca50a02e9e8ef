"""An evaluation entry: one BFCL-format test case joined with its ``possible_answer``.

The data model every source produces (:mod:`.data` reads BFCL and files, :mod:`.synthetic`
generates), kept apart from both so neither imports the other to get it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Entry", "entry_from_bfcl"]


@dataclass(frozen=True)
class Entry:
    id: str
    category: str  # drives the checker's dispatch (substrings "parallel" / "multiple")
    messages: tuple  # the single turn: ({"role", "content"}, ...)
    functions: tuple  # raw BFCL function docs
    ground_truth: tuple  # [{func: {param: [allowed...]}}]


def entry_from_bfcl(prompt: dict, answer: dict, category: str) -> Entry:
    """Join one prompt row with its possible_answer row; both must carry the same id."""
    if prompt.get("id") != answer.get("id"):
        raise ValueError(f"{category}: prompt id {prompt.get('id')!r} != answer id {answer.get('id')!r}")
    turns = prompt["question"]
    if len(turns) != 1:
        raise ValueError(f"{prompt['id']}: {len(turns)} turns; only single-turn entries are supported")
    return Entry(
        id=prompt["id"],
        category=category,
        messages=tuple(turns[0]),
        functions=tuple(prompt["function"]),
        ground_truth=tuple(answer["ground_truth"]),
    )
