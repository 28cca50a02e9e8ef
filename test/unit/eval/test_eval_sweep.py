"""``pask sweep``: every cell is a ``pask eval`` run directory, the report and meta.json land in
--results, two worker processes give what one gives, and a rerun resumes (only missing entries run)."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT
from sglang_pask import cli
from sglang_pask.eval.sweep import plan

FC = ROOT / "models" / "pask-tiny-fc"


def test_plan_and_method_spec_syntax():
    cells = plan(["full", "streaming", "h2o:normalize=true"], [0.5, 0.2], ["prefill", "continuous"])
    assert [c.name for c in cells] == [
        "full", "streaming-prefill-0.5", "streaming-prefill-0.2", "streaming-continuous-0.5",
        "streaming-continuous-0.2", "h2o+normalize=true-prefill-0.5", "h2o+normalize=true-prefill-0.2",
        "h2o+normalize=true-continuous-0.5", "h2o+normalize=true-continuous-0.2"]
    assert cells[-1].label == "h2o[normalize=true]" and cells[-1].options == {"normalize": True}
    with pytest.raises(ValueError, match="twice"):
        plan(["snapkv", "snapkv"], [0.5], ["prefill"])
    path = plan(["kvzap:scorer=policies/a.safetensors"], [0.2], ["prefill"])[0]  # one directory, not two
    assert path.name == "kvzap+scorer=policies_a.safetensors-prefill-0.2"
    assert path.options == {"scorer": "policies/a.safetensors"}
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        plan(["snapkv"], [1.5], ["prefill"])


def _results(d):
    from sglang_pask.eval.harness import read_results

    return {i: r["valid"] for i, r in read_results(d / "results.jsonl").items()}


def test_sweep_runs_cells_writes_results_and_resumes(tmp_path, capsys):
    out, res = tmp_path / "runs", tmp_path / "results"
    argv = ["sweep", "--model", str(FC), "--data", "synthetic:eval:4:tiny", "--methods", "full,streaming",
            "--budgets", "0.33", "--schedules", "prefill", "--tool-choice", "required", "--max-tokens", "16",
            "--out", str(out), "--results", str(res), "--no-progress"]
    assert cli.main([*argv, "--jobs", "2"]) == 0
    cells = sorted(p.name for p in out.iterdir())
    assert cells == ["full", "streaming-prefill-0.33"]
    run = json.loads((out / "streaming-prefill-0.33" / "run.json").read_text())
    assert run["method"]["name"] == "streaming" and run["schedule"] == "prefill" and run["budget"] == 0.33
    assert run["tool_choice"] == "required" and run["max_tokens"] == 16
    assert {"report.md", "report.json", "accuracy_vs_budget.png", "meta.json"} <= {p.name for p in res.iterdir()}
    meta = json.loads((res / "meta.json").read_text())
    assert meta["command"].startswith(f"pask sweep --model {FC} --data synthetic:eval:4:tiny --methods "
                                      "full,streaming --budgets 0.33 --schedules prefill --tool-choice required "
                                      "--max-tokens 16 --jobs 2 --out ")
    assert meta["jobs"] == 2 and meta["machine"]["cpu_cores"] >= 1 and meta["wall_s"] > 0 and meta["git_commit"]
    assert [(c["cell"], c["entries_run"]) for c in meta["cells"]] == [("full", 4), ("streaming-prefill-0.33", 4)]
    rows = json.loads((res / "report.json").read_text())["rows"]
    assert [(r["label"], r["schedule"], r["budget"]) for r in rows] == [
        ("full", "continuous", 1.0), ("streaming", "prefill", 0.33)]
    assert all("mean" in r["ci"] for r in rows)
    first = {c: _results(out / c) for c in cells}

    # resume: one entry of one cell lost (a torn last line), the rest kept; in-process this time
    path = out / "streaming-prefill-0.33" / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + lines[-1][:20])
    capsys.readouterr()
    assert cli.main([*argv, "--jobs", "1"]) == 0
    meta = json.loads((res / "meta.json").read_text())
    assert [(c["cell"], c["entries_run"]) for c in meta["cells"]] == [("full", 0), ("streaming-prefill-0.33", 1)]
    assert {c: _results(out / c) for c in cells} == first  # same records, whichever process ran them
    assert "| streaming | prefill | 0.33 |" in capsys.readouterr().out


def test_sweep_pask_needs_a_policy(tmp_path, capsys):
    argv = ["sweep", "--model", str(FC), "--data", "synthetic:eval:1:tiny", "--methods", "pask", "--budgets", "0.5",
            "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "add --policy FILE" in capsys.readouterr().err


def _records(out):
    """cell -> id -> its record without timings (``meta.latency_s``)."""
    from sglang_pask.eval.harness import read_results

    got = {}
    for d in sorted(p for p in out.iterdir() if p.is_dir()):
        recs = read_results(d / "results.jsonl")
        for r in recs.values():
            assert r["meta"].pop("latency_s") >= 0
        got[d.name] = recs
    return got


def _files(out, name):
    return {d.name: (d / name).read_text() for d in sorted(p for p in out.iterdir() if p.is_dir())}


def test_shared_prefill_writes_the_cell_by_cell_records_and_resumes(tmp_path):
    """Entry by entry with one prompt forward per statistics kind (none: full, streaming;
    accumulated: h2o) writes what cell by cell writes, record for record; a half-finished shared
    sweep resumes with exactly the missing (cell, entry) pairs."""
    def argv(name, *extra):
        return ["sweep", "--model", str(FC), "--data", "synthetic:eval:3:tiny", "--methods", "full,streaming,h2o",
                "--budgets", "0.33", "--schedules", "prefill,continuous", "--tool-choice", "required",
                "--max-tokens", "16", "--out", str(tmp_path / name), "--results", str(tmp_path / f"{name}-report"),
                "--no-progress", *extra]

    assert cli.main(argv("shared")) == 0
    assert cli.main(argv("cells", "--no-share-prefill")) == 0
    shared, cells = tmp_path / "shared", tmp_path / "cells"
    meta = {n: json.loads((tmp_path / f"{n}-report" / "meta.json").read_text()) for n in ("shared", "cells")}
    assert meta["shared"]["prefill_shared"] and not meta["cells"]["prefill_shared"]
    assert meta["cells"]["command"].endswith(" --no-share-prefill")
    assert [c["prefill_shared"] for c in meta["shared"]["cells"]] == [True] * 5
    assert [(c["cell"], c["entries_run"]) for c in meta["shared"]["cells"]] == [
        (c["cell"], 3) for c in meta["cells"]["cells"]]
    first = _records(shared)
    assert len(first) == 5 and all(len(r) == 3 for r in first.values())
    assert first == _records(cells)  # every field but timings
    for name in ("run.json", "summary.json", "summary.md"):
        assert _files(shared, name) == _files(cells, name), name
    report = {n: (tmp_path / f"{n}-report" / "report.md").read_text() for n in ("shared", "cells")}
    assert report["shared"] == report["cells"]

    # half finished: one cell lost its last two entries (one as a torn line), one its first, one all
    lost = {"streaming-continuous-0.33": 2, "h2o-prefill-0.33": 1, "full": 3}
    for cell, n in lost.items():
        path = shared / cell / "results.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        keep = lines[n:] if cell == "h2o-prefill-0.33" else lines[:len(lines) - n]
        torn = lines[-1][:25] if cell == "streaming-continuous-0.33" else ""
        path.write_text("".join(keep) + torn)
    assert cli.main(argv("shared")) == 0
    meta = json.loads((tmp_path / "shared-report" / "meta.json").read_text())
    assert {c["cell"]: c["entries_run"] for c in meta["cells"]} == {c: lost.get(c, 0) for c in first}
    assert _records(shared) == first
