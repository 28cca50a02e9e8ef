"""Test support: a record's verdict re-derived from its own raw output (shared by the e2e tests)."""

from __future__ import annotations

from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools
from sglang_pask.eval.checker import check
from sglang_pask.eval.data import load_spec
from sglang_pask.eval.decode import TRUNCATED, decode_response


def recheck(records: list[dict], data: str) -> None:
    """Each record's verdict is the checker's on the record's own raw output: decoded again and
    checked again by BFCL's checker (the harness's rule for an empty output cut at max_tokens aside)."""
    entries = {e.id: e for e in load_spec(data)}
    for r in records:
        e = entries[r["id"]]
        _, name_map = bfcl_to_openai_tools(list(e.functions))
        dec = decode_response(r["raw"]["text"], r["raw"]["tool_calls"], name_map)
        if dec.calls is None:
            assert not r["valid"] and r["decoded"] is None, r["id"]
            assert r["error_type"] in (dec.error_type, TRUNCATED), r["id"]
            continue
        v = check(list(e.functions), dec.calls, list(e.ground_truth), e.category)
        assert (r["valid"], r["error_type"], r["decoded"]) == (v.valid, v.error_type, dec.calls), r["id"]
