"""Gold answers: the call(s) an entry's ground truth accepts, and their text as the model writes it.

``gold_calls`` picks, per parameter, the first allowed value that is not ``""``; a parameter whose
only allowed value is ``""`` is omitted when optional and sent as ``""`` when the doc requires it
(BFCL has one row, live_multiple_507-149-4, that passes only that way). Dict values recurse one
level (BFCL's possible_answer nests allowed-lists inside dicts and lists of dicts). An optional
ground-truth parameter missing from the doc (parallel_multiple_12, _26) is omitted.

``forced_answer_text`` spells those calls as SGLang's constrained decoding forces them (the qwen
structural tag of ``make serve`` and of the reference runner's ``grammar="sglang"``): each call is
``<tool_call>\n{"name":"NAME", "arguments":ARGS}\n</tool_call>`` with ARGS compact-keyed JSON
(``json.dumps`` separators), blocks joined by one newline, then the end-of-turn token. Tool names
are the OpenAI-safe names of :func:`~sglang_pask.eval.bfcl_tools.bfcl_to_openai_tools`. This is
the text teacher-forced NLL scores (:func:`sglang_pask.eval.api.gold_nll`).
"""

from __future__ import annotations

import json

from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools

__all__ = ["gold_calls", "forced_answer_text", "END_OF_TURN"]

END_OF_TURN = "<|im_end|>"  # Qwen3's end of an assistant turn


def _pick(allowed: list, required: bool):
    """First non-"" allowed value (derived), or a sentinel meaning "omit"."""
    for v in allowed:
        if v != "":
            return _derive(v)
    return "" if required else _OMIT


_OMIT = object()


def _derive(v):
    if isinstance(v, dict):  # nested possible-answer dict: key -> allowed list
        out = {}
        for k, allowed in v.items():
            val = _pick(allowed, False) if isinstance(allowed, list) else allowed
            if val is not _OMIT:
                out[k] = val
        return out
    if isinstance(v, list):
        return [_derive(x) if isinstance(x, dict) else x for x in v]
    return v


def _doc_params(functions: list[dict], name: str) -> tuple[set, set]:
    """(required, known) parameter names of the doc called ``name``."""
    for f in functions:
        if f["name"] == name:
            params = f.get("parameters", {})
            return set(params.get("required", [])), set(params.get("properties", {}))
    return set(), set()


def gold_calls(ground_truth: list[dict], functions: list[dict]) -> list[dict]:
    """``[{bfcl_name: {arg: value}}]`` built from ground truth (see module docstring)."""
    calls = []
    for gt in ground_truth:
        ((name, params),) = gt.items()
        req, known = _doc_params(functions, name)
        args = {}
        for p, allowed in params.items():
            if p not in known and "" in allowed:
                continue  # ground truth names an optional param the doc lacks: omit it
            val = _pick(allowed, p in req)
            if val is not _OMIT:
                args[p] = val
        calls.append({name: args})
    return calls


def forced_answer_text(entry, end: str = END_OF_TURN) -> str:
    """The gold call(s) of ``entry`` (an eval ``Entry``) in SGLang's forced spelling (module
    docstring), followed by ``end``."""
    _, name_map = bfcl_to_openai_tools(list(entry.prompt_functions))
    to_openai = {bfcl: oa for oa, bfcl in name_map.items()}
    blocks = [f'<tool_call>\n{{"name":"{to_openai[name]}", "arguments":{json.dumps(args, ensure_ascii=False)}}}'
              "\n</tool_call>"
              for call in gold_calls(list(entry.ground_truth), list(entry.functions)) for name, args in call.items()]
    return "\n".join(blocks) + end
