"""Output structure tags in the scheduler (active only with a policy; targets declared in
:mod:`sglang_pask.srt.seam`; the prompt side is :mod:`sglang_pask.srt.entrypoints.prompt_tags`).

* Output: AROUND ``XGrammarGrammar.accept_token`` / ``rollback`` feeds an output
  tracker, kept on the per-request grammar object, the exact bytes of each accepted token
  (xgrammar's decoded vocabulary); invariant: ``len(tracker) == len(grammar.accepted_tokens)``.
  Which tracker: tool-call structural tags -> ``qwen3_tools``, JSON schemas -> ``json``.
* Carrying: the prompt classes ride with the request into the scheduler as a KV-hint action
  (:mod:`.request_tags`), read there at every compression point (:mod:`.persist`).
* Read-back: AROUND ``mem_cache.common.release_kv_cache`` writes the output record of a finished
  request to the tag log (:mod:`.tag_log`).

Tagging must never break serving: any tagging error disables tagging for that request and is
logged once.
"""

from __future__ import annotations

import logging

from sglang_pask.srt.managers import tag_log
from sglang_pask.srt.state import state

logger = logging.getLogger("sglang_pask")

_TRACKER_BY_DISPATCH = {"structural_tag": "qwen3_tools", "json": "json"}
_DISABLED = False  # sentinel stored on a grammar whose tagging failed


# --- output side (scheduler) ----------------------------------------------------------------

def _decoded_vocab(grammar) -> list[bytes]:
    """One server process serves one tokenizer, so its decoded vocabulary is built once
    (:attr:`~..state.PaskState.vocab`; xgrammar returns a new TokenizerInfo wrapper on every
    ``ctx.tokenizer_info`` access: no identity to key on)."""
    st = state()
    if st.vocab is None:
        st.vocab = list(grammar.ctx.tokenizer_info.decoded_vocab)
    return st.vocab


def _tracker(grammar):
    """The request's tracker, created at its first accepted token (with the vocabulary)."""
    tracker = getattr(grammar, "_pask_tracker", None)
    if tracker is None:
        from sglang_pask.structure import make_tracker

        stats = getattr(grammar, "grammar_stats", None)
        name = _TRACKER_BY_DISPATCH.get(getattr(stats, "dispatch_type", None), "qwen3_tools")
        grammar._pask_vocab = _decoded_vocab(grammar)
        tracker = grammar._pask_tracker = make_tracker(name)
    return tracker


def around_accept(original, grammar, token: int):
    before = len(grammar.accepted_tokens)
    result = original(grammar, token)
    if getattr(grammar, "_pask_tracker", None) is _DISABLED or len(grammar.accepted_tokens) == before:
        return result
    try:
        tracker = _tracker(grammar)
        vocab = grammar._pask_vocab
        tracker.feed(vocab[token] if 0 <= token < len(vocab) else b"")
    except Exception as e:
        grammar._pask_tracker = _DISABLED
        logger.warning("sglang_pask: output tagging disabled for a request: %r", e)
    return result


def around_rollback(original, grammar, k: int):
    result = original(grammar, k)
    tracker = getattr(grammar, "_pask_tracker", None)
    if tracker is not None and tracker is not _DISABLED and k > 0:
        tracker.rollback(min(k, len(tracker)))
    return result


def around_release(original, req, *args, **kwargs):
    result = original(req, *args, **kwargs)
    grammar = getattr(req, "grammar", None)
    tracker = getattr(grammar, "_pask_tracker", None) if grammar is not None else None
    if tracker is not None and tracker is not _DISABLED and req.finished() and tag_log.tag_log_dir():
        tag_log.write("output", {
            "rid": req.rid, "part": "output", "output_ids": list(req.output_ids),
            "token_ids": list(grammar.accepted_tokens), "classes": [int(c) for c in tracker.classes],
            "stable": tracker.stable,
        })
    return result
