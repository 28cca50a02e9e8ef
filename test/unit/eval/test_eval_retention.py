"""Retention (eval/retention.py and `pask retention`): of Full KV's correct entries, the share a
compressed run keeps, paired entry by entry; flips both ways; a paired difference against a
reference row; refusals when the rows do not hold Full KV's entries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sglang_pask.eval.retention import retention_markdown, retention_rows


def _recs(pattern: str, cats=("simple_python", "multiple")) -> list[dict]:
    """One record per character: entry i of category cats[i % 2], valid when the character is 1."""
    return [{"id": f"e{i}", "category": cats[i % len(cats)], "valid": ch == "1"} for i, ch in enumerate(pattern)]


def test_retention_counts_flips_and_pairs_against_a_reference():
    full = _recs("1111111100")  # 8 right
    a = _recs("1111111011")  # keeps 7 of 8, gains 2
    b = _recs("1111000000")  # keeps 4 of 8
    rows = retention_rows(full, {"a": a, "b": b}, reference="b")
    ra, rb = rows
    assert (ra["full_right"], ra["kept"], ra["lost"], ra["gained"]) == (8, 7, 1, 2)
    assert ra["retention"] == pytest.approx(7 / 8) and rb["retention"] == pytest.approx(0.5)
    assert ra["ci"][0] <= 7 / 8 <= ra["ci"][1] and ra["ci"][1] <= 1.0
    assert ra["vs_reference"]["diff"] == pytest.approx(3 / 8) and "vs_reference" not in rb
    lo, hi = ra["vs_reference"]["ci"]
    assert lo <= 3 / 8 <= hi and lo > 0  # a keeps more than b wherever b keeps a call a keeps too
    assert ra["mean"] == pytest.approx((5 / 5 + 4 / 5) / 2)  # simple (even ids) 5 of 5, multiple 4 of 5
    # the same records give the same intervals
    assert retention_rows(full, {"a": a, "b": b}, reference="b") == rows
    md = retention_markdown(rows, full)
    assert md.splitlines()[2].startswith("| full | 10 | 8 | 8 | 100.0 |")
    assert "| a | 10 | 8 | 7 | 87.5 [" in md and "| +37.5 [" in md


def test_retention_refuses_rows_on_other_entries():
    full = _recs("1100")
    with pytest.raises(ValueError, match="b: not Full KV's entries .1 missing"):
        retention_rows(full, {"b": _recs("110")})
    with pytest.raises(ValueError, match="no entry right"):
        retention_rows(_recs("00"), {"b": _recs("00")})
    with pytest.raises(ValueError, match="reference 'c' is not one of the rows"):
        retention_rows(full, {"b": _recs("1100")}, reference="c")


def _run(folder, recs, **meta):
    folder.mkdir()
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (folder / "run.json").write_text(json.dumps({"data": "x", "model": "m", "max_tokens": 8, "tool_choice": "required",
                                                  "temperature": 0.0, **meta}))


def test_pask_retention_command(tmp_path):
    _run(tmp_path / "full", _recs("1110"))
    _run(tmp_path / "a", _recs("1100"))
    _run(tmp_path / "b", _recs("1110"), max_tokens=16)
    cmd = [sys.executable, "-m", "sglang_pask.cli", "retention", "--full", str(tmp_path / "full")]
    ok = subprocess.run(cmd + ["--run", f"a={tmp_path / 'a'}", "--out", str(tmp_path / "out")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "| a | 4 | 3 | 2 | 66.7 [" in ok.stdout
    assert json.loads((tmp_path / "out" / "retention.json").read_text())["rows"][0]["kept"] == 2
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())  # what wrote the folder
    assert meta["command"] == (f"pask retention --full {tmp_path / 'full'} --run a={tmp_path / 'a'} "
                               f"--out {tmp_path / 'out'}") and meta["date"]
    bad = subprocess.run(cmd + ["--run", f"b={tmp_path / 'b'}", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--run b: its max_tokens is 16, the Full KV run's 8" in bad.stderr


def test_lost_calls_are_counted_by_where_the_checker_says_they_fail():
    from sglang_pask.eval.retention import KINDS, failure_kind

    assert [failure_kind(e) for e in (
        "simple_function_checker:wrong_func_name", "parallel_function_checker_no_order:wrong_count",
        "simple_function_checker:missing_required", "simple_function_checker:unexpected_param",
        "simple_function_checker:missing_optional", "value_error:string", "type_error:simple",
        "decode:wrong_format", "parallel_function_checker_no_order:cannot_find_match", None)] == [
        "tool", "tool", "param_name", "param_name", "param_name", "value", "value", "no_call", "other", "other"]
    full = _recs("111111")
    run = _recs("000011")
    for r, err in zip(run, ("simple_function_checker:wrong_func_name", "value_error:string", "type_error:simple",
                            "decode:truncated")):
        r["error_type"] = err
    (row,) = retention_rows(full, {"m": run})
    assert row["lost"] == 4 and row["lost_by_kind"] == {"tool": 1, "param_name": 0, "value": 2, "no_call": 1,
                                                        "other": 0}
    assert set(row["lost_by_kind"]) == set(KINDS)
    md = retention_markdown([row], full)
    assert "| m | 4 | 1 | 0 | 2 | 1 | 0 |" in md
