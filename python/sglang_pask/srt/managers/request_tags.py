"""A request's structure tags, carried from the HTTP process to the scheduler with the request.

Carrier: SGLang's versioned KV-hint envelope (``GenerateReqInput.kv_hints`` ->
``TokenizedGenerateReqInput.kv_hints`` -> ``Req.kv_hints``; consumers ignore action types they
do not implement). The HTTP process appends one action ``{"action_type": "sglang_pask.tags",
"action_version": "1", "payload": {"n": P, "runs": [[class, count], ...], "tracker": name,
"seg": S}}`` (run-length classes of the P prompt tokens, the output tracker the prompt implies,
and the shared segment's end, 0 when none or not in segment mode).

Trust boundary (DESIGN.md §6): the action is the server's own. :func:`attach` signs its payload
with an HMAC under a key made once per server (``$SGLANG_PASK_HINT_KEY``, set by the launcher's process
before it starts the scheduler, inherited by every child; a client never sees it). A client-written
``sglang_pask.*`` action is refused with a 400 at the HTTP edge (:mod:`..entrypoints.edge`), and the scheduler
reads only an action whose signature verifies (:func:`own_payload`); any other is counted
(``forged``) and ignored. A signed payload is still validated (:func:`validate`: lengths, class
range, tracker, segment end) before anything reads it; a bad one refuses the request with one
line (:attr:`RequestTags.error`, through :mod:`.prompt_limits`), never a silent Full KV.

Scheduler side (:class:`RequestTags`): prompt classes from the action, output classes from the
grammar's tracker (constrained requests, fed by the xgrammar hooks in :mod:`.output_tags`; the
prompt's by :mod:`..entrypoints.prompt_tags`) or from a
tracker fed the request's own output ids (unconstrained). A request without an action (its
tagging failed, the ids differ from the ones SGLang runs, or a ``/generate`` with ids) is classed
``OTHER`` throughout and counted (:attr:`~..state.PaskState.tags`); it is served normally, under its budget.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Optional, Sequence

import numpy as np

from sglang_pask.environ import envs
from sglang_pask.srt.state import state
from sglang_pask.structure.classes import StructClass

logger = logging.getLogger("sglang_pask")

ACTION_TYPE = "sglang_pask.tags"
ACTION_VERSION = "1"
#: the action types only the server writes (a client's is refused at the HTTP edge)
RESERVED_PREFIX = "sglang_pask."


class TagError(ValueError):
    """Tags that cannot be used: the message names the field and the value."""


def make_key() -> None:
    """A new signing key for this server's processes (the launcher's, before it starts any)."""
    import secrets

    envs.SGLANG_PASK_HINT_KEY.set(secrets.token_hex(32))


def _mac(payload: dict) -> Optional[str]:
    """HMAC-SHA256 of ``payload`` (without its ``mac``) under this server's key; None when the
    process has no key (no policy: nothing signs, nothing verifies)."""
    key = envs.SGLANG_PASK_HINT_KEY.get()
    if not key:
        return None
    body = json.dumps({k: v for k, v in payload.items() if k != "mac"}, sort_keys=True,
                      separators=(",", ":"), default=str)
    return hmac.new(bytes.fromhex(key), body.encode(), hashlib.sha256).hexdigest()


def signed(action) -> bool:
    """Whether ``action`` (a KvHintAction) is this server's own tags action, signature checked."""
    payload = getattr(action, "payload", None)
    if (getattr(action, "action_type", None) != ACTION_TYPE or getattr(action, "action_version", None) != ACTION_VERSION
            or not isinstance(payload, dict) or not isinstance(payload.get("mac"), str)):
        return False
    want = _mac(payload)
    return want is not None and hmac.compare_digest(want, payload["mac"])


def client_actions(envelope) -> list[str]:
    """The ``sglang_pask.*`` action types in ``envelope`` that this server did not write."""
    return [str(a.action_type) for a in getattr(envelope, "actions", None) or ()
            if str(getattr(a, "action_type", "")).startswith(RESERVED_PREFIX) and not signed(a)]


def validate(payload: dict, prompt_len: int) -> np.ndarray:
    """The prompt classes of a (signed) payload, int64 ``[prompt_len]``; raises :class:`TagError`
    naming what is wrong: ``n`` is not the prompt's length, a run is not ``[class, count]`` with a
    class of :class:`StructClass` and a count >= 1, the runs do not cover ``n``, the tracker is
    not one the server has, the segment end is not an int in ``[0, n)``."""
    from sglang_pask.structure import TRACKERS

    n = payload.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n != prompt_len:
        raise TagError(f"tags: n = {n!r}, the prompt has {prompt_len} tokens")
    runs = payload.get("runs")
    if not isinstance(runs, list):
        raise TagError(f"tags: runs must be a list, got {type(runs).__name__}")
    total = 0
    for i, run in enumerate(runs):
        ok = (isinstance(run, (list, tuple)) and len(run) == 2
              and all(isinstance(v, int) and not isinstance(v, bool) for v in run))
        if not ok:
            raise TagError(f"tags: runs[{i}] must be [class, count], got {run!r}"[:200])
        cls, count = run
        if not 0 <= cls < len(StructClass):
            raise TagError(f"tags: runs[{i}] has class {cls}, outside 0..{len(StructClass) - 1}")
        if count < 1:
            raise TagError(f"tags: runs[{i}] has count {count}")
        total += count
    if total != n:
        raise TagError(f"tags: the runs cover {total} tokens, n = {n}")
    tracker = payload.get("tracker", "qwen3_tools")
    if tracker not in TRACKERS:
        raise TagError(f"tags: unknown tracker {tracker!r} (the server has {', '.join(sorted(TRACKERS))})"[:200])
    seg = payload.get("seg", 0)
    if not isinstance(seg, int) or isinstance(seg, bool) or not 0 <= seg < n:
        raise TagError(f"tags: seg = {seg!r}, outside 0..{n - 1}"[:200])
    return decode_runs(runs)


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

    payload = {"n": len(classes), "runs": encode_runs(classes), "tracker": tracker, "seg": int(segment_end)}
    mac = _mac(payload)
    if mac is None:
        raise RuntimeError(f"${envs.SGLANG_PASK_HINT_KEY.name} is not set: the launcher's process makes it "
                           "with a policy")
    payload["mac"] = mac
    action = KvHintAction(action_id=f"pask-{adapted.rid}", action_type=ACTION_TYPE,
                          action_version=ACTION_VERSION, payload=payload)
    old = adapted.kv_hints
    if old is None:
        adapted.kv_hints = KvHintsEnvelope(protocol_version="1", message_id=str(adapted.rid),
                                           actions=[action])
    else:
        old = decode_kv_hints_envelope(old)
        adapted.kv_hints = KvHintsEnvelope(protocol_version=old.protocol_version,
                                           message_id=old.message_id, actions=[*old.actions, action])


def own_payload(req) -> Optional[dict]:
    """The payload of the request's signed tags action (None: none); every other
    ``sglang_pask.*`` action is counted as forged and ignored."""
    env = getattr(req, "kv_hints", None)
    found = None
    for action in getattr(env, "actions", None) or ():
        if signed(action):
            found = found or dict(action.payload)
        elif str(getattr(action, "action_type", "")).startswith(RESERVED_PREFIX):
            state().tags["forged"] += 1
            logger.warning("sglang_pask: ignored an unsigned %s action on %s", action.action_type, req.rid)
    return found


class RequestTags:
    """Classes of one scheduler ``Req``'s logical positions (prompt, then output)."""

    def __init__(self, req):
        self.prompt_len = len(req.origin_input_ids)
        #: why this request's (signed) tags cannot be used: the request is refused with it
        self.error: Optional[str] = None
        payload, prompt = own_payload(req), None
        if payload is not None:
            try:
                prompt = validate(payload, self.prompt_len)
            except TagError as e:
                self.error, payload = str(e), None
                state().tags["refused"] += 1
                logger.warning("sglang_pask: refused %s: %s", req.rid, e)
        self.tagged = prompt is not None
        self.prompt = prompt if self.tagged else np.full(self.prompt_len, int(StructClass.OTHER), np.int64)
        state().tags["tagged" if self.tagged else "untagged"] += 1
        self.tracker_name = (payload or {}).get("tracker") or "qwen3_tools"
        #: end of the shared segment (0: none); always leaves at least one own token (validated)
        self.segment_end = int((payload or {}).get("seg", 0))
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
                state().tags["output_fallback"] += 1
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
