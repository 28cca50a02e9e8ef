"""KVzip's scores in the reference runner (:class:`~sglang_pask.methods.kvzip.KVzip`; kvpress
``KVzipPress.prepare`` / ``score_kvzip`` at 8bb29b9).

The context is every token written so far (positions ``[0, T)``: here the whole prompt -- system
message, tools and user turn -- since a tool call needs all of it; kvpress scores the user content
after the chat template's prefix). It is cut into chunks of ``chunk_size`` tokens; for chunk ``[a,
b)`` a copy of the cache runs, at positions ``T ..``, the repeat request (first chunk: "\\n\\nRepeat
the previous context exactly."; later ones: "...exactly, starting with" and the previous chunk's
last 8 tokens), the chat template's closing of a user turn and opening of the assistant's, and the
chunk's own tokens teacher-forced; its queries see the first ``n_sink`` positions, the chunk and
themselves. A slot's score is the most attention any of those queries of its KV group pays it
(``kvzip_max``). Cost: one extra forward of about the context's length per compression.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

FIRST = "\n\nRepeat the previous context exactly."
LATER = "\n\nRepeat the part of the previous context exactly, starting with"
OVERLAP = 8  # kvpress prev_postfix_size


@functools.lru_cache(maxsize=8)
def _texts(tokenizer) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(first request ids, later request ids, suffix ids): the suffix is what the chat template
    writes between a user message's content and the assistant's turn (kvpress's dummy split)."""
    from sglang_pask.rendering import render_chat

    enc = functools.partial(tokenizer.encode, add_special_tokens=False)
    suffix = "\n"
    if getattr(tokenizer, "chat_template", None):
        dummy = "dummy context"
        sep = "\n" + "#" * len(dummy)
        body = {"messages": [{"role": "user", "content": dummy + sep}],
                "chat_template_kwargs": {"enable_thinking": False}}
        suffix = tokenizer.decode(render_chat(tokenizer, body).token_ids).split(sep)[1]
    return tuple(enc(FIRST)), tuple(enc(LATER)), tuple(enc(suffix))


def reconstruction_chunks(tokenizer, ids, chunk_size: int, n_sink: int) -> list[tuple[int, int, int, list[int]]]:
    """KVzip's scoring forwards for a context of token ids ``ids`` (positions ``[0, T)``), one
    per chunk: ``(a, b, sinks, tokens)`` -- the chunk ``[a, b)``, the first ``sinks`` positions it
    also sees, and the tokens run at positions ``T ..`` (the repeat request, the chat template's
    turn change, the chunk teacher-forced). The reference runner and the server (``srt/attention/reconstruct.py``)
    both run exactly these."""
    ids = [int(t) for t in ids]
    first, later, suffix = _texts(tokenizer)
    out = []
    for a in range(0, len(ids), chunk_size):
        b = min(a + chunk_size, len(ids))
        request = list(first) if a == 0 else list(later) + ids[max(a - OVERLAP, 0):a]
        out.append((a, b, min(n_sink, a), request + list(suffix) + ids[a:b]))
    return out


@torch.no_grad()
def kvzip_heads(runner, cache) -> list[np.ndarray]:
    """Per layer, float ``[Hkv, n_l]`` aligned with the layer's positions (0 at slots outside every
    chunk's reach and where a head no longer holds the slot)."""
    method = runner.method
    T = cache.get_seq_length()
    ids = cache.token_ids[:T]
    if len(ids) != T:
        raise RuntimeError(f"KVzip: the cache recorded {len(ids)} token ids for {T} positions")
    out = [torch.zeros(lay.keys.shape[1], lay.keys.shape[2]) for lay in cache.layers]
    for a, b, sinks, tokens in reconstruction_chunks(runner.tokenizer, ids, method.chunk_size, method.n_sink):
        work = cache.clone()
        work.reconstruct = (a, b, sinks, T)
        runner.forward(work, tokens, T)
        for li, (lay, done) in enumerate(zip(cache.layers, work.layers)):
            n = lay.positions.shape[0]
            got = done.kvzip_max[:, :n].float()  # [Hkv, n]: the context's slots come first
            inside = (lay.positions >= a) & (lay.positions < b)
            out[li] = torch.where(inside[None], torch.maximum(out[li], got), out[li])
    for li, lay in enumerate(cache.layers):
        if lay.head_mask is not None:
            out[li] = out[li] * lay.head_mask
    return [o.numpy() for o in out]
