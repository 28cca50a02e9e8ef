"""The in-process scoring API: score entries under a KV method, and the teacher-forced NLL of the
gold call, without files or subprocesses (calibration scores thousands of variants this way).

    import sglang_pask
    runner = sglang_pask.load_runner("models/pask-tiny-fc")         # load the model once
    recs = sglang_pask.score(runner, "h2o", "synthetic:calib:20:tiny", budget=0.33,
                             settings={"max_tokens": 128, "tool_choice": "required"}, normalize=True)
    acc = sum(r["valid"] for r in recs) / len(recs)
    nll = sglang_pask.gold_nll(runner, "snapkv", entry, budget=0.2)  # float(nll) = mean per token

``score`` returns the records ``pask eval`` writes to results.jsonl, through the same function
(:func:`sglang_pask.eval.harness.score_entry`) and the same backend (``hf``): one scoring path.
``budget`` is the fraction of Full KV *kept* (kvpress's ``compression_ratio`` is the fraction
removed: ``budget = 1 - compression_ratio``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Iterable, Optional, Union

import numpy as np

from sglang_pask.eval.data import Entry, load_spec
from sglang_pask.eval.harness import Settings, build_request, score_entry
from sglang_pask.eval.hf_backend import HFBackend, bind_runner, runner_body

__all__ = ["generate", "score", "gold_nll", "gold_kl", "GoldNLL", "load_runner", "as_settings"]


def load_runner(model, **kwargs):
    """A reference Runner (Full KV, SGLang's grammar) for ``model``, to pass to :func:`score` and
    :func:`gold_nll` so the model loads once. ``kwargs`` go to :class:`sglang_pask.hf.Runner`."""
    from sglang_pask.hf import Runner

    return Runner(model, **{"grammar": "sglang", **kwargs})


def generate(model, request: dict, method="full", *, budget: float | None = None, policy=None,
             schedule: str | None = None, segment_rule=None, max_new_tokens: int = 128, **method_options):
    """One OpenAI chat request body (``messages``, ``tools``, ``tool_choice``, ...) through the
    reference runner under ``method`` (as :func:`score`, segment rule included); returns its
    :class:`~sglang_pask.hf.result.Result`: ``text``, ``tool_calls``, ``kept`` (per layer group,
    the positions held at the end), ``kv_bytes``, ``compressions``. Greedy."""
    runner = bind_runner(model, method, budget=budget, policy=policy, schedule=schedule,
                         segment_rule=segment_rule, **method_options)
    return runner.generate(request, max_new_tokens=max_new_tokens)


def as_settings(settings: Union[Settings, dict, None]) -> Settings:
    """Settings as given, from a dict of its fields, or the defaults (``pask eval``'s)."""
    if settings is None:
        return Settings()
    return settings if isinstance(settings, Settings) else Settings(**settings)


def _entries(entries: Union[str, Entry, Iterable[Entry]]) -> list[Entry]:
    if isinstance(entries, str):
        return load_spec(entries)
    return [entries] if isinstance(entries, Entry) else list(entries)


def score(model, method, entries: Union[str, Iterable[Entry]], *, budget: float | None = None,
          policy=None, schedule: str | None = None, settings: Union[Settings, dict, None] = None,
          progress: bool = False, segment_rule=None, chunk_rule=None, **method_options) -> list[dict]:
    """Score ``entries`` (Entry objects or a ``--data`` spec such as ``"synthetic:calib:20:tiny"``)
    with the reference runner under ``method`` (a registry name or a KVMethod; ``budget``,
    ``policy``, ``schedule`` and ``method_options`` as :func:`~sglang_pask.eval.hf_backend.bind_runner`).
    ``model``: a model directory or a Runner (:func:`load_runner`) reused across calls.
    ``segment_rule``: the runner's shared-segment rule
    (:class:`~sglang_pask.policy.operating_point.SegmentRule`; None: the policy's operating point,
    else none; ``pask eval --segment ...``). ``chunk_rule``: the chunked prefill rule
    (:class:`~sglang_pask.methods.chunks.ChunkRule`; None: prompts written whole). Schedule and
    interval default to the policy's operating point for ``pask``. Returns
    one results.jsonl record per entry, in order: ``{"id", "category", "raw", "decoded", "valid",
    "error_type", "error", "meta"}``."""
    items = _entries(entries)
    backend = HFBackend(model, method, budget, policy, schedule=schedule, method_options=method_options,
                        segment_rule=segment_rule, chunk_rule=chunk_rule)
    cfg = as_settings(settings)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), desc="score", unit="entry", file=sys.stderr, dynamic_ncols=True)
    out = []
    try:
        for e in items:
            out.append(score_entry(e, backend, cfg))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        backend.close()
    return out


@dataclass(frozen=True)
class GoldNLL:
    """Teacher-forced NLL (nats) of an entry's gold answer: ``total`` over ``tokens`` answer
    tokens; ``float(x)`` is the mean per token."""

    total: float
    tokens: int
    prompt_tokens: int
    compressions: int
    #: float32 ``[tokens, V]``: each answer position's log-distribution (``gold_nll(logprobs=True)``)
    logprobs: Optional[np.ndarray] = field(default=None, repr=False, compare=False)

    @property
    def mean(self) -> float:
        return self.total / self.tokens

    def __float__(self) -> float:
        return self.mean


def gold_nll(model, method, entry: Entry, *, budget: float | None = None, policy=None,
             schedule: str | None = None, settings: Union[Settings, dict, None] = None,
             segment_rule=None, logprobs: bool = False, **method_options) -> GoldNLL:
    """NLL of ``entry``'s gold call(s) under ``method`` by teacher forcing (:mod:`sglang_pask.hf.teacher`).

    The prompt is the one generation sees (the request of ``settings``: tool_choice,
    enable_thinking), compressed per the method's schedule; the answer is
    :func:`~sglang_pask.eval.gold.forced_answer_text` (SGLang's forced spelling, then the end of
    turn), fed token by token with the same compression points as generation. Raw model logits
    (no grammar mask), under the same segment rule (``segment_rule``, as :func:`score`).
    ``model``: a model directory or a Runner (:func:`load_runner`). ``logprobs``: keep every
    position's log-distribution too (for :func:`gold_kl`)."""
    from sglang_pask.eval.gold import forced_answer_text
    from sglang_pask.hf.teacher import teacher_forced_nll

    runner = bind_runner(model, method, budget=budget, policy=policy, schedule=schedule,
                         segment_rule=segment_rule, **method_options)
    request, _ = build_request(entry, as_settings(settings))
    answer = runner.tokenizer(forced_answer_text(entry), add_special_tokens=False)["input_ids"]
    tf = teacher_forced_nll(runner, runner_body(request), answer, logprobs=logprobs)
    return GoldNLL(tf.total, len(answer), tf.prompt_len, tf.compressions, tf.logprobs)


def gold_kl(model, method, entry: Entry, reference: GoldNLL, **kw) -> float:
    """Mean over ``entry``'s gold-answer positions of KL(reference || ``method``) in nats: how far
    the method's next-token distributions move from ``reference``'s (Full KV's, from
    ``gold_nll(model, "full", entry, logprobs=True)``) along the same teacher-forced answer. 0 when
    the method changes nothing; unlike the gold NLL, a position where the method loses the token
    Full KV was sure of (an argument name, a value) cannot be offset by a position where it
    happens to assign gold more mass. ``kw``: as :func:`gold_nll`."""
    from sglang_pask.hf.teacher import kl_per_position

    if reference.logprobs is None:
        raise ValueError("gold_kl needs a reference with log-distributions (gold_nll(..., logprobs=True))")
    other = gold_nll(model, method, entry, logprobs=True, **kw)
    return float(kl_per_position(reference.logprobs, other.logprobs).mean())
