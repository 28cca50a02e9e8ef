"""Structure tags inside a running SGLang server (active only with a policy; targets declared in
:mod:`.seam`).

* Prompt (HTTP process): AFTER ``OpenAIServingChat._convert_to_internal_request`` tags the
  request as SGLang renders it (:func:`sglang_pask.rendering.render_chat`, the one rendering path
  of the server, ``pask tag``, ``pask generate``, eval and training) and checks the token ids against the ones
  SGLang will run; the request gets a rid here if it had none, so the record can be found.
* Output (scheduler): AROUND ``XGrammarGrammar.accept_token`` / ``rollback`` feeds an output
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
import uuid

from sglang_pask.srt import tag_log

logger = logging.getLogger("sglang_pask")

_TRACKER_BY_DISPATCH = {"structural_tag": "qwen3_tools", "json": "json"}
_DISABLED = False  # sentinel stored on a grammar whose tagging failed
# One server process serves one tokenizer, so its decoded vocabulary is built once. (xgrammar
# returns a new TokenizerInfo wrapper on every ``ctx.tokenizer_info`` access: no identity to key on.)
_vocab: list[bytes] | None = None


# --- prompt side (HTTP process) -------------------------------------------------------------

def _prompt_tagger(serving):
    tagger = getattr(serving, "_pask_prompt_tagger", None)
    if tagger is None:
        from sglang_pask.structure import make_prompt_tagger

        tagger = serving._pask_prompt_tagger = make_prompt_tagger(serving.tokenizer_manager.tokenizer)
    return tagger


def after_convert(result, serving, request, *args, **kwargs):
    adapted, _ = result
    if adapted.rid is None:
        adapted.rid = uuid.uuid4().hex
    try:
        from sglang_pask.rendering import render_chat

        tokenizer = serving.tokenizer_manager.tokenizer
        tags = render_chat(tokenizer, request, tagger=_prompt_tagger(serving))
        notes = list(tags.notes)
        if adapted.input_ids is not None and list(adapted.input_ids) != list(tags.token_ids):
            notes.append("token ids differ from the ids SGLang runs")
        else:  # the tags travel with the request to the scheduler (request_tags)
            from sglang_pask.srt.request_tags import attach
            from sglang_pask.structure import tracker_name_for_request

            seg = _segment(adapted, tags)
            attach(adapted, [int(c) for c in tags.classes], tracker_name_for_request(tags.view), seg)
        tag_log.write("prompt", {"rid": adapted.rid, "part": "prompt", "token_ids": list(tags.token_ids),
                                 "classes": [int(c) for c in tags.classes], "notes": notes})
    except Exception as e:  # never fail a request because of tagging
        logger.warning("sglang_pask: prompt tagging failed for %s: %r", adapted.rid, e)
    return None


def _segment(adapted, tags) -> int:
    """The shared segment's end when the server runs in segment mode (else 0); with the radix
    cache on, the request's cache namespace becomes its segment's (:mod:`.radix_cache`)."""
    from sglang_pask.srt.serving import active_config

    config = active_config()
    if config is None or not config.rule.active:
        return 0
    seg = tags.segment_end
    if seg and config.radix:
        import hashlib

        digest = hashlib.sha256(",".join(map(str, tags.token_ids[:seg])).encode()).hexdigest()[:24]
        space = f"pask-segment:{config.stamp}:{digest}"
        old = adapted.extra_key
        adapted.extra_key = space if not old else f"{old}|{space}"
    return seg


# --- output side (scheduler) ----------------------------------------------------------------

def _decoded_vocab(grammar) -> list[bytes]:
    global _vocab
    if _vocab is None:
        _vocab = list(grammar.ctx.tokenizer_info.decoded_vocab)
    return _vocab


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
