"""``pask calibrate`` end to end at toy size (pask-tiny-fc, 6 calib entries, 16 new tokens, two
budgets): it writes a policy per budget plus the main one and a report; every policy validates,
binds to the model and drives the pask method; two runs with the same seed write byte-identical
policies; the probe methods drop what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from sglang_pask.calibrate.probes import DropClass, RecencyGroup
from sglang_pask.methods.base import CacheView

FC = ROOT / "models" / "pask-tiny-fc"
ARGS = ["calibrate", "--model", str(FC), "--data", "synthetic:calib:6:tiny", "--groups", "2",
        "--budgets", "0.5,0.33", "--fit-n", "4", "--probe-n", "2", "--max-tokens", "16", "--seed", "3"]


def _calibrate(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "pask"), *ARGS, "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    outs = [tmp_path_factory.mktemp(f"cal{i}") / "toy.json" for i in range(2)]
    for out in outs:
        res = _calibrate(out)
        assert res.returncode == 0, res.stderr[-3000:]
    return outs


def test_writes_policies_that_validate_bind_and_run(runs):
    from sglang_pask.methods import make_method
    from sglang_pask.policy import load_policy

    out = runs[0]
    for name in ("toy.json", "toy.b0.5.json", "toy.b0.33.json"):
        p = load_policy(out.with_name(name), model_dir=FC)  # schema + binding
        cal = p.calibration
        assert cal is not None and cal.split == "calib" and cal.data == "synthetic:calib:6:tiny"
        assert cal.samples == 2 and cal.seed == 3 and "git " in cal.tool_version
        assert len(cal.sensitivity) == len(cal.distortion) == p.num_groups == 2
        assert set(cal.distortion[0]) == {"0.5", "0.33"}
        make_method("pask", policy=p)  # binds into the method
    assert out.read_bytes() == out.with_name("toy.b0.33.json").read_bytes()
    md = out.with_name("toy.calibration.md").read_text()
    for part in ("Task-error sensitivity", "Attention-output distortion", "Family search", "Held-out check"):
        assert part in md
    assert out.with_name("toy.S.png").stat().st_size > 0 and out.with_name("toy.D.png").stat().st_size > 0


def test_same_seed_same_bytes(runs):
    for name in ("toy.json", "toy.b0.5.json", "toy.b0.33.json"):
        assert runs[0].with_name(name).read_bytes() == runs[1].with_name(name).read_bytes(), name


def test_refuses_eval_data(tmp_path):
    res = subprocess.run([str(Path(sys.executable).parent / "pask"), *ARGS[:4], "synthetic:eval:6:tiny",
                          *ARGS[5:], "--out", str(tmp_path / "x.json")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 2 and "calibration split" in res.stderr


def _view(classes) -> CacheView:
    n = len(classes)
    return CacheView(num_layers=4, groups=[[0, 1], [2, 3]], seq_len=n, classes=np.array(classes),
                     retained=[np.arange(n)] * 4, protected_tail=1)


def test_probes_touch_only_their_layers():
    view = _view([1, 6, 6, 5, 5, 6, 4, 4, 4, 6])
    sel = DropClass(1.0, layers=(2, 3), cls=6).select(view)
    assert [k.tolist() for k in sel.kept[:2]] == [list(range(10))] * 2
    assert sel.kept[2].tolist() == sel.kept[3].tolist() == [0, 3, 4, 6, 7, 8, 9]  # the tail stays
    sel = RecencyGroup(0.5, layers=(0,), sinks=2).select(view)
    assert sel.kept[0].tolist() == [0, 1, 7, 8, 9] and sel.kept[1].size == 10
