"""Must-show: every entry of BFCL's 8 AST categories, through our render -> decode path and
BFCL's own checker. Gold answers (derived from ground truth) pass, altered ones fail; the rows no
output can pass are named in testing.UNPASSABLE. Needs no model."""

import collections

import pytest
from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools
from sglang_pask.eval.checker import check
from sglang_pask.eval.data import BFCL_CATEGORIES, load_bfcl
from sglang_pask.eval.decode import decode_text, render_tool_calls
from sglang_pask.eval.testing import UNPASSABLE, altered_calls, gold_calls

EXPECTED_SIZES = {
    "simple_python": 400,
    "multiple": 200,
    "parallel": 200,
    "parallel_multiple": 200,
    "live_simple": 258,
    "live_multiple": 1053,
    "live_parallel": 16,
    "live_parallel_multiple": 24,
}


def _through_our_path(entry, calls):
    """Rename to OpenAI names, render Qwen3 text, decode (restoring names), check."""
    tools, name_map = bfcl_to_openai_tools(list(entry.functions))
    to_openai = {b: o for o, b in name_map.items()}
    text = render_tool_calls([{to_openai.get(n, n): a for n, a in c.items()} for c in calls])
    dec = decode_text(text, name_map)
    assert dec.calls is not None, (entry.id, dec)
    assert dec.calls == calls, entry.id  # names restored, values round-trip JSON
    return check(list(entry.functions), dec.calls, list(entry.ground_truth), entry.category)


@pytest.mark.parametrize("category", BFCL_CATEGORIES)
def test_ground_truth_passes_altered_fails(category):
    entries = load_bfcl([category])
    assert len(entries) == EXPECTED_SIZES[category]
    stats = collections.Counter()
    for e in entries:
        gold = gold_calls(list(e.ground_truth), list(e.functions))
        ok = _through_our_path(e, gold)
        if e.id in UNPASSABLE:
            assert not ok.valid, f"{e.id} is listed unpassable but passed"
            stats["unpassable"] += 1
            continue
        assert ok.valid, (e.id, ok)
        stats["valid"] += 1
        bad = _through_our_path(e, altered_calls(list(e.ground_truth), list(e.functions)))
        assert not bad.valid, e.id
        assert bad.error_type, e.id
        stats["altered_invalid"] += 1
    unpassable_here = sorted(i for i in UNPASSABLE if i.startswith(category + "_") and i[len(category) + 1].isdigit())
    assert stats["unpassable"] == len(unpassable_here)
    assert stats["valid"] + stats["unpassable"] == len(entries)
    print(
        f"\n{category}: n={len(entries)} valid={stats['valid']} altered_invalid={stats['altered_invalid']} "
        f"unpassable={unpassable_here}"
    )


def test_every_bfcl_doc_converts():
    for e in load_bfcl():
        tools, name_map = bfcl_to_openai_tools(list(e.functions))
        assert sorted(name_map.values()) == sorted(f["name"] for f in e.functions)
