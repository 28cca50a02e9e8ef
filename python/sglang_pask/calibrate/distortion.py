"""Attention-output distortion D[g](b) (DESIGN.md §5): the relative error of group ``g``'s
attention output when only group ``g`` is compressed to budget ``b`` structure-agnostically
(sinks + the newest tokens, :class:`~.probes.RecencyGroup`), everything else Full KV.

Measured under teacher forcing on the gold call: a forward hook on every layer's ``self_attn``
records its output ``[1, T, hidden]`` at every forward, of which the last ``len(answer) - 1``
positions are the answer steps (fed one by one, or as one forward under the ``prefill`` schedule;
a prompt forward, when one runs rather than coming from the prefill memo, comes first); per layer
the error is
``||O_b - O_full||_F / ||O_full||_F`` over the answer positions; D[g](b) is its mean over the
group's layers and the entries.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from sglang_pask.calibrate.probes import RecencyGroup
from sglang_pask.eval.api import gold_nll
from sglang_pask.eval.data import Entry
from sglang_pask.eval.harness import Settings

__all__ = ["measure_distortion", "budget_key"]


def budget_key(b: float) -> str:
    """The key of budget ``b`` in a D table (``"0.33"``)."""
    return f"{b:g}"


@contextmanager
def _capture(model):
    """Yields ``{layer: [tensor [T, hidden]] per forward}`` filled by forward hooks."""
    seen: dict[int, list[torch.Tensor]] = {}
    handles = []
    for i, layer in enumerate(model.model.layers):
        def hook(_mod, _args, out, i=i):
            o = out[0] if isinstance(out, tuple) else out  # [1, T, hidden]
            seen.setdefault(i, []).append(o[0].detach().double().cpu())
        handles.append(layer.self_attn.register_forward_hook(hook))
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def _outputs(runner, method, entry: Entry, settings: Settings) -> dict[int, torch.Tensor]:
    """Per layer, its attention output at the answer steps, ``[len(answer) - 1, hidden]``."""
    with _capture(runner.model) as seen:
        steps = gold_nll(runner, method, entry, settings=settings).tokens - 1
    return {i: torch.cat(v)[-steps:] for i, v in seen.items()} if steps else {}


def measure_distortion(runner, entries: Sequence[Entry], groups: Sequence[Sequence[int]],
                       budgets: Sequence[float], settings: Settings, sinks: int = 4,
                       tick: Optional[Callable[[], None]] = None) -> list[dict[str, float]]:
    """D as ``[{budget_key(b): error}]`` per group (rounded to 1e-6)."""
    errs = np.zeros((len(groups), len(budgets)))
    for e in entries:
        full = _outputs(runner, "full", e, settings)
        for g, layers in enumerate(groups):
            for k, b in enumerate(budgets):
                got = _outputs(runner, RecencyGroup(b, layers=tuple(layers), sinks=sinks), e, settings)
                rel = [float(torch.linalg.norm(got[i] - full[i]) / max(float(torch.linalg.norm(full[i])), 1e-12))
                       for i in layers if i in full]
                errs[g, k] += np.mean(rel) if rel else 0.0
        if tick:
            tick()
    errs /= max(len(entries), 1)
    return [{budget_key(b): round(float(errs[g, k]), 6) for k, b in enumerate(budgets)}
            for g in range(len(groups))]
