"""Structure: one structural class per token of a request (prompt and generated output).

Registry and factory. ``TAGGERS`` are prompt region taggers (run in order, later ones overwrite
earlier ones where they overlap); ``TRACKERS`` are output trackers. Typical use::

    tagger = make_prompt_tagger(tokenizer)               # once per tokenizer
    tags = tagger.tag(request_body)                       # PromptTags, one class per token
    tracker = tracker_for_request(request_body)           # per request
    for tok in accepted: tracker.feed(decoded_vocab[tok])  # exact bytes of each token
    tracker.rollback(k); tracker.classes; tracker.stable
"""

from __future__ import annotations

from typing import Callable, Sequence

from .base import OutputTracker, PromptContext, PromptTags, RegionTagger
from .classes import PRECEDENCE, RANK, StructClass, resolve
from .history_tagger import HistoryCallsTagger
from .json_tracker import JsonTracker
from .prompt_tagger import PromptTagger
from .spans import Span, from_spans, to_spans
from .sql_ddl import SqlDdlTagger, catalog_from_texts
from .sql_tracker import SqlTracker
from .tools_tagger import JsonSchemaTagger, ToolsTagger
from .validate import ToolSchemaError

TAGGERS: dict[str, type[RegionTagger]] = {
    ToolsTagger.name: ToolsTagger,
    JsonSchemaTagger.name: JsonSchemaTagger,
    SqlDdlTagger.name: SqlDdlTagger,
    HistoryCallsTagger.name: HistoryCallsTagger,
}

TRACKERS: dict[str, Callable[..., OutputTracker]] = {
    "qwen3_tools": lambda **kw: JsonTracker(tool_calls=True),
    "json": lambda **kw: JsonTracker(tool_calls=False),
    "sql": lambda catalog=None, **kw: SqlTracker(catalog),
}


def make_prompt_tagger(tokenizer, taggers: Sequence[str] = tuple(TAGGERS)) -> PromptTagger:
    """A prompt tagger running the named region taggers (default: all, in registry order)."""
    unknown = [t for t in taggers if t not in TAGGERS]
    if unknown:
        raise ValueError(f"unknown tagger(s) {unknown}; choose from {sorted(TAGGERS)}")
    return PromptTagger(tokenizer, [TAGGERS[t]() for t in taggers])


def make_tracker(name: str, **kw) -> OutputTracker:
    if name not in TRACKERS:
        raise ValueError(f"unknown tracker {name!r}; choose from {sorted(TRACKERS)}")
    return TRACKERS[name](**kw)


def tracker_name_for_request(request: dict) -> str:
    """``json`` for a ``response_format`` JSON request, ``sql`` when the messages declare
    CREATE TABLE and there are no tools, else ``qwen3_tools`` (tool calls inside free text)."""
    rf = request.get("response_format") or {}
    if isinstance(rf, dict) and rf.get("type") in ("json_schema", "json_object"):
        return "json"
    if not request.get("tools") and _catalog(request):
        return "sql"
    return "qwen3_tools"


def _catalog(request: dict):
    from .prompt_tagger import flatten_content

    msgs = request.get("messages") or []
    return catalog_from_texts(flatten_content(m.get("content")) for m in msgs if isinstance(m, dict))


def tracker_for_request(request: dict, name: str | None = None) -> OutputTracker:
    """The output tracker a request's generated tokens should be fed to."""
    name = name or tracker_name_for_request(request)
    return make_tracker(name, catalog=_catalog(request) if name == "sql" else None)


__all__ = [
    "OutputTracker", "PromptContext", "PromptTags", "RegionTagger", "StructClass", "PRECEDENCE",
    "RANK", "resolve", "Span", "to_spans", "from_spans", "PromptTagger", "JsonTracker",
    "SqlTracker", "ToolsTagger", "JsonSchemaTagger", "SqlDdlTagger", "HistoryCallsTagger", "ToolSchemaError",
    "TAGGERS", "TRACKERS", "make_prompt_tagger", "make_tracker", "tracker_for_request",
    "tracker_name_for_request", "catalog_from_texts",
]
