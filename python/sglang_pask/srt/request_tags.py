"""A request's structure tags, carried from the HTTP process to the scheduler with the request.

Carrier: SGLang's versioned KV-hint envelope (``GenerateReqInput.kv_hints`` ->
``TokenizedGenerateReqInput.kv_hints`` -> ``Req.kv_hints``; consumers ignore action types they
do not implement). The HTTP process appends one action ``{"action_type": "sglang_pask.tags",
"action_version": "1", "payload": {"n": P, "runs": [[class, count], ...], "tracker": name,
"seg": S}}`` (run-length classes of the P prompt tokens, the output tracker the prompt implies,
and the shared segment's end, 0 when none or not in segment mode).

Scheduler side (:class:`RequestTags`): prompt classes from the action, output classes from the
grammar's tracker (constrained requests, fed by the xgrammar hooks in :mod:`.tag_hooks`) or from a
tracker fed the request's own output ids (unconstrained). A request without a valid action (its
tagging failed, or the ids differ from the ones SGLang runs) is classed ``OTHER`` throughout and
counted (:data:`COUNTERS`); it is served normally.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np

from sglang_pask.structure.classes import StructClass

logger = logging.getLogger("sglang_pask")

ACTION_TYPE = "sglang_pask.tags"
ACTION_VERSION = "1"
#: scheduler-process counters (reported under ``internal_states[0]["pask"]["tags"]``)
COUNTERS = {"tagged": 0, "untagged": 0, "output_fallback": 0}


def encode_runs(classes: Sequence[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for c in classes:
        c = int(c)
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return runs


def decode_runs(runs: Sequence[Sequence[int]]) -> np.ndarray:
    if not runs:
        return np.zeros(0, dtype=np.int64)
    cls, counts = zip(*runs)
    return np.repeat(np.asarray(cls, dtype=np.int64), np.asarray(counts, dtype=np.int64))


def attach(adapted, classes: Sequence[int], tracker: str, segment_end: int = 0) -> None:
    """Append the tags action to ``adapted.kv_hints`` (a GenerateReqInput), keeping any
    envelope the client sent."""
    from sglang.srt.managers.kv_hints import KvHintAction, KvHintsEnvelope, decode_kv_hints_envelope

    action = KvHintAction(action_id=f"pask-{adapted.rid}", action_type=ACTION_TYPE,
                          action_version=ACTION_VERSION,
                          payload={"n": len(classes), "runs": encode_runs(classes), "tracker": tracker,
                                   "seg": int(segment_end)})
    old = adapted.kv_hints
    if old is None:
        adapted.kv_hints = KvHintsEnvelope(protocol_version="1", message_id=str(adapted.rid),
                                           actions=[action])
    else:
        old = decode_kv_hints_envelope(old)
        adapted.kv_hints = KvHintsEnvelope(protocol_version=old.protocol_version,
                                           message_id=old.message_id, actions=[*old.actions, action])


def _action_payload(req) -> Optional[dict]:
    env = getattr(req, "kv_hints", None)
    for action in getattr(env, "actions", None) or ():
        if action.action_type == ACTION_TYPE and action.action_version == ACTION_VERSION:
            return dict(action.payload)
    return None


class RequestTags:
    """Classes of one scheduler ``Req``'s logical positions (prompt, then output)."""

    def __init__(self, req):
        self.prompt_len = len(req.origin_input_ids)
        payload = None
        try:
            payload = _action_payload(req)
            prompt = decode_runs(payload["runs"]) if payload else None
        except Exception as e:  # a malformed action: serve untagged
            logger.warning("sglang_pask: bad tags on %s: %r", req.rid, e)
            prompt = None
        self.tagged = prompt is not None and len(prompt) == self.prompt_len
        self.prompt = prompt if self.tagged else np.full(self.prompt_len, int(StructClass.OTHER), np.int64)
        COUNTERS["tagged" if self.tagged else "untagged"] += 1
        self.tracker_name = (payload or {}).get("tracker") or "qwen3_tools"
        seg = (payload or {}).get("seg", 0) if self.tagged else 0
        #: end of the shared segment (0: none); always leaves at least one own token
        self.segment_end = int(seg) if isinstance(seg, int) and 0 < seg < self.prompt_len else 0
        #: per unit, the segment positions that persist (:mod:`.segments`; computed once)
        self.segment_kept = None
        self.segment_slots = 0
        self.chunk_plan = None  # the chunked prefill need (.chunked.plan), once per request
        self._tracker = None
        self._fed = 0
        self._failed = not self.tagged

    def output(self, req, n: int) -> np.ndarray:
        """Classes of the first ``n`` output tokens."""
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        if not self._failed:
            try:
                grammar_tracker = getattr(getattr(req, "grammar", None), "_pask_tracker", None)
                if grammar_tracker and len(grammar_tracker) >= n:
                    return np.asarray(grammar_tracker.classes[:n], dtype=np.int64)
                return self._own(req, n)
            except Exception as e:
                self._failed = True
                COUNTERS["output_fallback"] += 1
                logger.warning("sglang_pask: output tagging failed for %s: %r", req.rid, e)
        return np.full(n, int(StructClass.OTHER), np.int64)

    def _own(self, req, n: int) -> np.ndarray:
        from sglang_pask.structure import make_tracker
        from sglang_pask.structure.token_bytes import token_bytes

        if self._tracker is None:
            self._tracker = make_tracker(self.tracker_name)
        if self._fed < n:
            new = list(req.output_ids[self._fed:n])
            for b in token_bytes(req.tokenizer, new):
                self._tracker.feed(b)
            self._fed = n
        return np.asarray(self._tracker.classes[:n], dtype=np.int64)

    def classes(self, req, seq_len: int) -> np.ndarray:
        """int64 ``[seq_len]``: classes of positions ``0 .. seq_len - 1``."""
        out = self.output(req, seq_len - self.prompt_len)
        return np.concatenate([self.prompt[:seq_len], out])


def tags_of(req) -> RequestTags:
    tags = getattr(req, "_pask_tags", None)
    if tags is None:
        tags = req._pask_tags = RequestTags(req)
    return tags
