"""Output trackers: hand-written cases (Qwen3 tool calls, bare JSON, SQL) and properties.

300 examples per property per run (most of a run is hypothesis drawing them, not the trackers);
not derandomized, so successive runs explore new ones."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_pask.structure import JsonTracker, SqlTracker, catalog_from_texts
from sglang_pask.structure import StructClass as C
from sglang_pask.structure.testing import expected_token_classes, qwen3_output, split_bytes

# ---------- strategies ----------
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
_scalar = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(
    allow_nan=False, allow_infinity=False, width=32) | _text
_json = st.recursive(_scalar, lambda ch: st.lists(ch, max_size=3) | st.dictionaries(_text, ch, max_size=3),
                     max_leaves=8)
_args = st.dictionaries(_text, _json, max_size=4)
_name = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10)
_dumps = st.sampled_from([{}, {"ensure_ascii": False}, {"separators": (",", ":")},
                          {"indent": 1, "ensure_ascii": False}])
_prefix = st.sampled_from(["", "Sure. ", "<think>\nhm</think>\n\n", "a < b <tool"])


def _feed(tracker, pieces):
    for p in pieces:
        tracker.feed(p)
    return tracker


def _names(classes):
    return [C(c).name for c in classes]


# ---------- hand-written ----------
def test_qwen3_single_call_by_tokens():
    out = qwen3_output([("get_weather", {"city": "Paris", "days": 3, "metric": True, "x": None})])
    pieces = [b"<tool_call>", b"\n", b'{"', b"name", b'":', b' "', b"get", b"_weather", b'",',
              b' "', b"arguments", b'":', b' {"', b"city", b'":', b' "', b"Paris", b'",', b' "',
              b"days", b'":', b" 3", b",", b' "', b"metric", b'":', b" true", b',', b' "', b"x",
              b'":', b" null", b"}}", b"\n", b"</tool_call>"]
    assert b"".join(pieces) == out.encode()
    tr = _feed(JsonTracker(), pieces)
    got = dict(zip(pieces, _names(tr.classes)))
    assert got[b"get"] == got[b"_weather"] == "OUT_FUNC_NAME"
    assert got[b"city"] == got[b"days"] == "OUT_ARG_KEY"
    assert got[b"Paris"] == "OUT_VALUE_STR" and got[b" 3"] == "OUT_VALUE_NUM"
    assert got[b" true"] == "OUT_VALUE_BOOL" and got[b" null"] == "OUT_VALUE_NULL"
    assert got[b"name"] == got[b"arguments"] == got[b'",'] == "OUT_DELIM"
    assert got[b"<tool_call>"] == got[b"</tool_call>"] == "OUT_TOOL_TAG"
    assert tr.stable == len(pieces)


def test_several_calls_and_text():
    out = "Let me check.\n" + qwen3_output([("a.b", {"k": [1, 2]}), ("c", {})])
    pieces = split_bytes(out.encode(), list(range(3, len(out), 3)))
    tr = _feed(JsonTracker(), pieces)
    assert list(tr.classes) == expected_token_classes(out, pieces, True)
    assert C(tr.classes[0]) == C.OUT_TEXT


def test_split_marker_is_relabelled_and_stable_waits():
    tr = JsonTracker()
    tr.feed(b"hi <tool")
    assert C(tr.classes[0]) == C.OUT_TEXT and tr.stable == 0
    tr.feed(b"_ca")
    assert tr.stable == 0
    tr.feed(b"ll>\n")
    assert _names(tr.classes) == ["OUT_TOOL_TAG"] * 3 and tr.stable == 3
    tr.rollback(1)
    assert _names(tr.classes) == ["OUT_TEXT"] * 2 and tr.stable == 0


def test_marker_lookalike_stays_text():
    tr = _feed(JsonTracker(), [b"a <to", b"ol> b <", b"<tool_call>"])
    assert _names(tr.classes) == ["OUT_TEXT", "OUT_TEXT", "OUT_TOOL_TAG"]


def test_utf8_split_across_tokens():
    out = qwen3_output([("météo", {"ville": "Zürich 東京"})], dumps_kw={"ensure_ascii": False})
    data = out.encode()
    pieces = [data[i:i + 1] for i in range(len(data))]  # every multi-byte char split
    tr = _feed(JsonTracker(), pieces)
    assert list(tr.classes) == expected_token_classes(out, pieces, True)


def test_bare_json_and_trailing_text():
    out = '{"a": [1, {"b": "x\\"y\\\\"}], "c": false}'
    pieces = split_bytes(out.encode(), [1, 5, 9, 14, 20, 30])
    tr = _feed(JsonTracker(tool_calls=False), pieces)
    assert list(tr.classes) == expected_token_classes(out, pieces, False)
    tr.feed(b" extra")
    assert C(tr.classes[-1]) == C.OUT_TEXT


@pytest.mark.parametrize("garbage", [b"{oops", b"[1,,]", b'{"name": 5}}}}', b"\xff\xfe", b"}{"])
def test_invalid_output_never_raises(garbage):
    for tr in (JsonTracker(), JsonTracker(tool_calls=False), SqlTracker()):
        tr.feed(b"<tool_call>\n")
        tr.feed(garbage)
        tr.feed(b"\n</tool_call> after")
        tr.feed(b"")
        assert len(tr) == 4


def test_empty_token_gets_context_class():
    tr = _feed(JsonTracker(), [b"<tool_call>", b'\n{"name": "f', b"", b'", "arguments": {}}'])
    assert C(tr.classes[2]) == C.OUT_FUNC_NAME


def test_sql_tracker_known_tables_and_columns():
    cat = catalog_from_texts(["CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL)"])
    tr = _feed(SqlTracker(cat), [b"SEL", b"ECT na", b"me FROM ", b"users WHERE i", b"d = ", b"'o''k'", b" LIMIT 5;"])
    assert _names(tr.classes) == ["SQL_KEYWORD", "SQL_COLUMN", "SQL_COLUMN", "SQL_TABLE", "SQL_COLUMN",
                                  "SQL_LITERAL", "SQL_LITERAL"]
    tr2 = _feed(SqlTracker(cat), [b"SELECT x AS nam"])
    assert C(tr2.classes[0]) == C.SQL_KEYWORD and tr2.stable == 0


# ---------- properties ----------
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_name, _args), min_size=0, max_size=3), _prefix, _dumps,
       st.lists(st.integers(0, 400), max_size=60))
def test_tracker_agrees_with_parse_of_final_text(calls, prefix, dumps_kw, cuts):
    out = qwen3_output(calls, prefix, dumps_kw)
    pieces = split_bytes(out.encode(), cuts)
    tr = _feed(JsonTracker(), pieces)
    want = expected_token_classes(out, pieces, True)
    got = list(tr.classes)
    for k, (g, w) in enumerate(zip(got, want)):
        if w is not None:  # empty tokens: context class, checked elsewhere
            assert g == w, (k, pieces[k], C(g), w, out)
    if calls:  # output ends with "</tool_call>": nothing pending
        assert tr.stable == len(pieces)
    # byte by byte, the function-name bytes spell exactly the (JSON-escaped) names, in order
    data = out.encode()
    single = _feed(JsonTracker(), [data[i:i + 1] for i in range(len(data))])
    spelled = bytes(b for b, c in zip(data, single.classes) if c == C.OUT_FUNC_NAME)
    want_names = "".join(json.dumps(n, **dumps_kw)[1:-1] for n, _ in calls).encode()
    assert spelled == want_names


@settings(max_examples=300, deadline=None)
@given(_json, _dumps, st.lists(st.integers(0, 300), max_size=40))
def test_bare_json_tracker_agrees_with_parse(value, dumps_kw, cuts):
    out = json.dumps(value, **dumps_kw)
    pieces = split_bytes(out.encode(), cuts)
    tr = _feed(JsonTracker(tool_calls=False), pieces)
    want = expected_token_classes(out, pieces, False)
    for k, (g, w) in enumerate(zip(tr.classes, want)):
        if w is not None:
            assert g == w, (k, pieces[k], C(g), w, out)


def _rollback_check(make, pieces, k):
    full = _feed(make(), pieces)
    full.rollback(k)
    ref = _feed(make(), pieces[: len(pieces) - k])
    assert full.state_key() == ref.state_key()
    assert full.stable == ref.stable and list(full.classes) == list(ref.classes)
    _feed(full, pieces[len(pieces) - k:])
    _feed(ref, pieces[len(pieces) - k:])
    assert full.state_key() == ref.state_key()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_name, _args), max_size=2), _prefix, st.lists(st.integers(0, 300), max_size=40),
       st.data())
def test_rollback_equals_refeed_json(calls, prefix, cuts, data):
    pieces = split_bytes(qwen3_output(calls, prefix).encode(), cuts)
    k = data.draw(st.integers(0, len(pieces)))
    _rollback_check(JsonTracker, pieces, k)
    _rollback_check(lambda: JsonTracker(tool_calls=False), pieces, k)


_SQL_CAT = catalog_from_texts(["CREATE TABLE t1 (a INT, b TEXT); CREATE TABLE orders (id INT, total REAL)"])
_sql_text = st.lists(st.sampled_from(["SELECT", " ", "a", "b", "id", "orders", "t1", ",", "'x''y'", "12.5",
                                      "FROM", "WHERE", "=", "(", ")", "--c\n", "tot", "al", "'", "\n"]),
                     max_size=25).map("".join)


@settings(max_examples=300, deadline=None)
@given(_sql_text, st.lists(st.integers(0, 200), max_size=30), st.data())
def test_rollback_equals_refeed_sql(text, cuts, data):
    pieces = split_bytes(text.encode(), cuts)
    k = data.draw(st.integers(0, len(pieces)))
    _rollback_check(lambda: SqlTracker(_SQL_CAT), pieces, k)


# ---------- every registered tracker: same invariants ----------
from sglang_pask.structure import TRACKERS, make_tracker  # noqa: E402


@pytest.mark.parametrize("name", sorted(TRACKERS))
@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.binary(max_size=6) | st.sampled_from(
    [b"<tool_call>", b"\n{", b'"name"', b":", b'"x"', b"}", b"</tool_call>", b"SELECT", b"'"]), max_size=20),
    data=st.data())
def test_every_tracker_survives_any_bytes_and_rolls_back(name, pieces, data):
    tr = _feed(make_tracker(name), pieces)
    assert len(tr) == len(pieces) and 0 <= tr.stable <= len(pieces)
    assert all(0 <= c < len(C) for c in tr.classes)
    k = data.draw(st.integers(0, len(pieces)))
    _rollback_check(lambda: make_tracker(name), pieces, k)
