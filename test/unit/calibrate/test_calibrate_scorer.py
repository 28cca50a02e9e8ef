"""``pask fit-scorer`` and ``pask scorer-report`` on the tiny model (a few prompts): the fit is
deterministic under its seed (same file bytes), the file names its data and split, the eval split
is refused, the report is not run on the split the scorer was fitted on, and the metrics behave
(a scorer that predicts KVzip's own ranking scores 1.0; Spearman with ties)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT
from sglang_pask.calibrate import scorer as sc
from sglang_pask.cli import main
from sglang_pask.methods.learned import LearnedScorer, scorer_sha256

TINY_FC = ROOT / "models" / "pask-tiny-fc"


def test_rank_metrics():
    a = np.array([0.1, 0.5, 0.5, 2.0, -1.0])
    assert sc.spearman(a, a) == pytest.approx(1.0) and sc.spearman(a, -a) == pytest.approx(-1.0)
    assert np.array_equal(sc.rankdata(a), [1.0, 2.5, 2.5, 4.0, 0.0])
    assert sc.spearman(a, np.ones(5)) == 0.0
    true = np.arange(10.0)
    assert sc.recall_at(true, true, 0.3) == 1.0 and sc.recall_at(-true, true, 0.3) == 0.0
    assert sc.recall_at(np.r_[true[:9], -1.0], true, 0.2) == 0.5  # top-2 {9, 8} vs predicted {8, 7}


def test_refuses_the_eval_split(capsys, tmp_path):
    assert main(["fit-scorer", "--model", str(TINY_FC), "--data", "synthetic:eval:5:tiny",
                 "--out", str(tmp_path / "s.safetensors")]) == 2
    assert "never on eval" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not a train or calib split"):
        sc.check_split("bfcl:simple_python")  # every entry, eval included


def test_fit_is_deterministic_and_the_report_is_held_out(tmp_path, capsys):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    args = ["fit-scorer", "--model", str(TINY_FC), "--data", "synthetic:train:5:tiny", "--val-n", "2", "--seed", "3"]
    assert main([*args, "--out", str(a)]) == 0
    assert main([*args, "--out", str(b)]) == 0
    assert scorer_sha256(a) == scorer_sha256(b) and f"sha256 {scorer_sha256(a)}" in capsys.readouterr().out
    s = LearnedScorer.load(a)
    h = s.header
    assert h["data"]["spec"] == "synthetic:train:5:tiny" and h["data"]["split"] == "train"
    assert len(h["data"]["val_ids"]) == 2 and h["counts"]["prompts_fit"] == 3
    assert len(h["fit"]["layers"]) == s.num_layers == 4 and s.kv_heads == 2 and s.hidden_size == 192
    assert h["model"]["fingerprint"].startswith("sha256:") and h["model_path"].endswith("pask-tiny-fc")

    out = tmp_path / "report"
    assert main(["scorer-report", "--model", str(TINY_FC), "--scorer", str(a), "--data", "synthetic:train:3:tiny",
                 "--out", str(out)]) == 2  # the split it was fitted on
    assert "held-out" in capsys.readouterr().err
    assert main(["scorer-report", "--model", str(TINY_FC), "--scorer", str(a), "--data", "synthetic:calib:2:tiny",
                 "--out", str(out)]) == 0
    q = json.loads((out / "fit_quality.json").read_text())
    assert q["prompts"] == 2 and q["scorer_sha256"] == scorer_sha256(a)
    assert np.array(q["spearman"]).shape == (4, 2) and np.array(q["recall"]["0.2"]).shape == (4, 2)
    assert 0 < q["mean"]["spearman"] <= 1 and 0 < q["pooled"]["0.33"] <= 1
    md = (out / "report.md").read_text()
    assert "| all | pooled |" in md and "Command: `pask scorer-report --model" in md  # docs/results.md reads it


def test_quality_of_a_perfect_scorer():
    """A sample whose KVzip scores are exactly exp(the scorer's prediction): every metric is 1."""
    from sglang_pask.policy.binding import ModelBinding

    rng = np.random.default_rng(0)
    scorer = LearnedScorer(rng.normal(size=(2, 6, 2)), rng.normal(size=(2, 2)),
                           ModelBinding(num_layers=2, num_kv_heads=2, head_dim=4, vocab_size=9, fingerprint="f"))
    x = [rng.normal(size=(40, 6)).astype(np.float32) for _ in range(2)]
    kv = [np.exp(scorer.predict(li, x[li]).astype(np.float64)) - 1e-6 for li in range(2)]
    q = sc.quality(scorer, [sc.Sample("s", x, [np.maximum(k, 0) for k in kv])])
    assert q["mean"]["spearman"] == pytest.approx(1.0, abs=1e-3)
    assert q["pooled"]["0.2"] == 1.0 and q["mean"]["recall@0.33"] == 1.0


def test_a_sample_of_a_large_split_and_its_held_out_part(tmp_path, capsys):
    """``--n N --skip M``: N entries after the first M, round-robin over the split's categories (so
    BFCL's calib sample spans its 6 categories -- calib=25 leaves none of the two small live ones --
    and two samples are disjoint); out of range is refused naming
    the split's size; a report on prompts the scorer was fitted on is refused by id."""
    fit = sc.entries_of("bfcl:all:calib=25", 16)
    held = sc.entries_of("bfcl:all:calib=25", 8, skip=16)
    assert len({e.category for e in fit}) == 6 and len(held) == 8
    assert not {e.id for e in fit} & {e.id for e in held}
    with pytest.raises(ValueError, match=r"'synthetic:train:5:tiny' has 5 entries: cannot take 4 after the first 2"):
        sc.entries_of("synthetic:train:5:tiny", 4, skip=2)
    a = tmp_path / "a.safetensors"
    assert main(["fit-scorer", "--model", str(TINY_FC), "--data", "synthetic:train:8:tiny", "--n", "4",
                 "--val-n", "2", "--out", str(a)]) == 0
    h = LearnedScorer.load(a).header["data"]
    assert h["sample"] == {"n": 4, "skip": 0, "order": "round-robin over categories"}
    assert sc.described(h) == "synthetic:train:8:tiny --n 4 --skip 0"
    capsys.readouterr()
    out = tmp_path / "report"
    assert main(["scorer-report", "--model", str(TINY_FC), "--scorer", str(a), "--data", "synthetic:train:8:tiny",
                 "--n", "3", "--skip", "3", "--out", str(out)]) == 2  # entry 3 was fitted on
    assert "1 of the 3 prompts" in capsys.readouterr().err
    assert main(["scorer-report", "--model", str(TINY_FC), "--scorer", str(a), "--data", "synthetic:train:8:tiny",
                 "--n", "4", "--skip", "4", "--out", str(out)]) == 0
    assert "--n 4 --skip 4" in (out / "report.md").read_text()
