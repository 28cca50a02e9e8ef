"""Prompt structure tags at the HTTP edge (active only with a policy; the target is declared in
:mod:`sglang_pask.srt.seam`).

AFTER ``OpenAIServingChat._convert_to_internal_request`` tags the request as SGLang renders it
(:func:`sglang_pask.rendering.render_chat`, the one rendering path of the server, ``pask tag``,
``pask generate``, eval and training) and checks the token ids against the ones SGLang will run;
the request gets a rid here if it had none, so the record can be found. The prompt classes ride
with the request into the scheduler as a signed KV-hint action
(:mod:`sglang_pask.srt.managers.request_tags`); the output side is
:mod:`sglang_pask.srt.managers.output_tags`.

Tagging must never break serving: any tagging error is logged and the request is served untagged.
"""

from __future__ import annotations

import logging
import uuid

from sglang_pask.srt.managers import tag_log

logger = logging.getLogger("sglang_pask")


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
            from sglang_pask.srt.managers.request_tags import attach
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
    cache on, the request's cache namespace becomes its segment's
    (:mod:`sglang_pask.srt.mem_cache.radix_cache`)."""
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
