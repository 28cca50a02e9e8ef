"""Task-error sensitivity S[g][c] (DESIGN.md §5): drop class ``c`` in layer group ``g`` only
(everything else Full KV, at prefill end) and measure the rise in task error on calibration
entries, two ways:

* ``fail``: the rise in the AST checker's failure rate (generation, the scoring API);
* ``nll``: the rise in the teacher-forced NLL of the gold call (nats per answer token; smooth, so
  rare classes still give a signal).

Also, for the name-like classes of :data:`DELIMITED` (where research/tiny_spike.md saw isolated
names corrupt the JSON), the rise when class ``c`` is kept but its span delimiters are dropped
(:class:`~.probes.DropDelimiters`) in group ``g`` only.

All are averaged over the entries in which class ``c`` occurs in the prompt (an entry without it
is unchanged by the probe, so it is not re-run). Only prompt classes are probed: under the prefill
schedule every output token is kept, so output classes are never dropped.

The **joint** probe (:func:`measure_joint`) drops class ``c`` from every layer at once. A single-
group probe measures nearly nothing for a class a neighbouring group still holds (tool and parameter
names on both models here), so only the joint probe says what losing it everywhere costs.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Optional, Sequence

import numpy as np

from sglang_pask.calibrate.probes import DropClass, DropDelimiters
from sglang_pask.eval.api import gold_nll, score
from sglang_pask.eval.data import Entry
from sglang_pask.eval.harness import Settings, build_request
from sglang_pask.eval.hf_backend import runner_body
from sglang_pask.rendering import render_chat
from sglang_pask.structure.classes import StructClass

__all__ = ["prompt_classes", "prompt_class_counts", "measure_sensitivity", "measure_joint", "joint_units",
           "DELIMITED", "SIGNALS"]

#: classes whose span delimiters are probed (kept class, delimiters dropped)
DELIMITED = (StructClass.TOOL_NAME, StructClass.PARAM_NAME, StructClass.ENUM_VALUE, StructClass.QUERY_VALUE)


def prompt_class_counts(runner, entries: Sequence[Entry], settings: Settings) -> list[Counter]:
    """Per entry, how many tokens of each StructClass int its rendered prompt holds (the one
    rendering path)."""
    out = []
    for e in entries:
        tags = render_chat(runner.tokenizer, runner_body(build_request(e, settings)[0]), tagger=runner.tagger)
        out.append(Counter(int(c) for c in tags.classes))
    return out


def prompt_classes(runner, entries: Sequence[Entry], settings: Settings) -> list[set[int]]:
    """Per entry, the StructClass ints its rendered prompt holds."""
    return [set(c) for c in prompt_class_counts(runner, entries, settings)]


#: what a probe measures: ``both`` (generation + AST check, and the gold NLL) or ``nll`` (the gold
#: NLL only: one teacher-forced forward per probe, no generation -- for models too slow to generate
#: every probe on CPU; the failure rises are then not measured and recorded as None)
SIGNALS = ("both", "nll")


def _task_error(runner, method, entry: Entry, settings: Settings, signal: str = "both") -> tuple:
    """(1 if the AST check fails else 0 -- None under ``signal="nll"`` --, gold NLL per token) of
    ``entry`` under ``method``."""
    fail = None
    if signal == "both":
        fail = float(not score(runner, method, [entry], settings=settings)[0]["valid"])
    return fail, float(gold_nll(runner, method, entry, settings=settings))


def measure_sensitivity(runner, entries: Sequence[Entry], groups: Sequence[Sequence[int]],
                        settings: Settings, tick: Optional[Callable[[], None]] = None,
                        signal: str = "both") -> dict:
    """``signal``: :data:`SIGNALS` (under ``nll`` every ``fail`` value is None). Returns
    ``{"classes": [names], "count": {name: entries with it}, "tokens": {name: its mean token
    count in those entries}, "full": {"fail", "nll"},
    "fail": [{name: rise}] per group, "nll": [{name: rise}] per group, "delimiters": [{name:
    {"fail", "nll"}}] per group (the :data:`DELIMITED` classes present), "signal"}`` (rises rounded to
    1e-6)."""
    if signal not in SIGNALS:
        raise ValueError(f"sensitivity signal must be one of {', '.join(SIGNALS)}, got {signal!r}")
    counts = prompt_class_counts(runner, entries, settings)
    present = [set(c) for c in counts]
    classes = [c for c in StructClass if any(int(c) in p for p in present)]
    full = [_task_error(runner, "full", e, settings, signal) for e in entries]
    if tick:
        tick()

    def rises(probe, c: StructClass) -> tuple:
        out = _rises(runner, probe, c, entries, present, full, settings, signal)
        if tick:
            tick()
        return out

    fail, nll, delim = [], [], []
    for layers in groups:
        fg, ng, dg = {}, {}, {}
        for c in classes:
            fg[c.name], ng[c.name] = rises(DropClass(1.0, layers=tuple(layers), cls=int(c)), c)
        for c in (c for c in DELIMITED if c in classes):
            f, n = rises(DropDelimiters(1.0, layers=tuple(layers), cls=int(c)), c)
            dg[c.name] = {"fail": f, "nll": n}
        fail.append(fg)
        nll.append(ng)
        delim.append(dg)
    return {"classes": [c.name for c in classes],
            "count": {c.name: sum(int(c) in p for p in present) for c in classes},
            "tokens": {c.name: round(float(np.mean([n[int(c)] for n in counts if int(c) in n])), 6)
                       for c in classes},
            "full": {"fail": _mean([f[0] for f in full]), "nll": _mean([f[1] for f in full])},
            "fail": fail, "nll": nll, "delimiters": delim, "signal": signal}


def _mean(xs) -> Optional[float]:
    return None if xs[0] is None else round(float(np.mean(xs)), 6)


def _rises(runner, probe, c: StructClass, entries, present, full, settings: Settings, signal: str) -> tuple:
    """(fail rise, NLL rise) of ``probe`` over the entries whose prompt holds class ``c``, against
    Full KV's per-entry ``full`` errors."""
    held = [i for i, e in enumerate(entries) if int(c) in present[i]]
    errs = {i: _task_error(runner, probe, entries[i], settings, signal) for i in held}
    return tuple(_mean([None if full[i][k] is None else errs[i][k] - full[i][k] for i in held]) for k in (0, 1))


def measure_joint(runner, entries: Sequence[Entry], num_layers: int, settings: Settings,
                  tick: Optional[Callable[[], None]] = None, signal: str = "both") -> dict:
    """The joint probe: class ``c`` dropped from all ``num_layers`` layers at once, for each prompt
    class present. Returns ``{"fail": {name: rise}, "nll": {name: rise}, "signal"}`` (as one group's
    column of :func:`measure_sensitivity`; over the same entries, rounded the same way)."""
    if signal not in SIGNALS:
        raise ValueError(f"sensitivity signal must be one of {', '.join(SIGNALS)}, got {signal!r}")
    present = [set(c) for c in prompt_class_counts(runner, entries, settings)]
    classes = [c for c in StructClass if any(int(c) in p for p in present)]
    full = [_task_error(runner, "full", e, settings, signal) for e in entries]
    if tick:
        tick()
    fail, nll = {}, {}
    for c in classes:
        fail[c.name], nll[c.name] = _rises(runner, DropClass(1.0, layers=tuple(range(num_layers)), cls=int(c)),
                                           c, entries, present, full, settings, signal)
        if tick:
            tick()
    return {"fail": fail, "nll": nll, "signal": signal}


def joint_units(entries: Sequence[Entry], runner, settings: Settings) -> int:
    """How many ``tick`` calls :func:`measure_joint` makes."""
    return 1 + len({c for p in prompt_classes(runner, entries, settings) for c in p})


def work_units(entries: Sequence[Entry], groups: Sequence[Sequence[int]], runner, settings: Settings) -> int:
    """How many ``tick`` calls :func:`measure_sensitivity` makes (for a progress bar)."""
    present = prompt_classes(runner, entries, settings)
    held = {c for p in present for c in p}
    return 1 + len(groups) * (len(held) + sum(int(c) in held for c in DELIMITED))
