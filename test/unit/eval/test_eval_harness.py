"""Harness: files, resumability, malformed output, a backend dying mid-run, summaries, report, CLI."""

import json

import pytest
from sglang_pask import cli
from sglang_pask.eval import BACKENDS, backend_class
from sglang_pask.eval.base import Backend, BackendError, BackendUnavailable, EntryError, Generation
from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools
from sglang_pask.eval.decode import render_tool_calls
from sglang_pask.eval.harness import RunAborted, Settings, read_results, run_eval
from sglang_pask.eval.report import write_report
from sglang_pask.eval.summary import summarize
from sglang_pask.eval.synthetic import generate
from sglang_pask.eval.testing import gold_calls

ENTRIES = generate("eval", 12)
BY_ID = {e.id: e for e in ENTRIES}


def gold_text(entry_id):
    e = BY_ID[entry_id]
    _tools, nm = bfcl_to_openai_tools(list(e.functions))
    to_openai = {b: o for o, b in nm.items()}
    return render_tool_calls(
        [{to_openai[n]: a for n, a in c.items()} for c in gold_calls(list(e.ground_truth), list(e.functions))]
    )


class Scripted(Backend):
    """Answers from a script: id -> text | Exception; default gold text. Counts calls."""

    name = "scripted"

    def __init__(self, script=None, die_after=None, as_tool_calls=False):
        self.script, self.die_after, self.as_tool_calls = script or {}, die_after, as_tool_calls
        self.calls = []

    @classmethod
    def from_args(cls, args):
        return cls()

    def generate(self, request):
        self.calls.append(request.entry_id)
        assert request.tools and request.tools[0]["type"] == "function" and request.messages
        if self.die_after is not None and len(self.calls) > self.die_after:
            raise BackendError("server went away")
        out = self.script.get(request.entry_id, gold_text(request.entry_id))
        if isinstance(out, Exception):
            raise out
        if self.as_tool_calls:
            blocks = json.loads(
                "[" + out.replace("<tool_call>", "").replace("</tool_call>", ",").rstrip().rstrip(",") + "]"
            )
            tcs = [{"function": {"name": b["name"], "arguments": json.dumps(b["arguments"])}} for b in blocks]
            return Generation(text=None, tool_calls=tcs, meta={"finish_reason": "tool_calls"})
        return Generation(text=out, meta={"finish_reason": "stop"})


S = Settings(max_tokens=64)


def _files(d):
    return {p.name for p in d.iterdir()}


@pytest.mark.parametrize("as_tool_calls", [False, True])
def test_gold_backend_scores_100(tmp_path, as_tool_calls):
    s = run_eval(
        ENTRIES,
        Scripted(as_tool_calls=as_tool_calls),
        tmp_path,
        S,
        {"data": "synthetic:eval:12"},
        workers=3,
        progress=False,
    )
    assert {"results.jsonl", "summary.json", "summary.md", "run.json"} <= _files(tmp_path)
    assert s["mean"] == 1.0 and s["complete"] and s["mean8"] is None
    assert all(v == {"n": 3, "correct": 3, "accuracy": 1.0} for v in s["categories"].values())
    rec = read_results(tmp_path / "results.jsonl")
    assert set(rec) == set(BY_ID)
    r = rec[ENTRIES[0].id]
    assert set(r) >= {"id", "raw", "decoded", "valid", "error_type"} and r["valid"] and r["decoded"]
    assert json.loads((tmp_path / "summary.json").read_text())["config"]["max_tokens"] == 64


def test_malformed_output_is_invalid_and_run_continues(tmp_path):
    ids = [e.id for e in ENTRIES]
    script = {
        ids[0]: "I am not sure.",
        ids[1]: '<tool_call>\n{"name": "x", "arguments": {"a": 1',
        ids[2]: "<tool_call>\nnot json\n</tool_call>",
        ids[3]: '<call>{"name": "x", "arguments": {}}</call>',
        ids[4]: EntryError("http_400", "prompt too long"),
    }
    s = run_eval(ENTRIES, Scripted(script), tmp_path, S, {}, progress=False)
    rec = read_results(tmp_path / "results.jsonl")
    assert [rec[i]["error_type"] for i in ids[:5]] == [
        "decode:no_tool_call",
        "decode:truncated",
        "decode:invalid_json",
        "decode:no_tool_call",
        "backend:http_400",
    ]
    assert all(not rec[i]["valid"] for i in ids[:5]) and all(rec[i]["valid"] for i in ids[5:])
    assert sum(v["correct"] for v in s["categories"].values()) == 7 and s["complete"]


def test_backend_dies_then_resume(tmp_path):
    with pytest.raises(RunAborted, match="server went away.*5/12"):
        run_eval(ENTRIES, Scripted(die_after=5), tmp_path, S, {"data": "d"}, progress=False)
    assert len(read_results(tmp_path / "results.jsonl")) == 5
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["complete"] is False and "server went away" in s["fatal_error"]
    b = Scripted()
    s = run_eval(ENTRIES, b, tmp_path, S, {"data": "d", "limit": 99}, progress=False)
    assert len(b.calls) == 7 and s["complete"] and s["mean"] == 1.0


def test_torn_last_line_is_rerun(tmp_path):
    run_eval(ENTRIES[:3], Scripted(), tmp_path, S, {}, progress=False)
    p = tmp_path / "results.jsonl"
    lines = p.read_text().splitlines(keepends=True)
    p.write_text("".join(lines[:2]) + lines[2][:40])  # killed mid-write
    b = Scripted()
    s = run_eval(ENTRIES[:3], b, tmp_path, S, {}, progress=False)
    assert len(b.calls) == 1 and sum(v["n"] for v in s["categories"].values()) == 3


def test_resume_with_other_settings_refused(tmp_path):
    run_eval(ENTRIES[:2], Scripted(), tmp_path, S, {"data": "a"}, progress=False)
    with pytest.raises(ValueError, match="max_tokens"):
        run_eval(ENTRIES[:2], Scripted(), tmp_path, Settings(max_tokens=65), {"data": "a"}, progress=False)


def test_resume_with_options_that_resolve_to_the_same_method(tmp_path):
    """A default spelt out (the options differ, the resolved method does not) resumes the run;
    options that change the method are refused."""
    snap = {"name": "snapkv", "per_head": False}
    run_eval(ENTRIES[:2], Scripted(), tmp_path, S, {"method": snap, "method_options": {}}, progress=False)
    b = Scripted()
    run_eval(ENTRIES[:2], b, tmp_path, S, {"method": snap, "method_options": {"per_head": False}}, progress=False)
    assert not b.calls  # resumed: every entry was done
    with pytest.raises(ValueError, match="method"):
        run_eval(ENTRIES[:2], Scripted(), tmp_path, S, {"method": {**snap, "per_head": True},
                                                         "method_options": {"per_head": True}}, progress=False)


def _rec(cat, valid):
    return {"category": cat, "valid": valid, "error_type": "" if valid else "e"}


def test_summary_aggregates():
    from sglang_pask.eval.data import BFCL_CATEGORIES

    recs = [_rec(c, True) for c in BFCL_CATEGORIES]  # 1/1 each
    recs += [_rec("live_multiple", False)] * 3  # live_multiple 1/4
    recs += [_rec("simple_python", False)]  # simple 1/2
    s = summarize(recs, {})
    assert s["categories"]["live_multiple"] == {"n": 4, "correct": 1, "accuracy": 0.25}
    assert s["mean8"] == pytest.approx((6 + 0.25 + 0.5) / 8)
    assert s["non_live"] == pytest.approx((0.5 + 3) / 4)  # unweighted
    assert s["live"] == pytest.approx(4 / 7)  # entry-weighted
    assert s["errors"]["live_multiple"] == {"e": 3}
    assert summarize([_rec("live_simple", True)], {})["mean8"] is None


def test_report_merges_runs(tmp_path):
    for name, method, budget, n_ok in (("a", "pask", 0.5, 3), ("b", "pask", 1.0, 4), ("c", "streaming", 0.5, 1)):
        d = tmp_path / name
        d.mkdir()
        recs = [_rec("synthetic_simple", i < n_ok) for i in range(4)]
        (d / "summary.json").write_text(json.dumps(summarize(recs, {"method": method, "budget": budget})))
    rep = write_report([str(tmp_path / n) for n in "abc"], tmp_path / "rep")
    assert [(r["method"], r["budget"], r["mean"]) for r in rep["rows"]] == [
        ("pask", 0.5, 0.75),
        ("pask", 1.0, 1.0),
        ("streaming", 0.5, 0.25),
    ]
    assert (tmp_path / "rep" / "accuracy_vs_budget.png").stat().st_size > 1000
    assert "| pask | - | 0.5 | - | 4 | 75.00 |" in (tmp_path / "rep" / "report.md").read_text()


def test_cli_hf_needs_a_model_folder(capsys):
    assert (
        cli.main(["eval", "--data", "synthetic:eval:2", "--backend", "hf", "--model", "m", "--out", "/nonexistent/x"])
        == 2
    )
    assert "pask eval: error: --model m: no such model folder" in capsys.readouterr().err
    with pytest.raises(BackendUnavailable):
        backend_class("nope")


def test_cli_eval_and_report_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(BACKENDS, "scripted", f"{__name__}:Scripted")
    out = tmp_path / "run"
    argv = [
        "eval",
        "--data",
        "synthetic:eval:12",
        "--backend",
        "scripted",
        "--limit",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert cli.main(argv) == 0
    s = json.loads((out / "summary.json").read_text())
    assert sum(v["n"] for v in s["categories"].values()) == 8 and s["mean"] == 1.0
    assert cli.main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    assert "| scripted | - | 1 | - | 8 |" in capsys.readouterr().out


def test_cli_synth(tmp_path):
    assert cli.main(["synth", "--split", "train", "--n", "8", "--profile", "tiny", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "synthetic_parallel.jsonl").exists() and (
        tmp_path / "possible_answer" / "synthetic_parallel.jsonl"
    ).exists()
