"""Teacher forcing under a KV method: the NLL of a given answer, with the cache compressed exactly
as :meth:`Runner.generate` would compress it while writing that answer.

Loop (mirrors ``Runner.generate`` with the sampled token replaced by the answer's next token)::

    prefill prompt (Runner.prefill: the segment rule, then compress at decode step 0 if due)
    for i, tok in enumerate(answer):
        nll[i] = -log_softmax(logits)[tok]        # raw model logits, no grammar mask
        if last token: stop                        # generate does not feed its final token either
        tracker.feed(tok) -> forward tok at position P+i -> compress (decode step i+1, if due)

So compression points, classes (prompt tags + output tracker) and the method's schedule are the
generation's (under the ``prefill`` schedule without a segment nothing is compressed after prefill
end, so the answer runs as one forward instead): at budget 1.0 nothing is dropped and the result
equals one plain forward over prompt + answer. Uses only the runner's public pieces (``tagger``,
``forward_request``, ``compress_prefill_end``, ``forward``, ``compress``, ``tokenizer``) and the one
rendering path (:func:`sglang_pask.rendering.render_chat`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

__all__ = ["TeacherForced", "teacher_forced_nll", "kl_per_position"]


@dataclass(frozen=True)
class TeacherForced:
    """``nll``: float64 ``[len(answer)]``, -log p(answer[i] | prompt, answer[:i]) in nats.
    ``logprobs``: float32 ``[len(answer), V]``, the whole next-token log-distribution at each answer
    position (only when asked for: :func:`teacher_forced_nll` ``logprobs=True``; else None)."""

    nll: np.ndarray
    prompt_len: int
    compressions: int  # compression points that ran (prefill end included)
    logprobs: Optional[np.ndarray] = None

    @property
    def total(self) -> float:
        return float(self.nll.sum())

    @property
    def mean(self) -> float:
        return float(self.nll.mean()) if self.nll.size else 0.0


@torch.inference_mode()
def teacher_forced_nll(runner, request: dict, answer_ids: Sequence[int], logprobs: bool = False) -> TeacherForced:
    """Score ``answer_ids`` (token ids, e.g. the gold call then the end-of-turn token) as the
    continuation of the chat ``request`` under ``runner``'s method (see the module docstring).
    ``logprobs``: also keep every position's log-distribution (``TeacherForced.logprobs``)."""
    from sglang_pask.rendering import render_chat
    from sglang_pask.structure.token_bytes import token_bytes

    answer = [int(t) for t in answer_ids]
    if not answer:
        raise ValueError("teacher forcing needs at least one answer token")
    tags = render_chat(runner.tokenizer, request, tagger=runner.tagger)  # as Runner.generate renders
    prompt = list(tags.token_ids)
    prompt_classes = [int(c) for c in tags.classes]
    tracker = tags.tracker()  # chosen from the rendered view, as Runner.generate does
    # the segment rule, then the prefill-end compression (Runner.prefill's two steps; the first
    # through forward_request, so a runner's prefill memo serves teacher forcing too)
    prompted = runner.forward_request(request, tags=tags)
    cache, logits = prompted.cache, prompted.logits
    pre = runner.compress_prefill_end(cache, tags, prompted.prefilled)
    seq_len = len(prompt)
    ran = len(pre.compressions)
    if runner.method.schedule == "prefill" and not pre.segment_end and len(answer) > 1:
        # no compression point after prefill end (the schedule checks the budget at step 0 only,
        # and no own span is compressed apart): the answer in one forward gives the same logits
        # (to float rounding) as the token-by-token loop below, at a fraction of the time
        rest = runner.forward(cache, answer[:-1], seq_len, every=True)  # [len(answer) - 1, V]
        lp = torch.log_softmax(torch.cat([logits[None], rest]).double(), dim=-1)  # [len(answer), V]
        nll = -lp[torch.arange(len(answer)), torch.tensor(answer)]
        return TeacherForced(nll.numpy().astype(np.float64), len(prompt), int(ran),
                             lp.float().numpy() if logprobs else None)
    nll = np.zeros(len(answer), dtype=np.float64)
    kept = [] if logprobs else None
    for i, tok in enumerate(answer):
        lp = torch.log_softmax(logits.double(), dim=-1)  # [V]
        nll[i] = -float(lp[tok])
        if kept is not None:
            kept.append(lp.float().numpy())
        if i == len(answer) - 1:
            break
        tracker.feed(token_bytes(runner.tokenizer, [tok])[0])
        logits = runner.forward(cache, [tok], seq_len)
        seq_len += 1
        c = runner.compress(cache, seq_len, prompt_classes + list(tracker.classes), len(prompt), i + 1,
                            segment_end=pre.segment_end, segment_slots=pre.segment_slots)
        ran += c is not None
    return TeacherForced(nll, len(prompt), int(ran), np.stack(kept) if kept is not None else None)


def kl_per_position(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    """float64 ``[A]``: KL(reference || other) in nats at each of ``A`` positions, from two
    ``[A, V]`` log-distributions (e.g. Full KV's and a compressed cache's along the same answer).
    Non-negative up to rounding; 0 where the two agree."""
    if reference.shape != other.shape:
        raise ValueError(f"KL needs log-distributions of one shape, got {reference.shape} and {other.shape}")
    ref = torch.from_numpy(reference).double()
    return (ref.exp() * (ref - torch.from_numpy(other).double())).sum(-1).clamp_min(0.0).numpy()
