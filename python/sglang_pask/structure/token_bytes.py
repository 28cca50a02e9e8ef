"""Exact bytes per token id, as the live hook sees them (xgrammar's ``decoded_vocab``), and a
helper that tags an output text offline by tokenizing it and feeding a tracker."""

from __future__ import annotations

from functools import lru_cache

from .base import OutputTracker


@lru_cache(maxsize=4)
def _table(tokenizer) -> tuple[bytes, ...]:
    import xgrammar as xgr

    return tuple(xgr.TokenizerInfo.from_huggingface(tokenizer).decoded_vocab)


def token_bytes(tokenizer, ids) -> list[bytes]:
    """The decoded bytes of each id (xgrammar's ``decoded_vocab``; ids past it decode via the
    tokenizer)."""
    table = _table(tokenizer)
    return [table[i] if i < len(table) else tokenizer.decode([i]).encode() for i in ids]


def tag_output(tokenizer, text: str, tracker: OutputTracker):
    """Tokenize ``text`` (no special tokens added), feed the tracker, and return
    ``(ids, char offsets)``; the tracker then holds one class per token."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    for b in token_bytes(tokenizer, ids):
        tracker.feed(b)
    return ids, [tuple(o) for o in enc["offset_mapping"]]


def tag_output_ids(tokenizer, ids, tracker: OutputTracker):
    """Feed the tracker the exact bytes of generated ``ids`` (as the live hook does) and return
    ``(text, char offsets)``; a char split across tokens belongs to the token that completes it."""
    data = token_bytes(tokenizer, ids)
    offsets, pos, done = [], 0, b""
    for b in data:
        tracker.feed(b)
        done += b
        end = len(done.decode("utf-8", errors="ignore"))
        offsets.append((pos, end))
        pos = end
    return done.decode("utf-8", errors="replace"), offsets
