"""Prefill once, decode many: one request through several runners that share a model.

Runners bound to different KV methods on one loaded model (``bind_runner``) all run the same prompt
forward whenever no segment rule splits it: compression happens only after it. What differs is
what the cache records during that forward (:meth:`Runner.cache_spec`: the attention-statistics
kind and its window), so runners are grouped by that; per group, one forward into one cache; per
runner, a :meth:`~.cache.PrunableCache.clone` of it, then that runner's own prefill-end
compression and decode loop (:meth:`Runner.decode`, the loop :meth:`Runner.generate` runs).

Invariant: a runner's result here equals its own ``generate`` (same token ids, text, compressions,
retained positions, kv bytes): the forward is the same computation on the same model and inputs,
and the clone is a bitwise copy of what it recorded. Only ``Result.timings`` differ:
``prefill_shared`` is True and ``forward_s`` is the shared forward's seconds (spent once per group).

Runners with an active segment rule (``segment="system"``) compress inside the prompt forward, so
they are not shareable: :func:`generate_shared` refuses them with a ValueError (run them with
their own ``generate``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from .result import Result
from .runner import Prompted, Runner

__all__ = ["SharedPrefill", "check_shareable", "generate_shared"]


def check_shareable(runners: Sequence[Runner], like: Optional[Runner] = None) -> None:
    """ValueError unless every runner has no active segment rule and the model and tokenizer
    of ``like`` (default: the first runner); the grammar may differ (the matcher is per runner)."""
    runners = list(runners)
    first = like if like is not None else (runners[0] if runners else None)
    for r in runners:
        if r.segment_rule.active:
            raise ValueError(f"{r.method.name}: segment rule {r.segment_rule.segment!r} compresses inside the "
                             "prompt forward, so its prefill cannot be shared; run it with its own generate()")
        if r.model is not first.model or r.tokenizer is not first.tokenizer:
            raise ValueError("runners sharing a prefill must share one loaded model and tokenizer "
                             "(bind them to one Runner: sglang_pask.eval.hf_backend.bind_runner)")


class SharedPrefill:
    """One request's prompt forwards, one per cache kind (:meth:`Runner.cache_spec`), each run on
    the first runner that needs it and kept until this object is dropped; the rendering is done
    once. A ValueError of the rendering or a forward (a rejected request) is kept too and raised
    again for every runner that needs it, as each runner's own ``generate`` would raise it."""

    def __init__(self, request: dict):
        self.request = request
        self._tags = None
        self._forwards: dict = {}  # cache_spec -> Prompted (never decoded: copies are) or ValueError
        self._first: Optional[Runner] = None
        self.forward_s = 0.0  # seconds of the forwards run so far (rendering included)

    @torch.inference_mode()
    def prompted(self, runner: Runner) -> Prompted:
        """A private copy of the forward ``runner``'s cache kind needs (run now if not yet)."""
        check_shareable([runner], like=self._first)
        self._first = self._first or runner
        key = runner.cache_spec()
        if key not in self._forwards:
            try:
                if self._tags is None:
                    self._tags = runner.render(self.request)
                self._forwards[key] = runner.forward_request(self.request, tags=self._tags)
                self.forward_s += self._forwards[key].seconds
            except ValueError as err:
                self._forwards[key] = err
        got = self._forwards[key]
        if isinstance(got, ValueError):
            raise got
        return got.copy()

    def generate(self, runner: Runner, max_new_tokens: int = 128, **kw) -> Result:
        """``runner.generate(self.request, max_new_tokens, **kw)``, from the shared forward."""
        return runner.decode(self.prompted(runner), max_new_tokens, **kw)


def generate_shared(request: dict, runners: Sequence[Runner], max_new_tokens: int = 128, **kw) -> list[Result]:
    """Per runner (in order), what ``runner.generate(request, max_new_tokens, **kw)`` returns, with
    one prompt forward per cache kind instead of one per runner (see the module docstring).
    Raises ValueError before any forward when a runner is not shareable (an active segment
    rule, another model or tokenizer), and a rejected request's ValueError as ``generate`` does."""
    runners = list(runners)
    check_shareable(runners)
    shared = SharedPrefill(request)
    return [shared.generate(r, max_new_tokens, **kw) for r in runners]
