"""Test-only helpers: deliberately wrong answers, and the BFCL rows no output can pass.

``altered_calls`` changes the gold answer (:func:`sglang_pask.eval.gold.gold_calls`, re-exported
here) so that it must fail: the first scalar argument gets a value outside its allowed list
(int+1, float+1.5, bool flipped, string + " WRONG"); if there is none, an unexpected parameter is
added to the first call.
"""

from __future__ import annotations

import copy

from sglang_pask.eval.gold import gold_calls

__all__ = ["gold_calls", "altered_calls", "UNPASSABLE"]

# BFCL v4 (bfcl-eval 2026.3.23) rows no output can pass: research/bfcl.md section 2.4.
UNPASSABLE = {
    "live_simple_106-63-0": "required array param allows only [] (nested type check never passes)",
    "live_simple_112-68-0": "required array param allows only [] (nested type check never passes)",
    "live_multiple_862-181-3": "ground truth needs journey_start_time, absent from the doc",
    "live_multiple_964-207-0": "ground truth uses param 'question', the doc requires 'statement'",
}

_OMIT = object()  # "no wrong value for this one"


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
