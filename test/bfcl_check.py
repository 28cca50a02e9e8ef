"""Test support: tag every entry of BFCL's AST categories and count what was found (issue 3's
BFCL check). Lives with the tests, not in ``structure/``, which imports nothing of ``eval/``.

BFCL function docs are converted to OpenAI tools by ``sglang_pask.eval.bfcl_tools`` (not
duplicated here); the entries come from ``sglang_pask.eval.data`` (the installed bfcl-eval).
"""

from __future__ import annotations

from collections import Counter

from sglang_pask.structure.classes import StructClass as C


def available() -> str | None:
    """``None`` if the BFCL check can run, else the reason it cannot."""
    try:
        import sglang_pask.eval.bfcl_tools  # noqa: F401
        import sglang_pask.eval.data  # noqa: F401
    except ImportError as e:
        return f"sglang_pask.eval.bfcl_tools / data not importable: {e}"
    try:
        import bfcl_eval  # noqa: F401
    except ImportError:
        return "bfcl-eval is not installed"
    return None


def tag_category(tagger, category: str) -> dict:
    """Tag every entry of one category; returns counts (entries, tokens, TOOL_NAME and
    PARAM_NAME tokens, tools whose JSON was not found) — raises on the first failure."""
    from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools
    from sglang_pask.eval.data import load_bfcl

    counts: Counter = Counter()
    for entry in load_bfcl([category]):
        tools, _names = bfcl_to_openai_tools(list(entry.functions))
        request = {"messages": [dict(m) for m in entry.messages], "tools": tools}
        try:
            tags = tagger.tag(request)
        except Exception as e:  # re-raised with the entry id, for the report
            raise RuntimeError(f"{entry.id}: {type(e).__name__}: {e}") from e
        counts["entries"] += 1
        counts["tokens"] += len(tags.classes)
        counts["tool_name_tokens"] += tags.classes.count(C.TOOL_NAME)
        counts["param_name_tokens"] += tags.classes.count(C.PARAM_NAME)
        counts["query_value_tokens"] += tags.classes.count(C.QUERY_VALUE)
        counts["tools"] += len(tools)
        counts["tools_not_found"] += sum(1 for n in tags.notes if n.startswith("tools["))
    return dict(counts)
