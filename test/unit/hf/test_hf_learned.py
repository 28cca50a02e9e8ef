"""The learned scorer in the reference runner (hf/learned.py): the attention inputs the hooks capture
during the runner's own forwards equal a direct computation, KVzap's prefill-end selection is its
rule applied to the scorer's predictions of those inputs, the run records the scorer file and its
sha256, and a scorer fitted for another model is refused, naming both."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ROOT
from sglang_pask.hf.learned import capture_layer_inputs
from sglang_pask.hf.runner import Runner
from sglang_pask.hf.testing import random_scorer, tiny_qwen3
from sglang_pask.methods import AttentionStats, CacheView, make_method
from sglang_pask.methods.learned import LearnedScorer, ScorerError, scorer_sha256
from transformers import AutoTokenizer

TINY = ROOT / "models" / "tiny-random-qwen3"
REQ = {
    "messages": [{"role": "system", "content": "You call tools."},
                 {"role": "user", "content": "What is the weather in Paris in celsius? Use id 42."}],
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["unit"]}}}],
    "tool_choice": "required",
}


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(TINY))


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(4096, layers=3, hidden=64, heads=4, kv_heads=2, head_dim=16, seed=1)


@torch.no_grad()
def direct_inputs(model, ids) -> list[torch.Tensor]:
    """Per layer ``[T, hidden]``: ``input_layernorm`` of the layer's input, from a plain forward."""
    out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return [lay.input_layernorm(out.hidden_states[i])[0] for i, lay in enumerate(model.model.layers)]


def test_hooks_capture_each_layers_attention_input(model):
    ids = list(range(5, 40))
    with capture_layer_inputs(model) as got, torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    want = direct_inputs(model, ids)
    assert len(got) == len(want) == 3 and all(len(g) == 1 for g in got)  # one capture per layer
    for g, w in zip(got, want):
        assert g[0].shape == (len(ids), 64) and torch.allclose(g[0], w, atol=1e-6)
    assert not any(lay.input_layernorm._forward_hooks for lay in model.model.layers)  # removed on exit


def test_runner_captures_inputs_and_kvzap_selects_on_their_predictions(model, tok):
    path = random_scorer(model, seed=3)
    r = Runner(model, tok, method=make_method("kvzap", 0.3, schedule="prefill", scorer=path))
    res = r.generate(REQ, max_new_tokens=8, keep_cache=True)
    P, end = len(res.prompt_ids), len(res.prompt_ids) + res.tokens - 1  # the last token is never forwarded
    rows = res.cache.layer_inputs
    assert len(rows) == 3 and all(t.shape == (end, 64) for t in rows)
    want = direct_inputs(model, res.prompt_ids)
    for li in range(3):  # the prompt's rows: the prefill forward, before any compression
        assert torch.allclose(rows[li][:P], want[li], atol=1e-5)
    # decode steps: layer 0's input depends on the token only (the first layer sees no cache)
    emb = model.model.embed_tokens(torch.tensor(res.token_ids[:end - P]))
    assert torch.allclose(rows[0][P:end], model.model.layers[0].input_layernorm(emb), atol=1e-6)

    # the prefill-end compression is KVzap's rule on the scorer's predictions of the direct inputs
    scorer = LearnedScorer.load(path)
    stats = AttentionStats(learned_heads=[scorer.scores(li, want[li].detach().numpy()) for li in range(3)])
    view = CacheView(3, r.groups, P, res.classes[:P], [np.arange(P)] * 3, 1, stats, prompt_len=P)
    sel = r.method.select(view)
    c0 = res.compressions[0]
    assert c0.step == 0 and all(np.array_equal(a, b) for a, b in zip(c0.kept, sel.kept))
    assert all(np.array_equal(a, b) for a, b in zip(c0.head_mask, sel.head_mask))
    # another scorer keeps other sets (the predictions, not the positions alone, decide)
    other = Runner(model, tok, method=make_method("kvzap", 0.3, schedule="prefill",
                                                  scorer=random_scorer(model, seed=4))).generate(REQ, 8)
    assert any(not np.array_equal(a, b) for a, b in zip(other.compressions[0].kept, c0.kept))


def test_the_run_records_the_scorer_and_its_sha256(model, tok, tmp_path):
    path = random_scorer(model, seed=5)
    r = Runner(model, tok, method=make_method("kvzap", 0.3, scorer=path))
    rec = r.method.record()
    assert rec["scorer"] == path and rec["scorer_sha256"] == scorer_sha256(path) and rec["name"] == "kvzap"
    assert make_method(**rec) == r.method
    with pytest.raises(ScorerError, match="the method pins " + "0" * 64):
        Runner(model, tok, method=make_method("kvzap", 0.3, scorer=path, scorer_sha256="0" * 64))
    with pytest.raises(ScorerError, match="pass the method option scorer=FILE"):
        Runner(model, tok, method=make_method("kvzap", 0.3))  # no default: a scorer is bound to one model
    with pytest.raises(ScorerError, match="no scorer file"):
        Runner(model, tok, method=make_method("kvzap", 0.3, scorer=str(tmp_path / "missing.safetensors")))


def test_a_scorer_for_another_model_is_refused_naming_both(model):
    wrong = random_scorer(model, seed=6)  # bound to the in-memory 3-layer model
    with pytest.raises(ScorerError) as e:
        Runner(str(TINY), method=make_method("kvzap", 0.3, scorer=wrong))
    msg = str(e.value)
    fitted, given = msg.split("but model")
    assert "random (test)" in fitted and "layers=3" in fitted  # the scorer's model
    assert str(TINY) in given and "layers=4" in given  # the runner's model

