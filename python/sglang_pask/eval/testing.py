"""Test-only helpers: answers derived from ground truth, and deliberately wrong ones.

``gold_calls`` picks, per parameter, the first allowed value that is not ``""``; a parameter whose
only allowed value is ``""`` is omitted when optional and sent as ``""`` when the doc requires it
(BFCL has one row, live_multiple_507-149-4, that passes only that way). Dict values recurse one
level (BFCL's possible_answer nests allowed-lists inside dicts and lists of dicts). An optional
ground-truth parameter missing from the doc (parallel_multiple_12, _26) is omitted.

``altered_calls`` changes the gold answer so that it must fail: the first scalar argument gets a
value outside its allowed list (int+1, float+1.5, bool flipped, string + " WRONG"); if there is
none, an unexpected parameter is added to the first call.
"""

from __future__ import annotations

import copy

__all__ = ["gold_calls", "altered_calls", "UNPASSABLE"]

# BFCL v4 (bfcl-eval 2026.3.23) rows no output can pass: research/bfcl.md section 2.4.
UNPASSABLE = {
    "live_simple_106-63-0": "required array param allows only [] (nested type check never passes)",
    "live_simple_112-68-0": "required array param allows only [] (nested type check never passes)",
    "live_multiple_862-181-3": "ground truth needs journey_start_time, absent from the doc",
    "live_multiple_964-207-0": "ground truth uses param 'question', the doc requires 'statement'",
}


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


def _wrong(value, allowed: list):
    if isinstance(value, bool):
        cand = not value
    elif isinstance(value, int):
        cand = value + 1
    elif isinstance(value, float):
        cand = value + 1.5
    elif isinstance(value, str):
        cand = value + " WRONG"
    else:
        return _OMIT
    return _OMIT if cand in allowed else cand


def altered_calls(ground_truth: list[dict], functions: list[dict]) -> list[dict]:
    """A copy of gold_calls with one argument made wrong (see module docstring)."""
    calls = copy.deepcopy(gold_calls(ground_truth, functions))
    for call, gt in zip(calls, ground_truth):
        ((name, args),) = call.items()
        for p, v in args.items():
            w = _wrong(v, gt[name][p])
            if w is not _OMIT:
                args[p] = w
                return calls
    ((name, args),) = calls[0].items()
    args["pask_unexpected_param"] = 1
    return calls
