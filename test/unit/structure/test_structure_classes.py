"""Classes, precedence and span tags."""

from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_pask.structure import PRECEDENCE, StructClass, from_spans, resolve, to_spans
from sglang_pask.structure.classes import BY_RANK, COLOURS, RANK


def test_precedence_lists_every_class_once():
    assert sorted(PRECEDENCE) == sorted(StructClass)
    assert len(set(PRECEDENCE)) == len(PRECEDENCE)
    assert set(COLOURS) == set(StructClass)
    assert max(StructClass) < 64  # fits compact storage


def test_rank_and_by_rank_are_inverse():
    for c in StructClass:
        assert BY_RANK[RANK[c]] == c


def test_resolve_straddling_tokens():
    C = StructClass
    assert resolve([C.OUT_VALUE_STR, C.OUT_DELIM]) == C.OUT_VALUE_STR  # '",'
    assert resolve([C.SCHEMA_PUNCT, C.TOOL_NAME]) == C.TOOL_NAME  # '"get'
    assert resolve([C.OUT_DELIM, C.OUT_ARG_KEY]) == C.OUT_ARG_KEY  # ' {"' + key
    assert resolve([]) == C.OTHER


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(list(StructClass)), max_size=40), st.integers(0, 5))
def test_spans_round_trip(classes, offset):
    spans = to_spans(classes, offset)
    for a, b in zip(spans, spans[1:]):
        assert a.end == b.start and a.cls != b.cls
    assert all(s.end > s.start for s in spans)
    shifted = [(s - offset, e - offset, c) for s, e, c in spans]
    assert from_spans(shifted, len(classes)) == classes
