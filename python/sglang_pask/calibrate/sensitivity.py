"""Task-error sensitivity S[g][c] (DESIGN.md §5): drop class ``c`` in layer group ``g`` only
(everything else Full KV, at prefill end) and measure the rise in task error on calibration
entries, two ways:

* ``fail``: the rise in the AST checker's failure rate (generation, the scoring API);
* ``nll``: the rise in the teacher-forced NLL of the gold call (nats per answer token; smooth, so
  rare classes still give a signal).

Both are averaged over the entries in which class ``c`` occurs in the prompt (an entry without it
is unchanged by the probe, so it is not re-run). Only prompt classes are probed: under the prefill
schedule every output token is kept, so output classes are never dropped.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from sglang_pask.calibrate.probes import DropClass
from sglang_pask.eval.api import gold_nll, score
from sglang_pask.eval.data import Entry
from sglang_pask.eval.harness import Settings, build_request
from sglang_pask.eval.hf_backend import runner_body
from sglang_pask.rendering import render_chat
from sglang_pask.structure.classes import StructClass

__all__ = ["prompt_classes", "measure_sensitivity"]


def prompt_classes(runner, entries: Sequence[Entry], settings: Settings) -> list[set[int]]:
    """Per entry, the StructClass ints its rendered prompt holds (the one rendering path)."""
    out = []
    for e in entries:
        tags = render_chat(runner.tokenizer, runner_body(build_request(e, settings)[0]), tagger=runner.tagger)
        out.append({int(c) for c in tags.classes})
    return out


def _task_error(runner, method, entry: Entry, settings: Settings) -> tuple[float, float]:
    """(1 if the AST check fails else 0, gold NLL per token) of ``entry`` under ``method``."""
    rec = score(runner, method, [entry], settings=settings)[0]
    return float(not rec["valid"]), float(gold_nll(runner, method, entry, settings=settings))


def measure_sensitivity(runner, entries: Sequence[Entry], groups: Sequence[Sequence[int]],
                        settings: Settings, tick: Optional[Callable[[], None]] = None) -> dict:
    """``{"classes": [names], "count": {name: entries with it}, "full": {"fail", "nll"},
    "fail": [{name: rise}] per group, "nll": [{name: rise}] per group}`` (rises rounded to 1e-6)."""
    present = prompt_classes(runner, entries, settings)
    classes = [c for c in StructClass if any(int(c) in p for p in present)]
    full = [_task_error(runner, "full", e, settings) for e in entries]
    if tick:
        tick()
    fail, nll = [], []
    for layers in groups:
        fg, ng = {}, {}
        for c in classes:
            probe = DropClass(1.0, layers=tuple(layers), cls=int(c))
            rises = [np.subtract(_task_error(runner, probe, e, settings), full[i])
                     for i, e in enumerate(entries) if int(c) in present[i]]
            mean = np.mean(rises, axis=0)
            fg[c.name], ng[c.name] = round(float(mean[0]), 6), round(float(mean[1]), 6)
            if tick:
                tick()
        fail.append(fg)
        nll.append(ng)
    full_mean = np.mean(full, axis=0)
    return {"classes": [c.name for c in classes],
            "count": {c.name: sum(int(c) in p for p in present) for c in classes},
            "full": {"fail": round(float(full_mean[0]), 6), "nll": round(float(full_mean[1]), 6)},
            "fail": fail, "nll": nll}


def work_units(entries: Sequence[Entry], groups: Sequence[Sequence[int]], runner, settings: Settings) -> int:
    """How many ``tick`` calls :func:`measure_sensitivity` makes (for a progress bar)."""
    present = prompt_classes(runner, entries, settings)
    n = len({c for p in present for c in p})
    return 1 + len(groups) * n
