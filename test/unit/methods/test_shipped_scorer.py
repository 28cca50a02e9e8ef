"""The shipped tiny-model scorer, policies/pask-tiny-fc.kvzap.safetensors (``pask fit-scorer --model
models/pask-tiny-fc --data synthetic:train:300:tiny``): bound to that model, fitted on train only,
read by the reference runner whichever way the model reaches it."""

from __future__ import annotations

import pytest
from conftest import ROOT
from sglang_pask.hf.runner import Runner
from sglang_pask.methods import make_method
from sglang_pask.methods.learned import ScorerError, scorer_sha256
from transformers import AutoTokenizer

TINY = ROOT / "models" / "tiny-random-qwen3"


def test_the_shipped_scorer_binds_the_tiny_model():
    """policies/pask-tiny-fc.kvzap.safetensors: read by a runner that loads the folder and by one
    handed a model loaded from it (as ``pask sweep`` hands one runner's model on); fitted on train."""
    from transformers import AutoModelForCausalLM

    fc = ROOT / "models" / "pask-tiny-fc"
    shipped = str(ROOT / "policies" / "pask-tiny-fc.kvzap.safetensors")
    by_dir = Runner(str(fc), method=make_method("kvzap", 0.2, scorer=shipped))
    assert by_dir.method.scorer == shipped and by_dir.method.scorer_sha256 == scorer_sha256(shipped)
    loaded = AutoModelForCausalLM.from_pretrained(str(fc))
    by_obj = Runner(loaded, AutoTokenizer.from_pretrained(str(fc)), method=make_method("kvzap", 0.2, scorer=shipped))
    assert by_obj.method == by_dir.method
    h = by_dir.scorer.header
    assert h["data"]["split"] == "train" and h["data"]["spec"] == "synthetic:train:300:tiny"
    assert not list(fc.glob("*kvzap*"))  # never in the model folder: SGLang loads its *.safetensors as weights
    with pytest.raises(ScorerError, match="fitted for model"):
        Runner(str(TINY), method=make_method("kvzap", 0.2, scorer=shipped))
