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
from typing import Sequence

import numpy as np
import torch

__all__ = ["TeacherForced", "teacher_forced_nll"]


@dataclass(frozen=True)
class TeacherForced:
    """``nll``: float64 ``[len(answer)]``, -log p(answer[i] | prompt, answer[:i]) in nats."""

    nll: np.ndarray
    prompt_len: int
    compressions: int  # compression points that ran (prefill end included)

    @property
    def total(self) -> float:
        return float(self.nll.sum())

    @property
    def mean(self) -> float:
        return float(self.nll.mean()) if self.nll.size else 0.0


@torch.inference_mode()
def teacher_forced_nll(runner, request: dict, answer_ids: Sequence[int]) -> TeacherForced:
    """Score ``answer_ids`` (token ids, e.g. the gold call then the end-of-turn token) as the
    continuation of the chat ``request`` under ``runner``'s method (see the module docstring)."""
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
        steps = torch.cat([logits[None], rest]).double()  # [len(answer), V]
        nll = -torch.log_softmax(steps, dim=-1)[torch.arange(len(answer)), torch.tensor(answer)]
        return TeacherForced(nll.numpy().astype(np.float64), len(prompt), int(ran))
    nll = np.zeros(len(answer), dtype=np.float64)
    for i, tok in enumerate(answer):
        nll[i] = -float(torch.log_softmax(logits.double(), dim=-1)[tok])
        if i == len(answer) - 1:
            break
        tracker.feed(token_bytes(runner.tokenizer, [tok])[0])
        logits = runner.forward(cache, [tok], seq_len)
        seq_len += 1
        c = runner.compress(cache, seq_len, prompt_classes + list(tracker.classes), len(prompt), i + 1,
                            segment_end=pre.segment_end, segment_slots=pre.segment_slots)
        ran += c is not None
    return TeacherForced(nll, len(prompt), int(ran))
