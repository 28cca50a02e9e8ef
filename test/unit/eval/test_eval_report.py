"""``pask report``: rows keyed by the whole experiment, refusal to merge different experiments
(models, profiles, tool_choice) unless grouped, labels with options and schedule, bootstrap
intervals (contain the point, reproducible), and the paired bootstrap."""

from __future__ import annotations

import json
import random

import pytest
from sglang_pask import cli
from sglang_pask.eval.report import merge, paired, write_report
from sglang_pask.eval.stats import bootstrap_ci, paired_bootstrap
from sglang_pask.eval.summary import summarize

CATS = ("synthetic_simple", "synthetic_multiple", "synthetic_parallel", "synthetic_parallel_multiple")


def _records(p: float, n: int = 10, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"id": f"{c}_eval_{i}", "category": c, "valid": rng.random() < p, "error_type": "x"}
            for c in CATS for i in range(n)]


def _config(**over) -> dict:
    cfg = {"backend": "hf", "model": {"path": "models/pask-tiny-fc", "fingerprint": "sha256:aaaa"},
           "data": "synthetic:eval:40:tiny", "tool_choice": "required", "max_tokens": 128, "temperature": 0.0,
           "enable_thinking": False, "method": {"name": "streaming", "budget": 0.33, "schedule": "continuous"},
           "method_options": {}, "budget": 0.33, "schedule": "continuous", "policy": None}
    cfg.update(over)
    return cfg


def _run(tmp_path, name: str, recs: list[dict], **over):
    d = tmp_path / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps(summarize(recs, _config(**over))))
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(d)


def test_rows_keyed_by_method_options_schedule_budget_policy(tmp_path):
    h2o = {"name": "h2o", "budget": 0.33, "schedule": "prefill", "normalize": True}
    pol = {"name": "prior", "sha256": "ab" * 32}
    runs = [_run(tmp_path, "a", _records(0.5)),
            _run(tmp_path, "b", _records(0.6, seed=1), schedule="prefill"),
            _run(tmp_path, "c", _records(0.7, seed=2), method=h2o, method_options={"normalize": True},
                 schedule="prefill"),
            _run(tmp_path, "d", _records(0.4, seed=3), method={"name": "pask", "budget": 0.33, "policy": pol},
                 policy=pol),
            _run(tmp_path, "e", _records(1.0), method={"name": "full", "budget": 1.0}, budget=1.0)]
    rep = write_report(runs, tmp_path / "rep")
    keys = [(r["label"], r["schedule"], r["budget"], r["policy"]) for r in rep["rows"]]
    assert keys == [("full", "continuous", 1.0, "-"), ("h2o[normalize=true]", "prefill", 0.33, "-"),
                    ("pask", "continuous", 0.33, "prior@ababababab"),
                    ("streaming", "continuous", 0.33, "-"), ("streaming", "prefill", 0.33, "-")]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| h2o[normalize=true] | prefill | 0.33 | - | 40 |" in md
    assert "model=pask-tiny-fc (sha256:aaaa)" in md and "tool_choice=required" in md
    saved = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert all("records" not in r and set(r["ci"]) == {*CATS, "mean"} for r in saved["rows"])
    assert (tmp_path / "rep" / "accuracy_vs_budget.png").stat().st_size > 1000


@pytest.mark.parametrize("field,over", [
    ("model", {"model": {"path": "models/tiny-random-qwen3", "fingerprint": "sha256:bbbb"}}),
    ("data", {"data": "synthetic:eval:40:bfcl_like"}),
    ("tool_choice", {"tool_choice": "auto"}),
    ("max_tokens", {"max_tokens": 64}),
])
def test_report_refuses_different_experiments(tmp_path, capsys, field, over):
    a = _run(tmp_path, "a", _records(0.5))
    b = _run(tmp_path, "b", _records(0.5), method={"name": "snapkv", "budget": 0.33}, **over)
    assert cli.main(["report", a, b, "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pask report: error: runs differ in {field}: {a} has ")
    assert f"{b} has " in err[0] and f"--group-by {field}" in err[0]
    assert not (tmp_path / "rep").exists()
    # grouped by that field, the runs become separate rows with the field as a column
    assert cli.main(["report", a, b, "--out", str(tmp_path / "rep"), "--group-by", field]) == 0
    rows = json.loads((tmp_path / "rep" / "report.json").read_text())["rows"]
    assert len(rows) == 2 and len({r["group"][field] for r in rows}) == 2


def test_model_given_by_relative_or_absolute_path_is_one_model(tmp_path):
    a = _run(tmp_path, "a", _records(0.5))
    b = _run(tmp_path, "b", _records(0.5), method={"name": "snapkv", "budget": 0.33},
             model={"path": "/work/main/models/pask-tiny-fc/", "fingerprint": "sha256:aaaa"})
    assert len(write_report([a, b], tmp_path / "rep")["rows"]) == 2


def test_bootstrap_contains_point_and_is_reproducible():
    recs = _records(0.6, n=25)
    ci = bootstrap_ci(recs)
    s = summarize(recs, {})
    for k in (*CATS, "mean"):
        point = s["categories"][k]["accuracy"] if k in CATS else s[k]
        assert ci[k][0] <= point <= ci[k][1] and ci[k][0] < ci[k][1]
    assert bootstrap_ci(list(reversed(recs))) == ci  # order of records does not matter
    assert bootstrap_ci(recs, seed=1) != ci
    assert bootstrap_ci(recs)["mean"] == ci["mean"]


def test_paired_bootstrap():
    a = _records(0.5, n=25)
    assert paired_bootstrap(a, a) == {"metric": "mean", "diff": 0.0, "ci": [0.0, 0.0], "n": 100}
    better = [dict(r, valid=True) if i % 2 else r for i, r in enumerate(a)]
    d = paired_bootstrap(better, a)
    assert d["diff"] > 0 and 0 < d["ci"][0] <= d["diff"] <= d["ci"][1]
    with pytest.raises(ValueError, match="same entries"):
        paired_bootstrap(a, a[1:])


def test_paired_on_report_rows(tmp_path):
    rows, _ = merge({"a": summarize(_records(0.5), _config())},
                    records={"a": {r["id"]: r for r in _records(0.5)}})
    assert paired(rows[0], rows[0])["ci"] == [0.0, 0.0]


def test_engine_labels_keep_segment_rules_apart(tmp_path):
    """The whole prompt, the shared segment (issue 13), the segment at its own budget, the own
    tokens at theirs, prefilled against the whole segment, and the radix cache are six rows,
    never merged."""
    over = [{}, {"segment": "system"}, {"segment": "system", "segment_budget": 0.1},
            {"segment": "system", "own_budget": 1.0}, {"segment": "system", "own_budget": 1.0, "radix_cache": True},
            {"segment": "system", "own_budget": 1.0, "segment_prefill": "full"}]
    runs = [_run(tmp_path, f"r{i}", _records(0.5, seed=i), **o) for i, o in enumerate(over)]
    labels = sorted(r["label"] for r in write_report(runs, tmp_path / "rep")["rows"])
    assert labels == sorted(["streaming", "streaming [segment=system]",
                             "streaming [segment=system, segment budget 0.1]",
                             "streaming [segment=system, own budget 1]",
                             "streaming [segment=system, own budget 1, radix]",
                             "streaming [segment=system, own budget 1, full prefill]"])
