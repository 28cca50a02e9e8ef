"""An evaluation entry: one BFCL-format test case joined with its ``possible_answer``.

The data model every source produces (:mod:`.data` reads BFCL and files, :mod:`.synthetic`
generates), kept apart from both so neither imports the other to get it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Entry", "entry_from_bfcl", "with_distractors"]


@dataclass(frozen=True)
class Entry:
    id: str
    category: str  # drives the checker's dispatch (substrings "parallel" / "multiple")
    messages: tuple  # the single turn: ({"role", "content"}, ...)
    functions: tuple  # raw BFCL function docs (what BFCL's checker reads)
    ground_truth: tuple  # [{func: {param: [allowed...]}}]
    #: the prompt's tools when they are not ``functions``: a catalog (``functions`` plus distractor
    #: tools from other entries, shuffled: :func:`with_distractors`); the checker still reads ``functions``
    tools: tuple = ()

    @property
    def prompt_functions(self) -> tuple:
        """The tool docs the prompt offers (``tools`` if set, else ``functions``)."""
        return self.tools or self.functions


def with_distractors(entries: list, n: int, seed: int = 0) -> list:
    """``entries``, each offering its own functions plus ``n`` distractor tools drawn from the other
    entries' functions (distinct by name, none sharing a name with one of the entry's own), all in a
    shuffled order; deterministic by ``seed`` and the entry's category and id. The entry's own
    ``functions`` and ``ground_truth`` are unchanged: BFCL's checker scores the call against them,
    so a call to a distractor is a wrong function. ValueError if the others hold fewer than ``n``."""
    import dataclasses
    import random

    pool: dict[str, dict] = {}
    for e in entries:
        for f in e.functions:
            pool.setdefault(f["name"], f)
    names = sorted(pool)
    out = []
    for e in entries:
        own = {f["name"] for f in e.functions}
        others = [k for k in names if k not in own]
        if len(others) < n:
            raise ValueError(f"distractors={n}: entry {e.id} has only {len(others)} other tools to draw from")
        rng = random.Random(f"{seed}:{e.category}:{e.id}")
        tools = [*e.functions, *(pool[k] for k in rng.sample(others, n))]
        rng.shuffle(tools)
        out.append(dataclasses.replace(e, tools=tuple(tools)))
    return out


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
