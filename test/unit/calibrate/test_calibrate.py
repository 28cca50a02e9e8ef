"""``pask calibrate`` end to end at toy size (pask-tiny-fc, 3 calib entries: 1 probe, 2 fit, 1
held out; 8 new tokens; two budgets): it writes a policy per budget plus the main one and a report;
every policy validates, binds to the model and drives the pask method; two runs with the same seed
write byte-identical policies; the probe methods drop what they say.

Sizes: most of a run is the sensitivity probes' teacher-forced gold NLL (one forward per gold
token, per probed class and group), so seed 11 makes the probe entry one with a short gold call
(``synthetic_multiple_calib_1``). Every stage still runs: S, D, the search at each budget, the
held-out check, the report. Runs get one torch thread, as bench/tiny_calibration_report.sh gives
them: the tiny model gains nothing from a second, and on a busy machine two spin-waiting threads
made a run several times slower."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from sglang_pask.calibrate.probes import DropClass, DropDelimiters, RecencyGroup
from sglang_pask.methods.base import CacheView
from sglang_pask.policy.operating_point import OperatingPoint, SegmentRule

FC = ROOT / "models" / "pask-tiny-fc"
DATA = "synthetic:calib:3:tiny"
ARGS = ["calibrate", "--model", str(FC), "--data", DATA, "--groups", "2",
        "--budgets", "0.5,0.33", "--fit-n", "2", "--probe-n", "1", "--max-tokens", "8", "--seed", "11",
        "--folds", "2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _pask(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "pask"), *map(str, args)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=ENV)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of one seed: the first reuses prompt forwards (the default prefill memo), the
    second runs every forward (--prefill-memo-mb 0); their files must be byte-identical."""
    outs = [tmp_path_factory.mktemp(f"cal{i}") / "toy.json" for i in range(2)]
    for out, memo in zip(outs, ([], ["--prefill-memo-mb", "0"])):
        res = _pask(*ARGS, *memo, "--out", out)
        assert res.returncode == 0, res.stderr[-3000:]
    return outs


def test_writes_policies_that_validate_bind_and_run(runs):
    from sglang_pask.methods import make_method
    from sglang_pask.policy import load_policy

    out = runs[0]
    for name in ("toy.json", "toy.b0.5.json", "toy.b0.33.json"):
        p = load_policy(out.with_name(name), model_dir=FC)  # schema + binding
        cal = p.calibration
        assert cal is not None and cal.split == "calib" and cal.data == DATA
        assert cal.samples == 1 and cal.seed == 11 and "git " in cal.tool_version
        assert len(cal.sensitivity) == len(cal.distortion) == p.num_groups == 2
        assert set(cal.distortion[0]) == {"0.5", "0.33"}
        assert p.point == OperatingPoint("prefill")  # the operating point it was calibrated under
        assert make_method("pask", policy=p).schedule == "prefill"  # binds into the method, at that point
        # what each group holds, measured on the held-out entry: the server sizes its pools by it
        assert p.pools is not None and p.pools.entries == 1 and len(p.pools.share) == 2
        assert p.pools.data == f"{DATA} (check entries)" and all(0 < x <= 1 for x in p.pools.share)
    assert out.read_bytes() == out.with_name("toy.b0.33.json").read_bytes()
    md = out.with_name("toy.calibration.md").read_text()
    for part in ("Task-error sensitivity", "Attention-output distortion", "Family search", "Held-out check",
                 "What each group holds"):
        assert part in md
    doc = json.loads(out.with_name("toy.calibration.json").read_text())
    assert set(doc["pools"]) == {"0.5", "0.33"} and "pools 0.33" in doc["timings_s"]
    assert doc["split_sizes"] == {"probe": 1, "fit": 2, "check": 1}  # every stage ran on something
    assert doc["search_progress"] == {}  # a finished search leaves no partial record
    for s in doc["search"].values():  # per-entry outcomes in every row; the 2-fold estimate of the search
        assert all(len(r["valid"]) == 2 for r in s["rows"] + s["kfold_rows"])
        assert s["kfold"]["k"] == 2 and [f["n"] for f in s["kfold"]["folds"]] == [1, 1]
    assert "K-fold (2 folds" in md and "Chosen members: fit, k-fold and held-out calib" in md
    assert set(doc["joint"]["nll"]) == set(doc["sensitivity"]["classes"])  # the joint probe ran
    assert out.with_name("toy.S.png").stat().st_size > 0 and out.with_name("toy.D.png").stat().st_size > 0


def test_same_seed_same_bytes_with_and_without_the_prefill_memo(runs):
    for name in ("toy.json", "toy.b0.5.json", "toy.b0.33.json"):
        assert runs[0].with_name(name).read_bytes() == runs[1].with_name(name).read_bytes(), name
    memo, off = (json.loads(r.with_name("toy.calibration.json").read_text()) for r in runs)
    stats = memo["prefill_memo (this invocation)"]
    assert stats["hits"] > stats["misses"] > 0, stats  # probes and members reused the forwards
    assert "prefill_memo (this invocation)" not in off
    assert memo["sensitivity"] == off["sensitivity"] and memo["distortion"] == off["distortion"]


def test_refuses_eval_data(tmp_path, capsys):
    from sglang_pask import cli

    assert cli.main([*ARGS[:4], "synthetic:eval:6:tiny", *ARGS[5:], "--out", str(tmp_path / "x.json")]) == 2
    assert "calibration split" in capsys.readouterr().err
    assert cli.main([*ARGS, "--prefill-memo-mb", "-1", "--out", str(tmp_path / "x.json")]) == 2
    assert "--prefill-memo-mb must be >= 0" in capsys.readouterr().err
    assert cli.main([*ARGS, "--check-n", "0", "--out", str(tmp_path / "x.json")]) == 2
    assert "--check-n must be >= 1" in capsys.readouterr().err


def test_check_n_caps_the_held_out_check():
    from sglang_pask.calibrate.pipeline import Config, _split
    from sglang_pask.eval.data import load_spec

    entries = load_spec("synthetic:calib:10:tiny")
    cfg = Config(model=str(FC), data="synthetic:calib:10:tiny", groups=2, budgets=(0.33,), out="x.json",
                 fit_n=4, probe_n=2)
    probe, fit, check = _split(entries, cfg)
    assert (len(probe), len(fit), len(check)) == (2, 4, 6)
    cfg3 = Config(**{**cfg.__dict__, "check_n": 3})
    capped = _split(entries, cfg3)
    assert capped[1] == fit and capped[2] == check[:3]  # the same fit set; the first 3 of the rest
    assert "check_n" not in cfg.record_key() and cfg3.record_key()["check_n"] == 3  # older records match


def _view(classes) -> CacheView:
    n = len(classes)
    return CacheView(num_layers=4, groups=[[0, 1], [2, 3]], seq_len=n, classes=np.array(classes),
                     retained=[np.arange(n)] * 4, protected_tail=1)


def test_probes_touch_only_their_layers():
    view = _view([1, 6, 6, 5, 5, 6, 4, 4, 4, 6])
    sel = DropClass(1.0, layers=(2, 3), cls=6).select(view)
    assert [k.tolist() for k in sel.kept[:2]] == [list(range(10))] * 2
    assert sel.kept[2].tolist() == sel.kept[3].tolist() == [0, 3, 4, 6, 7, 8, 9]  # the tail stays
    # class 6 (TOOL_NAME) at 1, 2 and 5; delimiters (SCHEMA_PUNCT = 15, OUT_DELIM = 22) at 0, 3, 4, 6, 7
    view = _view([15, 6, 6, 22, 15, 6, 15, 15, 4, 4])
    sel = DropDelimiters(1.0, layers=(0,), cls=6).select(view)
    assert sel.kept[0].tolist() == [1, 2, 5, 7, 8, 9] and sel.kept[1].size == 10  # 0, 3, 4, 6 touch a name
    view = _view([1, 6, 6, 5, 5, 6, 4, 4, 4, 6])
    sel = RecencyGroup(0.5, layers=(0,), sinks=2).select(view)
    assert sel.kept[0].tolist() == [0, 1, 7, 8, 9] and sel.kept[1].size == 10


def test_coordinate_search_climbs_each_axis_once_per_member():
    from sglang_pask.calibrate.family import START, Member
    from sglang_pask.calibrate.search import coordinate_search

    axes = {"tilt": (-1.0, 0.0, 1.0, 2.0), "sinks": (1, 4), "window_frac": (0.0, 0.25, 0.5)}
    calls: list[Member] = []

    def objective(m: Member) -> float:  # separable, optimum at tilt 1, sinks 1, window 0.5
        calls.append(m)
        return -abs(m.tilt - 1.0) - abs(m.sinks - 1) + m.window_frac

    best, order, passes = coordinate_search(objective, START, axes, passes=3)
    assert (best.tilt, best.sinks, best.window_frac) == (1.0, 1, 0.5)
    assert (best.top_k, best.alpha) == (START.top_k, START.alpha)  # axes not searched stay
    assert calls == order and len(set(calls)) == len(calls)  # every member scored once
    assert passes == 2  # the second pass changes nothing and stops the search

    flat, order, passes = coordinate_search(lambda m: 0.5, START, axes, passes=3)
    assert flat == START and passes == 1  # ties keep the incumbent


def test_residual_shares_tilt_toward_deeper_groups():
    from sglang_pask.calibrate.family import residual_shares as _shares

    assert _shares([0.9, 0.3], alpha=0.0) == [0.5, 0.5]
    assert _shares([0.9, 0.3], alpha=0.0, tilt=1.0) == [0.333333, 0.666667]
    assert _shares([0.9, 0.3], alpha=1.0) == [0.75, 0.25]
    assert _shares([0.9, 0.3], alpha=1.0, tilt=2.0) == [0.428571, 0.571429]  # 0.9 : 0.3 * 4


def test_ablations_take_out_one_part(tmp_path, capsys):
    from sglang_pask.calibrate.ablation import ablate
    from sglang_pask.policy import load_policy

    src = ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.33.json"  # two groups
    p = load_policy(src, model_dir=FC)
    fo = ablate(p, "floors-only")
    assert fo.residual_share == [0.5, 0.5] and fo.floor == p.floor and fo.priority == p.priority
    ro = ablate(p, "residual-only")
    assert not ro.floor_table().any() and ro.residual_share == p.residual_share
    assert (ro.sinks, ro.recent_window) == (p.sinks, p.recent_window) and ro.name.endswith("~residual-only")
    with pytest.raises(ValueError, match="unknown ablation 'x'"):
        ablate(p, "x")
    from sglang_pask import cli  # the command in-process (the calibrate runs start the console script)

    assert cli.main(["policy", "ablate", str(src), "--variant", "floors-only", "--out", str(tmp_path / "fo.json")]) == 0
    assert load_policy(tmp_path / "fo.json", model_dir=FC) == fo
    capsys.readouterr()
    assert cli.main(["policy", "ablate", str(tmp_path / "missing.json"), "--variant", "floors-only",
                     "--out", str(tmp_path / "x.json")]) == 1
    assert "missing.json" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_class_order_by_total_or_density():
    from sglang_pask.calibrate.family import class_order

    score = [{"SCHEMA_PUNCT": 0.2, "TEMPLATE_SPECIAL": 0.1, "QUERY_VALUE": 0.0, "TOOL_NAME": 0.0},
             {"SCHEMA_PUNCT": 0.0, "TEMPLATE_SPECIAL": 0.0, "QUERY_VALUE": 1.0, "TOOL_NAME": 0.0}]
    tokens = {"SCHEMA_PUNCT": 70.0, "TEMPLATE_SPECIAL": 5.0, "QUERY_VALUE": 2.0, "TOOL_NAME": 4.0}
    total = class_order(score, "total")
    # group 0: what group 0 measured, then QUERY_VALUE (measured in group 1 only) before TOOL_NAME
    assert total[0] == ["SCHEMA_PUNCT", "TEMPLATE_SPECIAL", "QUERY_VALUE", "TOOL_NAME"]
    assert total[1] == ["QUERY_VALUE", "SCHEMA_PUNCT", "TEMPLATE_SPECIAL", "TOOL_NAME"]
    dens = class_order(score, "density", tokens)
    assert dens[0] == ["TEMPLATE_SPECIAL", "SCHEMA_PUNCT", "QUERY_VALUE", "TOOL_NAME"]  # 0.02 > 0.0029 per token
    assert dens[1] == ["QUERY_VALUE", "TEMPLATE_SPECIAL", "SCHEMA_PUNCT", "TOOL_NAME"]
    with pytest.raises(ValueError, match="token counts"):
        class_order(score, "density")
    with pytest.raises(ValueError, match="rank must be"):
        class_order(score, "sum")


def test_segment_mode_search_scores_under_the_segment_rule(tmp_path, capsys):
    """``--segment system --own-budget 1``: the search and check score PASK and SnapKV with the
    tools block compressed alone and the own tokens kept (what the report says), and the policy
    validates and binds; ``--own-budget`` without ``--segment system`` is one line, rc 2."""
    from sglang_pask import cli
    from sglang_pask.policy import load_policy

    base = [*ARGS[:7], "--budgets", "0.33", *ARGS[9:]]  # one budget
    assert cli.main([*base, "--own-budget", "1", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "--own-budget needs --segment system" in err, err
    # SnapKV per KV head (the default baseline) keeps no segments: refused, naming the way out
    assert cli.main([*base, "--segment", "system", "--own-budget", "1", "--out", str(tmp_path / "y.json")]) == 2
    err = capsys.readouterr().err
    assert "--baseline snapkv: snapkv: per_head selection does not support segment compression" in err, err
    assert "snapkv:per_head=false" in err
    out = tmp_path / "seg.json"
    res = _pask(*base, "--segment", "system", "--own-budget", "1", "--baseline", "snapkv:per_head=false", "--out", out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert load_policy(out, model_dir=FC).point == OperatingPoint("prefill", 1, SegmentRule("system", own_budget=1.0))
    md = out.with_name("seg.calibration.md").read_text()
    assert "scored under `--segment system`" in md and "own tokens at budget 1" in md
    doc = json.loads(out.with_name("seg.calibration.json").read_text())
    assert doc["config"]["segment"] == "system" and doc["config"]["own_budget"] == 1.0
    assert set(doc["search"]) == set(doc["check"]) == {"0.33"}  # the search and the check both ran


def test_nll_signal_and_objective_end_to_end(runs, tmp_path):
    """``--sensitivity-signal nll --search-objective nll --search-passes 1`` (the real model's
    setting): the probes measure the same NLL rises as signal ``both`` (the ``runs`` fixture: same
    seed, entries and groups) and no failure rate (None, "-" in the report); the search rows hold
    gold NLLs, the best is the lowest; the held-out check still generates; the policies bind."""
    from sglang_pask.calibrate.family import sensitivity_score
    from sglang_pask.calibrate.pipeline import Config
    from sglang_pask.policy import load_policy

    out = tmp_path / "toy.json"
    res = _pask(*ARGS, "--sensitivity-signal", "nll", "--search-objective", "nll", "--search-passes", "1",
                "--out", out)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.with_name("toy.calibration.json").read_text())
    assert doc["config"]["signal"] == "nll" and doc["config"]["search_objective"] == "nll"
    sens, both = doc["sensitivity"], json.loads(runs[0].with_name("toy.calibration.json").read_text())["sensitivity"]
    assert sens["signal"] == "nll" and both["signal"] == "both"
    assert sens["nll"] == both["nll"] and sens["full"]["nll"] == both["full"]["nll"]
    assert sens["full"]["fail"] is None and all(v is None for g in sens["fail"] for v in g.values())
    assert all(d[c]["fail"] is None and d[c]["nll"] == b[c]["nll"]
               for d, b in zip(sens["delimiters"], both["delimiters"]) for c in d)
    assert sensitivity_score(sens) == [{c: round(max(v, 0.0), 6) for c, v in g.items()} for g in sens["nll"]]
    md = out.with_name("toy.calibration.md").read_text()
    assert "failure rate -," in md and "| - / " in md
    for bad, match in (({"signal": "fail"}, "--sensitivity-signal must be one of both, nll"),
                       ({"search_passes": 0}, "--search-passes must be >= 1"),
                       ({"search_objective": "loss"}, "--search-objective must be one of accuracy, nll, kl")):
        with pytest.raises(ValueError, match=match):
            Config(model=str(FC), data=DATA, groups=2, budgets=(0.33,), out="x.json", **bad)
    key = Config(model=str(FC), data=DATA, groups=2, budgets=(0.33,), out="x.json").record_key()
    assert not {"signal", "search_passes", "search_objective"} & set(key)  # older records still match
    for k in ("0.5", "0.33"):
        s = doc["search"][k]
        assert s["objective"] == "nll" and s["passes"] == 1 and all("nll" in r for r in s["rows"])
        assert s["rows"][s["best"]]["nll"] == min(r["nll"] for r in s["rows"])
        assert 0.0 <= doc["check"][k]["pask"] <= 1.0  # the held-out check generated and scored
    assert "gold NLL/token (lower is better)" in out.with_name("toy.calibration.md").read_text()
    assert "fit gold NLL" in res.stdout
    load_policy(out, model_dir=FC)


def test_search_resumes_member_by_member():
    """A search interrupted after some members (here: the third save raises) and rerun with the
    same progress dict scores only the members not yet scored and returns exactly what an
    uninterrupted search returns (nll objective, 2 fit entries, a small grid)."""
    import sglang_pask
    from sglang_pask.calibrate.family import START, compile_policy
    from sglang_pask.calibrate.search import search_budget
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.harness import Settings
    from sglang_pask.policy.binding import ModelBinding

    runner = sglang_pask.load_runner(str(FC))
    binding = ModelBinding.from_model(str(FC))
    entries = load_spec(DATA)[:2]
    score = [{"TOOL_NAME": 1.0, "PARAM_NAME": 0.5}, {"TOOL_NAME": 0.5, "PARAM_NAME": 1.0}]
    dist = [{"0.33": 0.1}, {"0.33": 0.2}]
    axes = {"tilt": (0.0, 2.0), "window_frac": (0.25, 0.5)}
    calls = []

    def member_policy(m):
        calls.append(m.label)
        return compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.33, m, 200.0)

    args = (runner, member_policy, entries, 0.33, Settings(max_tokens=8, tool_choice="required"), 0)
    whole = search_budget(*args, axes=axes, objective="nll")
    scored = len(calls)
    progress, saves = {}, []

    def interrupt():
        saves.append(1)
        if len(saves) == 3:  # the baseline and two members are saved
            raise KeyboardInterrupt

    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        search_budget(*args, axes=axes, objective="nll", progress=progress, save=interrupt)
    assert len(progress["rows"]) == 2 and "baseline" in progress
    calls.clear()
    resumed = search_budget(*args, axes=axes, objective="nll", progress=progress)
    assert resumed == whole and len(calls) == scored - 2 and START.label in progress["rows"]


def test_reuse_stages_adopts_only_a_matching_record(tmp_path):
    """``--reuse-stages``: the stages a record of other code measured are adopted (with their
    timings, and the record names the code) only when every configuration field but ``code``
    matches, but the budgets (then only the sensitivity, which is measured per group and class, not
    per budget); a differing field is refused naming it; the search is never adopted, and stages the
    run already holds are kept."""
    from sglang_pask.calibrate.pipeline import ReuseError, adopt_stages
    from sglang_pask.calibrate.report import _reused_line

    key = {"model": "m", "data": "bfcl:all:calib=25", "budgets": [0.33], "code": "new"}
    old = {"config": {**key, "code": "old"}, "sensitivity": {"s": 1}, "distortion": [{"0.33": 0.1}],
           "search": {"0.33": {"best": 0}}, "timings_s": {"sensitivity": 12.0, "distortion": 3.0}}
    path = tmp_path / "old.calibration.json"
    path.write_text(json.dumps(old))
    doc = {"config": key}
    assert adopt_stages(doc, key, str(path)) == ["sensitivity", "distortion"]
    assert doc["sensitivity"] == {"s": 1} and doc["distortion"] == [{"0.33": 0.1}] and "search" not in doc
    assert doc["timings_s"] == {"sensitivity": 12.0, "distortion": 3.0}
    assert doc["reused"] == {"sensitivity": "old", "distortion": "old"}
    assert _reused_line(doc["reused"])[0] == ("Adopted with `--reuse-stages` (measured by old, same "
                                              "configuration): sensitivity, distortion.")
    held = {"config": key, "sensitivity": {"s": 2}}
    assert adopt_stages(held, key, str(path)) == ["distortion"] and held["sensitivity"] == {"s": 2}
    # other budgets: the sensitivity is adopted, the distortion (measured per budget) is not
    budgets = {**key, "budgets": [0.2]}
    fresh = {"config": budgets}
    assert adopt_stages(fresh, budgets, str(path)) == ["sensitivity"] and "distortion" not in fresh
    with pytest.raises(ReuseError, match=r"its model is 'm', this run's 'n'"):
        adopt_stages({}, {**key, "model": "n"}, str(path))
    # fields only the search reads do not change what the stages measured
    other = {**key, "search_objective": "kl", "search_passes": 1, "check_n": 24, "attention_blend": True}
    assert adopt_stages({"config": other}, other, str(path)) == ["sensitivity", "distortion"]
    # a record from before the segment rule measured without one
    plain = {**key, "segment": "none"}
    assert adopt_stages({"config": plain}, plain, str(path)) == ["sensitivity", "distortion"]
    with pytest.raises(ReuseError, match=r"its segment is None, this run's 'system'"):
        adopt_stages({}, {**key, "segment": "system"}, str(path))


def test_kl_objective_is_zero_for_full_and_ranks_members_by_it():
    """``gold_kl``: 0 (to rounding) for a method that drops nothing, positive when it drops; the
    ``kl`` search stores each member's mean KL, the baseline's, and picks the lowest; the CLI
    spells the same objectives as the search."""
    import sglang_pask
    from sglang_pask.calibrate import commands
    from sglang_pask.calibrate.family import compile_policy
    from sglang_pask.calibrate.search import OBJECTIVES, search_budget
    from sglang_pask.eval.api import gold_kl, gold_nll
    from sglang_pask.eval.data import load_spec
    from sglang_pask.eval.harness import Settings
    from sglang_pask.policy.binding import ModelBinding

    assert commands.OBJECTIVES == OBJECTIVES
    runner = sglang_pask.load_runner(str(FC))
    entries = load_spec(DATA)[:2]
    st = Settings(max_tokens=8, tool_choice="required")
    ref = gold_nll(runner, "full", entries[0], settings=st, logprobs=True)
    assert ref.logprobs.shape[0] == ref.tokens
    assert gold_kl(runner, "streaming", entries[0], ref, budget=1.0, settings=st) < 1e-6
    assert gold_kl(runner, "streaming", entries[0], ref, budget=0.2, settings=st) > 1e-3
    with pytest.raises(ValueError, match="reference with log-distributions"):
        gold_kl(runner, "streaming", entries[0], gold_nll(runner, "full", entries[0], settings=st), budget=0.2,
                settings=st)
    binding = ModelBinding.from_model(str(FC))
    score = [{"TOOL_NAME": 1.0, "PARAM_NAME": 0.5}, {"TOOL_NAME": 0.5, "PARAM_NAME": 1.0}]
    refs: dict = {}
    dist = [{"0.33": 0.1}, {"0.33": 0.2}]
    res = search_budget(runner, lambda m: compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.33, m, 200.0),
                        entries, 0.33, st, 0, axes={"window_frac": (0.25, 0.75)}, objective="kl", references=refs)
    assert res["objective"] == "kl" and set(refs) == {e.id for e in entries} and res["baseline"] > 0
    assert len(res["rows"]) == 2 and all(r["kl"] >= 0 for r in res["rows"])
    assert res["rows"][res["best"]]["kl"] == min(r["kl"] for r in res["rows"])


def test_pinned_classes_are_floored_in_every_group():
    """A member's ``pin`` floors its classes at 1 in every group, on top of the top-k of each
    group's order; an unknown pin is refused naming the choices; an unpinned label is unchanged."""
    from sglang_pask.calibrate.family import PINS, START, Member, compile_policy
    from sglang_pask.policy.binding import ModelBinding

    binding = ModelBinding.from_model(str(FC))
    score = [{"TOOL_NAME": 1.0, "PARAM_NAME": 0.0}, {"TOOL_NAME": 0.0, "PARAM_NAME": 1.0}]
    member = Member(window_frac=0.25, top_k=1, alpha=0.0, pin="names")
    pol = compile_policy(binding, [[0, 1], [2, 3]], score, [{"0.33": 0.1}, {"0.33": 0.2}], 0.33, member, 200.0)
    for fl in pol.floor:
        assert {c for c, v in fl.items() if v == 1.0} == set(PINS["names"])
    none = compile_policy(binding, [[0, 1], [2, 3]], score, [{"0.33": 0.1}, {"0.33": 0.2}], 0.33,
                          Member(window_frac=0.25, top_k=1, alpha=0.0), 200.0)
    assert [{c for c, v in fl.items() if v == 1.0} for fl in none.floor] == [{"TOOL_NAME"}, {"PARAM_NAME"}]
    assert member.label.endswith(" pin=names") and "pin" not in START.label
    with pytest.raises(ValueError, match="pin must be one of"):
        Member(window_frac=0.25, top_k=0, alpha=0.0, pin="everything")


def test_fractional_floors_and_the_joint_rank():
    """``floor`` < 1 floors the top-k classes at that share (pins stay at 1); with k = 0 it is the
    same member as floor 1 (one label, scored once). Rank ``joint`` orders every group alike by the
    joint probe's score per token, and its top-k comes from that score."""
    from sglang_pask.calibrate.family import Member, class_order, compile_policy, joint_score
    from sglang_pask.policy.binding import ModelBinding

    assert Member(window_frac=0.25, top_k=0, alpha=0.0, floor=0.5) == Member(window_frac=0.25, top_k=0, alpha=0.0)
    with pytest.raises(ValueError, match="floor must be in"):
        Member(window_frac=0.25, top_k=1, alpha=0.0, floor=0.0)
    score = [{"TOOL_NAME": 0.0, "QUERY_TEXT": 0.5, "SCHEMA_PUNCT": 0.1},
             {"TOOL_NAME": 0.0, "QUERY_TEXT": 0.2, "SCHEMA_PUNCT": 0.3}]
    tokens = {"TOOL_NAME": 4.0, "QUERY_TEXT": 10.0, "SCHEMA_PUNCT": 50.0}
    joint = joint_score({"fail": {"TOOL_NAME": 0.5, "QUERY_TEXT": None, "SCHEMA_PUNCT": -0.1},
                         "nll": {"TOOL_NAME": 0.1, "QUERY_TEXT": 0.4, "SCHEMA_PUNCT": 0.5}})
    assert joint == {"TOOL_NAME": 0.6, "QUERY_TEXT": 0.4, "SCHEMA_PUNCT": 0.5}
    order = class_order(score, "joint", tokens, joint)
    assert order == [["TOOL_NAME", "QUERY_TEXT", "SCHEMA_PUNCT"]] * 2  # 0.15 > 0.04 > 0.01 per token
    with pytest.raises(ValueError, match="joint probe"):
        class_order(score, "joint", tokens)
    binding = ModelBinding.from_model(str(FC))
    dist = [{"0.33": 0.1}, {"0.33": 0.2}]
    m = Member(window_frac=0.25, top_k=1, alpha=0.0, rank="joint", floor=0.5, pin="names")
    pol = compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.33, m, 200.0, tokens=tokens, joint=joint)
    for fl in pol.floor:  # TOOL_NAME is both the joint top-1 and pinned: the pin's 1 wins
        assert {c: v for c, v in fl.items() if v} == {"TOOL_NAME": 1.0, "PARAM_NAME": 1.0}
    m = Member(window_frac=0.25, top_k=2, alpha=0.0, rank="joint", floor=0.5)
    pol = compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.33, m, 200.0, tokens=tokens, joint=joint)
    assert [{c: v for c, v in fl.items() if v} for fl in pol.floor] == [{"TOOL_NAME": 0.5, "QUERY_TEXT": 0.5}] * 2
    assert pol.priority[0][:3] == pol.priority[1][:3] == ["TOOL_NAME", "QUERY_TEXT", "SCHEMA_PUNCT"]
    assert m.label.endswith(" floor=0.5")


def test_kfold_estimate_reruns_the_search_on_the_other_folds():
    """Members with known per-entry outcomes: each fold's search sees only the other folds, its
    choice is scored on the held fold, and the estimate is the size-weighted mean."""
    from dataclasses import replace

    from sglang_pask.calibrate.family import START
    from sglang_pask.calibrate.kfold import fold_indices, kfold_estimate, subset_value

    n, k = 12, 3
    parts = fold_indices(n, k, seed=0)
    assert sorted(np.concatenate(parts).tolist()) == list(range(n)) and [p.size for p in parts] == [4, 4, 4]
    with pytest.raises(ValueError, match="k-fold needs"):
        fold_indices(3, 4, 0)
    cats = ["a", "b"] * 6
    held0, held2 = set(parts[0].tolist()), set(parts[2].tolist())
    outcome = {  # window 0.5 is right everywhere but on fold 2; sinks=1 only on fold 0, when fold 0 is held
        START: [0] * n,
        replace(START, sinks=1): [0] * n,
        replace(START, window_frac=0.5): [0 if i in held2 else 1 for i in range(n)],
        replace(START, sinks=1, window_frac=0.5): [0] * n,
    }
    axes = {"sinks": (1, 4), "window_frac": (0.25, 0.5)}
    best = replace(START, window_frac=0.5)
    res = kfold_estimate(lambda m: {"valid": outcome[m]}, START, axes, 2, cats, k, 0, "accuracy", best)
    assert [f["chosen"] for f in res["folds"]] == [best.label] * 3
    assert [f["held"] for f in res["folds"]] == [1.0, 1.0, 0.0]  # fold 2's entries all fail under it
    assert [f["train"] for f in res["folds"]] == [0.5, 0.5, 1.0]
    assert res["estimate"] == pytest.approx(8 / 12, abs=1e-6) and res["agree"] == 3
    assert res["fit"] == pytest.approx(subset_value({"valid": outcome[best]}, np.arange(n), cats, "accuracy"))
    # a fold whose training entries favour another member chooses it
    outcome[replace(START, sinks=1)] = [1 if i in held0 else 0 for i in range(n)]
    res = kfold_estimate(lambda m: {"valid": outcome[m]}, START, axes, 2, cats, k, 0, "accuracy", best)
    assert res["folds"][1]["chosen"] == replace(START, sinks=1).label and res["agree"] == 1
    forced = kfold_estimate(lambda m: {"values": [float(sum(outcome[m]))] * n}, START, axes, 1, cats, k, 0,
                            "kl", START)
    assert forced["estimate"] == 0.0 and forced["agree"] == k  # lower is better: START (all 0) wins


def test_calibrate_refuses_a_bad_baseline_or_fold_count():
    from sglang_pask.calibrate.pipeline import Config

    base = dict(model=str(FC), data=DATA, groups=2, budgets=(0.33,), out="x.json", fit_n=2, probe_n=1)
    with pytest.raises(ValueError, match="--baseline must be a registry method other than pask"):
        Config(**base, baseline="pask")
    with pytest.raises(ValueError, match="--baseline must be"):
        Config(**base, baseline="nosuch")
    with pytest.raises(ValueError, match="--folds must be 0"):
        Config(**base, folds=1)
    with pytest.raises(ValueError, match="--folds must be 0"):
        Config(**base, folds=3)  # more folds than fit entries
    assert Config(**base, baseline="kvzip", folds=2).record_key()["baseline"] == "kvzip"
    # always named: a record that names none paired with SnapKV per layer (the default before)
    assert Config(**base).record_key()["baseline"] == "snapkv" and "folds" not in Config(**base).record_key()
    assert Config(**base, baseline="snapkv:per_head=false").record_key()["baseline"] == "snapkv:per_head=false"
    with pytest.raises(ValueError, match="--baseline snapkv:nosuch=1: "):
        Config(**base, baseline="snapkv:nosuch=1")


def test_scorer_members_compile_to_the_policy_statistic_and_head_split():
    """``scorer`` names the statistic a blend reads and whether per KV head; a scorer other than
    ``window`` starts at blend 0.5 (so the axis, visited at blend 0, tries it); the lookup keeps
    the fields at their defaults, so its files and hashes do not change."""
    from sglang_pask.calibrate.family import (
        BLEND_AXES,
        LEARNED_AXES,
        LEARNED_SCORERS,
        SCORER_BLEND,
        SCORERS,
        START,
        Member,
        compile_policy,
    )
    from sglang_pask.policy.binding import ModelBinding

    assert list(BLEND_AXES)[-3:] == ["scorer", "split", "blend"]
    assert set(BLEND_AXES["scorer"]) == set(SCORERS) - set(LEARNED_SCORERS)  # no scorer file: no learned one
    assert LEARNED_AXES["scorer"] == LEARNED_SCORERS == ("learned", "learned/heads")
    m = Member(window_frac=0.25, top_k=0, alpha=0.0, scorer="kvzip/heads")
    assert m.blend == SCORER_BLEND and m.label.endswith(" blend=0.5 scorer=kvzip/heads")
    assert Member(window_frac=0.25, top_k=0, alpha=0.0, blend=0.25, scorer="kvzip").blend == 0.25
    with pytest.raises(ValueError, match="scorer must be one of"):
        Member(window_frac=0.25, top_k=0, alpha=0.0, scorer="h2o")
    binding = ModelBinding.from_model(str(FC))
    score = [{"TOOL_NAME": 1.0}, {"TOOL_NAME": 0.5}]
    dist = [{"0.33": 0.1}, {"0.33": 0.2}]
    pol = compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.33, m, 200.0)
    assert (pol.residual.blend, pol.residual.stat, pol.residual.per_head) == (0.5, "kvzip", True)
    lookup = compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.33, START, 200.0).document()
    assert not {"residual", "attention_blend", "attention_stat", "head_split", "residual_split"} & set(lookup)


def test_equal_pools_searches_only_what_the_servers_pools_hold(tmp_path):
    """``--equal-pools``: the attention-informed family without a split across groups and without
    per-KV-head sets (the server's per-group pools hold b of each group, one slot per position);
    the record says so, a record without it lends its members (same policies), and a start outside
    the restricted family or the flag without ``--attention-blend`` is refused."""
    from sglang_pask.calibrate.family import BLEND_AXES, LEARNED_AXES, equal_pools
    from sglang_pask.calibrate.pipeline import SEARCH_FREE, SEARCH_ONLY, Config

    assert equal_pools(LEARNED_AXES)["scorer"] == ("learned",) and equal_pools(LEARNED_AXES)["split"] == ("share",)
    assert equal_pools(BLEND_AXES)["scorer"] == ("window", "kvzip")
    assert {k: v for k, v in equal_pools(BLEND_AXES).items() if k not in ("scorer", "split")} == {
        k: v for k, v in BLEND_AXES.items() if k not in ("scorer", "split")}
    base = dict(model=str(FC), data="synthetic:calib:20:tiny", groups=2, budgets=(0.33,), out=str(tmp_path / "p.json"),
                fit_n=10, probe_n=4)
    cfg = Config(**base, attention_blend=True, equal_pools=True, search_start="blend=0.5,scorer=kvzip")
    assert cfg.axes == equal_pools(BLEND_AXES) and cfg.record_key()["equal_pools"] is True
    assert "equal_pools" not in Config(**base, attention_blend=True).record_key()
    assert "equal_pools" in SEARCH_ONLY and "equal_pools" in SEARCH_FREE
    with pytest.raises(ValueError, match="--equal-pools restricts the attention-informed family"):
        Config(**base, equal_pools=True)
    with pytest.raises(ValueError, match="--equal-pools searches split=share"):
        Config(**base, attention_blend=True, equal_pools=True, search_start="blend=0.5,scorer=kvzip/heads")


def test_learned_members_pin_their_scorer_and_write_it_beside_the_policy(tmp_path):
    """A member whose scorer is learned compiles to a residual that names the scorer file and pins
    its sha256; the policy hashes by the pin, not the path; written out, the policy gets the scorer
    beside it and loads and builds a pask that reads it; a changed file, a missing one, or another
    model's scorer are refused naming the file; none without --scorer."""
    import json
    import shutil

    from sglang_pask.calibrate.family import Member, compile_policy
    from sglang_pask.methods import make_method
    from sglang_pask.methods.learned import scorer_sha256
    from sglang_pask.policy import PolicyError, load_policy, save_policy
    from sglang_pask.policy.binding import ModelBinding
    from sglang_pask.policy.digest import policy_hash

    shipped = ROOT / "policies" / "pask-tiny-fc.kvzap.safetensors"
    here = tmp_path / "scorer" / shipped.name
    here.parent.mkdir()
    shutil.copyfile(shipped, here)
    sha = scorer_sha256(here)
    binding = ModelBinding.from_model(str(FC))
    score = [{"TOOL_NAME": 1.0}, {"TOOL_NAME": 0.5}]
    dist = [{"0.2": 0.1}, {"0.2": 0.2}]
    m = Member(window_frac=0.0, top_k=0, alpha=0.0, scorer="learned/heads", split="scores")
    with pytest.raises(ValueError, match="needs a scorer file"):
        compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.2, m, 200.0)
    pol = compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.2, m, 200.0, scorer=(str(here), sha))
    assert (pol.residual.stat, pol.residual.per_head, pol.residual.scorer, pol.residual.scorer_sha256) == (
        "learned", True, shipped.name, sha)
    assert pol.scorer_path == str(here)
    out = tmp_path / "out" / "p.json"
    out.parent.mkdir()
    save_policy(pol, out)
    assert (out.parent / shipped.name).read_bytes() == shipped.read_bytes()
    back = load_policy(out, model_dir=str(FC))
    assert back == pol and policy_hash(back) == policy_hash(pol) and back.scorer_path == str(out.parent / shipped.name)
    kv = make_method("pask", 0.2, policy=back)
    assert (kv.scorer, kv.scorer_sha256, kv.needs_attention) == (back.scorer_path, sha, "learned_heads")
    # the pin is part of the policy's identity
    doc = json.loads(out.read_text())
    doc["residual"]["scorer_sha256"] = "0" * 64
    (out.parent / "other.json").write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match="has sha256 .* the policy pins 0000"):
        load_policy(out.parent / "other.json")
    (out.parent / shipped.name).unlink()
    with pytest.raises(PolicyError, match="cannot be read .* beside the policy file"):
        load_policy(out)
    doc["residual"]["scorer"] = "../x.safetensors"
    (out.parent / "other.json").write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match="residual.scorer = '../x.safetensors'"):
        load_policy(out.parent / "other.json")
    # a scorer fitted for another model: refused naming both
    doc = json.loads(out.read_text())
    doc["model"] = ModelBinding.from_model(str(FC.parent / "tiny-random-qwen3")).model_dump()
    shutil.copyfile(shipped, out.parent / shipped.name)
    (out.parent / "other.json").write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match="fitted for model"):
        load_policy(out.parent / "other.json")


def test_split_members_rank_the_residual_and_hold_no_shares():
    """``split=scores`` compiles to the policy's ``residual_split``, starts at blend 0.5 like a
    scorer, and holds alpha and tilt at 0 (a ranked member reads no shares, so the axes' other values
    are the same member); ``--search-start`` sets the start's fields by name and type, naming a bad
    one."""
    from dataclasses import replace

    from sglang_pask.calibrate.family import SCORER_BLEND, START, Member, compile_policy, parse_start
    from sglang_pask.policy.binding import ModelBinding

    m = Member(window_frac=0.0, top_k=1, alpha=1.0, tilt=2.0, rank="joint", scorer="kvzip/heads", split="scores")
    assert (m.blend, m.alpha, m.tilt) == (SCORER_BLEND, 0.0, 0.0)
    assert m.label.endswith(" scorer=kvzip/heads split=scores")
    assert m == Member(window_frac=0.0, top_k=1, alpha=0.0, rank="joint", scorer="kvzip/heads", split="scores")
    with pytest.raises(ValueError, match="split must be one of"):
        Member(window_frac=0.25, top_k=0, alpha=0.0, split="even")
    binding = ModelBinding.from_model(str(FC))
    score = [{"TOOL_NAME": 1.0}, {"TOOL_NAME": 0.5}]
    dist = [{"0.2": 0.1}, {"0.2": 0.2}]
    pol = compile_policy(binding, [[0, 1], [2, 3]], score, dist, 0.2, replace(m, rank="total"), 200.0)
    assert (pol.residual.split, pol.residual.stat, pol.residual.per_head) == ("scores", "kvzip", True)
    assert pol.document()["residual"]["split"] == "scores"
    start = parse_start("rank=joint, window_frac=0,blend=0.5,scorer=kvzip/heads,split=scores,top_k=1")
    assert start == Member(window_frac=0.0, top_k=1, alpha=0.0, sinks=START.sinks, rank="joint", blend=0.5,
                           scorer="kvzip/heads", split="scores")
    assert parse_start("") == START
    with pytest.raises(ValueError, match="'width=1' is not FIELD=VALUE"):
        parse_start("width=1")
    with pytest.raises(ValueError, match="top_k='x' is not a int"):
        parse_start("top_k=x")
    with pytest.raises(ValueError, match="^--search-start: scorer must be one of .*'h2o'"):
        parse_start("scorer=h2o")  # refused by the member itself, under the same prefix


def test_reuse_search_scores_only_the_members_a_record_lacks(runs, tmp_path):
    """The attention-informed family after the lookup one (one budget of two, one pass): every
    lookup member the first run scored is taken from its record as is; only the scorer / blend
    members are scored; the record searched more passes, which is warned; a record of other fit
    entries is refused naming the field."""
    from sglang_pask.calibrate.family import Member

    first = runs[0].with_name("toy.calibration.json")
    out = tmp_path / "blend.json"
    res = _pask(*ARGS[:ARGS.index("--budgets")], "--budgets", "0.33", *ARGS[ARGS.index("--budgets") + 2:],
                "--attention-blend", "--search-passes", "1", "--reuse-search", first, "--out", out)
    assert res.returncode == 0, res.stderr[-3000:]
    mine, theirs = (json.loads(p.read_text()) for p in (out.with_name("blend.calibration.json"), first))
    lent = {r["label"]: r for r in theirs["search"]["0.33"]["rows"] + theirs["search"]["0.33"]["kfold_rows"]}
    # the record searched 2 passes, this run 1: said, in the record and its report
    warning = (f"b=0.33: {first} searched with 2 passes, this run with 1: this search may stop short of its "
               f"best member ({Member(**theirs['search']['0.33']['best_member']).label})")
    assert mine["reused_search"]["0.33"] == [{"record": str(first), "members": len(lent), "warning": warning}]
    assert lent and f"pask calibrate: warning: {warning}" in res.stderr
    rows = mine["search"]["0.33"]["rows"] + mine["search"]["0.33"]["kfold_rows"]
    new = [r for r in rows if r["label"] not in lent]
    assert all(r == lent[r["label"]] for r in rows if r["label"] in lent)  # taken as is
    assert new and all("blend=" in r["label"] for r in new)  # only attention-informed members were scored
    assert f"Warning: {warning}." in out.with_name("blend.calibration.md").read_text()
    other = _pask(*[a if a != "11" else "12" for a in ARGS], "--reuse-search", first, "--out", tmp_path / "x.json")
    assert other.returncode == 2 and "--reuse-search" in other.stderr and "its seed is 11" in other.stderr


def test_reuse_search_takes_a_stopped_search_and_several_records(runs, tmp_path):
    """A record whose search at a budget stopped part way lends the members it scored so far; with
    several records the first to score a member lends it; a record that scored nothing at a budget
    is refused naming it."""
    first = runs[0].with_name("toy.calibration.json")
    doc = json.loads(first.read_text())
    rows = doc["search"]["0.33"]["rows"] + doc["search"]["0.33"]["kfold_rows"]
    stopped = dict(doc, search={k: v for k, v in doc["search"].items() if k != "0.33"},
                   search_progress={"0.33": {"rows": {r["label"]: r for r in rows[:2]}}})
    part = tmp_path / "stopped.calibration.json"
    part.write_text(json.dumps(stopped))
    out = tmp_path / "again.json"
    args = [*ARGS[:ARGS.index("--budgets")], "--budgets", "0.33", *ARGS[ARGS.index("--budgets") + 2:]]
    res = _pask(*args, "--reuse-search", part, "--reuse-search", first, "--out", out)
    assert res.returncode == 0, res.stderr[-3000:]
    mine = json.loads(out.with_name("again.calibration.json").read_text())
    assert mine["reused_search"]["0.33"] == [{"record": str(part), "members": 2},
                                             {"record": str(first), "members": len(rows) - 2}]
    assert mine["search"]["0.33"]["best_member"] == doc["search"]["0.33"]["best_member"]
    empty = tmp_path / "empty.calibration.json"
    empty.write_text(json.dumps(dict(doc, search={})))
    refused = _pask(*args, "--reuse-search", empty, "--out", tmp_path / "y.json")
    assert refused.returncode == 2 and "scored no member at b=0.33" in refused.stderr
    # beside one that did, a record that scored nothing at the budget lends nothing
    res = _pask(*args, "--reuse-search", empty, "--reuse-search", first, "--out", tmp_path / "z.json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert [r["members"] for r in json.loads(tmp_path.joinpath("z.calibration.json").read_text())
            ["reused_search"]["0.33"]] == [0, len(rows)]


def test_search_start_is_the_first_member_recorded_and_reported(runs, tmp_path):
    """``--search-start`` (one budget, one pass, the attention-informed family with the ranked
    split): the search's first row is that member, the record's config names the start (so a
    resume with another start is refused), and the report says where the search started. An
    attention-informed start without ``--attention-blend`` is refused naming the flag."""
    from sglang_pask.calibrate.family import parse_start

    spec = "window_frac=0,rank=total,blend=0.5,scorer=kvzip/heads,split=scores"
    out = tmp_path / "ranked.json"
    base = [*ARGS[:ARGS.index("--budgets")], "--budgets", "0.33", *ARGS[ARGS.index("--budgets") + 2:]]
    res = _pask(*base, "--attention-blend", "--search-passes", "1", "--search-start", spec, "--out", out)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.with_name("ranked.calibration.json").read_text())
    assert doc["config"]["search_start"] == spec
    assert doc["search"]["0.33"]["rows"][0]["label"] == parse_start(spec).label
    assert any("split=scores" in r["label"] for r in doc["search"]["0.33"]["rows"])
    assert f"(`--search-start {spec}`)" in out.with_name("ranked.calibration.md").read_text()
    res = _pask(*base, "--search-start", spec, "--out", tmp_path / "lookup.json")
    assert res.returncode != 0 and "an attention-informed start needs --attention-blend" in res.stderr
