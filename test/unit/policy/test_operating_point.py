"""The operating point a policy carries (schedule, interval, segment rule) and the one segment-rule
value object: one validator, every engine's defaults from the policy, overrides reported with
where each field came from. CPU only, no server (the live start-up line and ``/server_info`` are
checked in test_server_persist.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from sglang_pask.policy import PolicyError, load_policy
from sglang_pask.policy.operating_point import (
    FIELDS,
    OperatingPoint,
    OperatingPointError,
    SegmentRule,
    resolve,
)

POLICY = ROOT / "policies" / "pask-tiny-fc.b0.33.json"
SEGMENT_POLICY = ROOT / "experiments" / "policies" / "pask-tiny-fc.segment.b0.33.json"
LOOKUP_POLICY = ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.33.json"  # re-issued by upgrade
MODEL = ROOT / "models" / "pask-tiny-fc"
PASK = [str(Path(sys.executable).with_name("pask"))]

#: every combination the rule refuses: (fields, the message worded with the server's flags)
REJECTED = {
    "segment-unknown": ({"segment": "tools"}, "--pask-segment must be one of none, system, got 'tools'"),
    "segment-budget-without-segment": ({"segment_budget": 0.2}, "--pask-segment-budget needs --pask-segment system"),
    "own-budget-without-segment": ({"own_budget": 1.0}, "--pask-own-budget needs --pask-segment system"),
    "prefill-without-segment": ({"segment_prefill": "full"},
                                "--pask-segment-prefill full needs --pask-segment system"),
    "prefill-unknown": ({"segment": "system", "segment_prefill": "whole"},
                        "--pask-segment-prefill must be one of compressed, full, got 'whole'"),
    "segment-budget-0": ({"segment": "system", "segment_budget": 0.0},
                         "--pask-segment-budget must be in (0, 1], got 0"),
    "own-budget-2": ({"segment": "system", "own_budget": 2.0}, "--pask-own-budget must be in (0, 1], got 2"),
    "own-budget-negative": ({"segment": "system", "own_budget": -0.1},
                            "--pask-own-budget must be in (0, 1], got -0.1"),
}


@pytest.mark.parametrize("name", REJECTED)
def test_every_rejected_combination_one_validator(name):
    """The rule refuses each combination itself; the server's config, the runner's callers and
    the CLIs only word it with their flag names."""
    fields, server_msg = REJECTED[name]
    with pytest.raises(OperatingPointError) as e:
        SegmentRule(**fields)
    assert e.value.named(SegmentRule.flag_names("pask-")) == server_msg
    assert e.value.named(SegmentRule.flag_names()) == server_msg.replace("--pask-", "--")
    from sglang_pask.srt.serving import ServingFlags, build_config  # the server's config: same words

    with pytest.raises(ValueError) as e2:
        build_config(str(POLICY), ServingFlags(overrides=fields))
    assert str(e2.value) == server_msg


@pytest.mark.parametrize("fields, msg", [({"schedule": "weekly"}, "--pask-schedule must be one of continuous, "
                                          "prefill, got 'weekly'"),
                                         ({"interval": 0}, "--pask-interval must be an integer >= 1, got 0")])
def test_schedule_and_interval_refused_by_the_operating_point(fields, msg):
    from sglang_pask.srt.serving import ServingFlags, build_config

    with pytest.raises(ValueError, match="^" + msg.replace("(", r"\(").replace(")", r"\)") + "$"):
        build_config(str(POLICY), ServingFlags(overrides=fields))


def test_only_one_validator_in_the_package():
    """No second copy of the rule's checks: ``needs ... system`` is raised in operating_point.py
    only, and the old per-module checkers are gone."""
    src = ROOT / "python" / "sglang_pask"
    raisers = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not names & {"check_own_budget", "check_prefill"}, path
        if "needs --pask-segment system" in text or "needs {needs} system" in text or "needs --segment system" in text:
            raisers.append(path.relative_to(src).as_posix())
    assert raisers == ["policy/operating_point.py"]


def test_rule_record_round_trip_and_one_value_across_processes():
    rule = SegmentRule("system", segment_budget=0.2, own_budget=1, segment_prefill="full")
    assert rule.own_budget == 1.0 and isinstance(rule.own_budget, float)
    assert SegmentRule.from_record(rule.record()) == rule and SegmentRule.from_json(rule.to_json()) == rule
    point = OperatingPoint("prefill", 4, rule)
    assert OperatingPoint.from_record(point.record()) == point
    with pytest.raises(OperatingPointError, match="unknown segment rule key 'budget'"):
        SegmentRule.from_record({"budget": 0.2})
    from sglang_pask.srt.serving import ServingFlags

    flags = ServingFlags(method="pask", budget=0.33, overrides={"segment": "system", "own_budget": 1.0}, radix=True)
    assert ServingFlags.from_json(flags.to_json()) == flags


def test_resolve_sources_and_overrides():
    policy_point = OperatingPoint("prefill", 1, SegmentRule("system", own_budget=1.0))
    r = resolve(policy_point, {})
    assert r.point == policy_point and set(r.sources.values()) == {"policy"} and not r.overridden
    assert r.override_line() is None
    r = resolve(policy_point, {"schedule": "continuous", "interval": 8, "segment_prefill": "full"},
                {"schedule": "--pask-schedule", "interval": "--pask-interval",
                 "segment_prefill": "--pask-segment-prefill"})
    assert r.point.schedule == "continuous" and r.point.segment.segment_prefill == "full"
    assert r.sources["schedule"] == "flag" and r.sources["own_budget"] == "policy"
    assert r.overridden == {"schedule": ("continuous", "prefill"), "interval": (8, 1),
                            "segment_prefill": ("full", "compressed")}
    line = r.override_line({"schedule": "--pask-schedule", "interval": "--pask-interval",
                            "segment_prefill": "--pask-segment-prefill"})
    assert line == ("overrides the policy's operating point: --pask-schedule continuous (policy: prefill), "
                    "--pask-interval 8 (policy: 1), --pask-segment-prefill full (policy: compressed)")
    rec = r.record()
    assert set(rec) == set(FIELDS) | {"overridden"} and rec["schedule"] == {"value": "continuous", "source": "flag"}
    # turning the segment off drops the policy's segment fields with it (they need a segment)
    off = resolve(policy_point, {"segment": "none"})
    assert off.point.segment == SegmentRule() and off.sources["own_budget"] == "default"
    # a flag equal to the policy's value is a flag, not an override
    same = resolve(policy_point, {"schedule": "prefill"})
    assert same.sources["schedule"] == "flag" and not same.overridden
    # no policy (or a format-1 one): defaults; a baseline under a policy takes only its segment rule
    assert set(resolve(None, {}).sources.values()) == {"default"}
    base = resolve(policy_point, {}, only=("segment", "segment_budget", "own_budget", "segment_prefill"))
    assert base.point.schedule == "continuous" and base.sources["schedule"] == "default"
    assert base.point.segment == policy_point.segment


def test_shipped_policies_carry_their_operating_points():
    """Re-issued (``pask policy upgrade``) with what their calibration records say."""
    for name in ("pask-tiny-fc.b0.5.json", "pask-tiny-fc.b0.33.json", "pask-tiny-fc.b0.2.json"):
        p = load_policy(ROOT / "policies" / name)
        assert p.format == "pask-policy/2" and p.point == OperatingPoint("prefill"), name
    p = load_policy(SEGMENT_POLICY)  # the notebook's radix variant
    assert p.point == OperatingPoint("prefill", 1, SegmentRule("system", own_budget=1.0))
    cal = json.loads((SEGMENT_POLICY.parent / "pask-tiny-fc.segment.calibration.json").read_text())["config"]
    assert (cal["schedule"], cal["segment"], cal["own_budget"]) == ("prefill", "system", 1.0)
    record = SEGMENT_POLICY.parent / "pask-tiny-fc.calibration.json"  # the shipped tiny policies' record
    assert json.loads(record.read_text())["config"]["schedule"] == "prefill"


def test_engines_take_their_defaults_from_the_policy():
    from sglang_pask.methods import make_method
    from sglang_pask.srt.serving import ServingFlags, build_config

    seg = load_policy(SEGMENT_POLICY)
    m = make_method("pask", policy=seg)
    assert (m.schedule, m.interval, m.budget) == ("prefill", 1, 0.33)
    assert make_method("pask", policy=seg, schedule="continuous").schedule == "continuous"
    cfg = build_config(str(POLICY))
    assert cfg.method.schedule == "prefill" and set(cfg.resolved.sources.values()) == {"policy"}
    cfg = build_config(str(SEGMENT_POLICY), ServingFlags(radix=True))
    assert cfg.rule == SegmentRule("system", own_budget=1.0) and cfg.radix  # the policy's segment: radix on
    cfg = build_config(str(POLICY), ServingFlags(overrides={"schedule": "continuous"}))
    assert cfg.method.schedule == "continuous" and cfg.resolved.overridden == {"schedule": ("continuous", "prefill")}
    assert "schedule continuous (flag)" in cfg.resolved.sources_line()
    stream = build_config(str(POLICY), ServingFlags(method="streaming", budget=0.5))
    assert stream.method.schedule == "continuous" and stream.resolved.sources["schedule"] == "default"


def test_runner_and_eval_record_take_the_policy_point():
    from sglang_pask.eval.hf_backend import HFBackend
    from sglang_pask.hf import Runner

    runner = Runner(str(MODEL), method="pask", policy=str(SEGMENT_POLICY))
    assert runner.method.schedule == "prefill" and runner.segment_rule == SegmentRule("system", own_budget=1.0)
    backend = HFBackend(runner, "pask", None, str(SEGMENT_POLICY), overrides={"segment_prefill": "full"})
    rec = backend.describe()
    op = rec["operating_point"]
    assert op["schedule"] == {"value": "prefill", "source": "policy"}
    assert op["segment_prefill"] == {"value": "full", "source": "flag"} and op["overridden"] == {
        "segment_prefill": "compressed"}
    assert rec["segment"] == "system" and rec["own_budget"] == 1.0 and rec["segment_prefill"] == "full"
    assert backend.runner.segment_rule.segment_prefill == "full"
    plain = HFBackend(runner, "streaming", 0.33, None).describe()
    assert plain["segment"] == "none" and plain["operating_point"]["schedule"]["source"] == "default"


def test_old_format_loads_with_one_warning_line(tmp_path):
    doc = json.loads(LOOKUP_POLICY.read_text())  # a format-1 file had no residual block
    doc["format"] = "pask-policy/1"
    del doc["operating_point"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    out = subprocess.run([*PASK, "policy", "check", str(old)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "has format 'pask-policy/1' (no operating point)" in lines[0], out.stderr
    assert "operating point: none (pask-policy/1: the engines' defaults)" in out.stdout
    p = load_policy(old)
    assert p.point is None
    from sglang_pask.methods import make_method

    assert make_method("pask", policy=p).schedule == "continuous"  # today's default
    # upgrade: the file records the operating point it was calibrated under
    new = tmp_path / "new.json"
    up = subprocess.run([*PASK, "policy", "upgrade", str(old), "--schedule", "prefill", "--out", str(new)],
                        capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    assert new.read_text() == LOOKUP_POLICY.read_text()  # byte-identical to the (once shipped) re-issue
    bad = subprocess.run([*PASK, "policy", "upgrade", str(old), "--schedule", "prefill", "--own-budget", "1",
                          "--out", str(new)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == \
        "pask policy upgrade: --own-budget needs --segment system"


@pytest.mark.parametrize("edit, msg", [
    (lambda d: d.pop("operating_point"), "operating_point: missing required key"),
    (lambda d: d.update(format="pask-policy/1"), "operating_point needs format 'pask-policy/2'"),
    (lambda d: d["operating_point"].update(schedule="weekly"),
     "operating_point.schedule must be one of continuous, prefill, got 'weekly'"),
    (lambda d: d["operating_point"]["segment"].update(own_budget=1.0),
     "operating_point.segment.own_budget needs operating_point.segment.segment system"),
    (lambda d: d["operating_point"].update(window=3), "unknown key 'window'"),
])
def test_policy_file_operating_point_errors_name_the_field(tmp_path, edit, msg):
    doc = json.loads(POLICY.read_text())
    edit(doc)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        load_policy(path)


def test_cli_flags_come_from_the_rule(tmp_path):
    """``pask eval`` and ``pask calibrate`` add the rule's flags through SegmentRule and word its
    errors with them (one line, rc 2, before any model loads)."""
    bad = subprocess.run([*PASK, "calibrate", "--model", str(MODEL), "--data", "synthetic:calib:4:tiny",
                          "--groups", "2", "--segment-budget", "0.2", "--out", str(tmp_path / "x.json")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == \
        "pask calibrate: --segment-budget needs --segment system", bad.stderr
    bad = subprocess.run([*PASK, "eval", "--backend", "hf", "--model", str(MODEL), "--data", "synthetic:calib:2:tiny",
                          "--method", "pask", "--policy", str(POLICY), "--own-budget", "1",
                          "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == \
        "pask eval: error: --own-budget needs --segment system", bad.stderr
