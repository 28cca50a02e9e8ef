"""The reference runner on a tiny random Qwen3 (CPU, fp32): parity with plain transformers,
per-method invariants against an independent masked full recompute, determinism, constraints.

Methods: every registered method (sglang_pask.methods registry; with per-head selection and
H2O's normalised form as extra variants) plus the test-only methods of hf/testing.py (uneven
per-layer allocations, an attention-statistics method), each under both schedules.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT
from sglang_pask.hf.runner import Runner
from sglang_pask.hf.testing import (
    TEST_METHODS,
    KeepAllMethod,
    attention_impl,
    build_method,
    reference_forward,
    registry,
    runner_logit_rows,
    tiny_qwen3,
)
from sglang_pask.policy.operating_point import SegmentRule
from transformers import AutoTokenizer

TINY = ROOT / "models" / "tiny-random-qwen3"
REG = registry()
METHODS = sorted(TEST_METHODS) + REG[1]
BUDGET, EVERY, NEW = 0.4, 4, 20


def _variants():
    from sglang_pask.methods import METHODS as REGISTRY
    from sglang_pask.methods import SCHEDULES
    from sglang_pask.methods.testing import option_variants

    out = []
    for name in METHODS:
        if name in ("full", "test_keep_all"):  # keep-all methods run at budget 1.0 only (below)
            continue
        opts = option_variants(REGISTRY[name]) if name in REGISTRY else [{}]
        out += [(name, o, s) for o in opts for s in SCHEDULES]
    return out


VARIANTS = _variants()
VARIANT_IDS = [f"{n}{''.join(f'[{k}]' for k in o)}-{s}" for n, o, s in VARIANTS]

TOOLS_REQ = {
    "messages": [{"role": "system", "content": "You call tools."},
                 {"role": "user", "content": "What is the weather in Paris in celsius? Use id 42."}],
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "unit": {"type": "string", "enum": ["c", "f"]}, "ok": {"type": "boolean"}},
            "required": ["unit", "ok"]}}}],
    "tool_choice": "required",
}
PLAIN_REQ = {"messages": [{"role": "user", "content": "Tell me a short story about a red fox."}]}


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(TINY))


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(4096, layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16, seed=0)


@pytest.fixture(scope="module")
def policy(model):
    try:
        from sglang_pask.policy import ModelBinding, prior_policy
    except ImportError:
        return None
    return prior_policy(ModelBinding.from_config(model.config.to_dict()), groups=2, budget=BUDGET)


def _method(name, budget, policy, model=None, **options):
    return build_method(name, budget, policy=policy if name == "pask" else None, model=model, **options)


def _runner(model, tok, name, budget, policy, options=None, segment_rule=None):
    method = _method(name, budget, policy, model, **{"interval": EVERY, **(options or {})})
    return Runner(model, tok, method=method, policy=policy if name == "pask" else None, segment_rule=segment_rule)


# ---- full == plain transformers -------------------------------------------------------------

@torch.inference_mode()
def _plain_generate(model, prompt, n, eos):
    with attention_impl(model, "sdpa"):
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, eos_token_id=eos,
                             pad_token_id=eos[0])
    return out.sequences[0, len(prompt):].tolist(), [li[0].float() for li in out.logits]


@pytest.mark.parametrize("name", ["test_keep_all"] + ["full"])
def test_full_matches_plain_transformers_generate(model, tok, policy, name):
    r = _runner(model, tok, name, 1.0, policy)
    res = r.generate(PLAIN_REQ, max_new_tokens=16, record_logits=True)
    ids, logits = _plain_generate(model, res.prompt_ids, 16, r.stop_ids)
    assert res.token_ids == ids
    assert max((a - b).abs().max().item() for a, b in zip(res.logits, logits)) < 1e-5
    assert all(len(p) == len(res.prompt_ids) + res.tokens - 1 for p in res.retained)


# ---- every method: invariants + independent reference ---------------------------------------

# keep-all methods (full, test_keep_all) run at budget 1.0 only (tests above)
@pytest.mark.parametrize("name, options, schedule", VARIANTS, ids=VARIANT_IDS)
def test_method_invariants_and_masked_reference(model, tok, policy, name, options, schedule):
    r = _runner(model, tok, name, BUDGET, policy, dict(options, schedule=schedule))
    assert r.method.schedule == schedule and r.method.interval == EVERY
    res = r.generate(TOOLS_REQ, max_new_tokens=NEW, record_logits=True, keep_cache=True)
    P, L = len(res.prompt_ids), r.num_layers
    assert res.compressions, "over budget after prefill: a compression must have run"
    assert res.compressions[0].step == 0 and res.compressions[0].seq_len == P
    per_head = getattr(r.method, "per_head", False)
    adaptive = getattr(r.method, "adaptive_heads", False)
    assert all((c.head_mask is not None) == per_head for c in res.compressions)
    if schedule == "continuous":
        assert len(res.compressions) > 1, "continuous: over budget again while decoding"
    else:  # prefill: once; floor(b*L*P) prompt slots (per head) and every output token kept
        assert len(res.compressions) == 1
        end = P + res.tokens - 1
        S = int(np.floor(BUDGET * L * P + 1e-9))
        c0 = res.compressions[0]
        if name not in REG[1]:  # test-only methods under-use the budget on purpose
            assert sum(c0.allocation) <= S
        elif getattr(r.method, "per_group", False):
            assert S - max(len(g) for g in r.groups) < sum(c0.allocation) <= S
        else:
            assert sum(c0.allocation) == S
        H = model.config.num_key_value_heads
        assert res.cache.token_head_slots() == H * (sum(c0.allocation) + L * (end - P))
        for li in range(L):
            assert np.array_equal(res.retained[li][res.retained[li] >= P], np.arange(P, end))

    # replay the retained sets: kept = allocation exactly, kept subset of held, tail kept
    held = [np.arange(P) for _ in range(L)]
    written = P
    for c in res.compressions:
        for li in range(L):
            held[li] = np.concatenate([held[li], np.arange(written, c.seq_len)])
        written = c.seq_len
        assert len(res.classes) >= c.seq_len
        for li in range(L):
            if per_head:  # each KV head keeps the layer's allocation (adaptive: H times it
                m = c.head_mask[li]  # over the heads); kept is their union
                H = model.config.num_key_value_heads
                assert m.shape == (H, len(c.kept[li])) and m.any(0).all()
                assert (m.sum() == H * c.allocation[li]) if adaptive else \
                    (m.sum(1) == c.allocation[li]).all(), (name, c.step, li)
                assert m[:, -1].all()  # every head keeps the current step's token
            else:
                assert len(c.kept[li]) == c.allocation[li], (name, c.step, li)
            assert np.isin(c.kept[li], held[li]).all() and (np.diff(c.kept[li]) > 0).all()
            assert np.array_equal(np.sort(np.concatenate([c.kept[li], c.dropped[li]])), held[li])
            assert c.seq_len - 1 in c.kept[li]  # the current step's token
            held[li] = c.kept[li]
        assert sum(c.allocation) <= max(int(np.floor(BUDGET * L * c.seq_len + 1e-9)), L)
        for g in r.groups:  # group-level methods: one kept set per group
            if getattr(r.method, "per_group", False):
                assert all(np.array_equal(c.kept[g[0]], c.kept[li]) for li in g)
    end = P + res.tokens - 1
    for li in range(L):
        held[li] = np.concatenate([held[li], np.arange(written, end)])
        assert np.array_equal(res.retained[li], held[li])
    assert sum(len(h) for h in held) < L * end  # something was dropped

    # physical tensors hold exactly the retained tokens, with the reference's keys/values
    ref_logits, ref_cache = reference_forward(model, res)
    for li, lay in enumerate(res.cache.layers):
        assert lay.keys.shape[-2] == lay.values.shape[-2] == len(res.retained[li])
        for t in (lay.keys, lay.values):
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
        idx = torch.from_numpy(res.retained[li])
        assert torch.allclose(lay.keys, ref_cache.layers[li].keys[:, :, idx], atol=1e-5)
        assert torch.allclose(lay.values, ref_cache.layers[li].values[:, :, idx], atol=1e-5)
    physical = sum(2 * lay.keys.numel() * lay.keys.element_size() for lay in res.cache.layers)
    assert res.cache.physical_kv_bytes() == physical
    slot = 2 * model.config.head_dim * 4  # bytes of one token-head slot (K and V, fp32)
    assert res.cache.kv_bytes() == res.kv_bytes == res.cache.token_head_slots() * slot
    if per_head:  # counted per head: below the union's physical bytes whenever heads disagree
        assert res.kv_bytes < physical
        assert res.cache.token_head_slots() == sum(int(m.sum()) for m in (
            res.cache.head_mask(li) if res.cache.head_mask(li) is not None
            else torch.ones(model.config.num_key_value_heads, len(res.retained[li]))
            for li in range(L)))
    else:
        assert res.kv_bytes == physical

    # logits of the pruned incremental run == masked full recompute
    rows = runner_logit_rows(res)
    diff = max((ref_logits[row] - lg).abs().max().item() for row, lg in zip(rows, res.logits))
    assert diff < 1e-4, (name, diff)


@pytest.fixture(scope="module")
def full_run(model, tok):
    return Runner(model, tok, method=KeepAllMethod(1.0)).generate(TOOLS_REQ, 12, record_logits=True)


@pytest.mark.parametrize("name", [m for m in METHODS if m != "test_keep_all"])
def test_budget_one_is_full(model, tok, policy, full_run, name):
    res = _runner(model, tok, name, 1.0, policy).generate(TOOLS_REQ, 12, record_logits=True)
    assert res.token_ids == full_run.token_ids and res.compressions == []
    assert max((a - b).abs().max().item() for a, b in zip(res.logits, full_run.logits)) < 1e-5


# ---- segment prefill ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pask", "streaming", "snapkv"])
def test_segment_prefill_full_sees_the_whole_segment(model, tok, policy, full_run, name):
    """``segment_prefill="full"``: the own tokens are prefilled against the whole segment, so the
    first step's logits are Full KV's; the segment keeps the same positions as under
    ``compressed``, whose first step differs (it attended to the kept positions only)."""
    options = {"per_head": False} if name == "snapkv" else None  # per head: no segments (below)
    runs = {pre: _runner(model, tok, name, BUDGET, policy, options, segment_rule=SegmentRule(
                "system", own_budget=1.0, segment_prefill=pre)).generate(TOOLS_REQ, 4, record_logits=True)
            for pre in ("compressed", "full")}
    seg = runs["full"].segment_end
    assert seg > 0
    kept = {pre: [k[k < seg].tolist() for k in r.segment.kept] for pre, r in runs.items()}
    assert kept["full"] == kept["compressed"] and all(len(k) < seg for k in kept["full"])
    assert [p[p < seg].tolist() for p in runs["full"].retained] == kept["full"]  # cut after the prefill
    first = {pre: r.logits[0] for pre, r in runs.items()}
    assert (first["full"] - full_run.logits[0]).abs().max().item() < 1e-5
    assert (first["compressed"] - full_run.logits[0]).abs().max().item() > 1e-3


def test_segment_rule_is_one_checked_value(model, tok, policy):
    """The runner takes the rule as one SegmentRule (its own validator: test_operating_point.py)
    and refuses what the rule cannot apply to."""
    with pytest.raises(TypeError, match="segment_rule must be a SegmentRule"):
        Runner(model, tok, method="full", segment_rule={"segment": "system"})
    with pytest.raises(ValueError, match="per_head selection does not support segment compression"):
        Runner(model, tok, method=build_method("snapkv", BUDGET, per_head=True), segment_rule=SegmentRule("system"))
    assert Runner(model, tok, method="full").segment_rule == SegmentRule()  # no policy: none


# ---- determinism ----------------------------------------------------------------------------

def _kept_log(res):
    return [[c.seq_len, [k.tolist() for k in c.kept]] for c in res.compressions] + [res.kept]


@pytest.mark.parametrize("name", ["pask", "h2o", "snapkv", "random", "test_top_accumulated"])
def test_deterministic_in_process(model, tok, policy, name):
    a = _runner(model, tok, name, BUDGET, policy).generate(TOOLS_REQ, NEW)
    b = _runner(model, tok, name, BUDGET, policy).generate(TOOLS_REQ, NEW)
    assert _kept_log(a) == _kept_log(b) and a.token_ids == b.token_ids


_CHILD = """
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
from sglang_pask.hf.runner import Runner
from sglang_pask.hf.testing import build_method
from sglang_pask.policy import load_policy
names, budget, path, policy = json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
req = json.loads(sys.argv[5])
tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path, dtype="float32")
out = {}
for name in names:
    pol = load_policy(policy, model_dir=path) if name == "pask" else None
    r = Runner(model, tok, method=build_method(name, budget, policy=pol, interval=4))
    res = r.generate(req, 12)
    out[name] = [[c.seq_len, [k.tolist() for k in c.kept]] for c in res.compressions] + [res.kept]
print(json.dumps(out))
"""
CROSS = ["test_sinks_recent", "test_top_accumulated"] + [
    m for m in ("h2o", "snapkv", "pyramidkv", "adakv", "expected_attention", "kvzip", "random", "pask") if m in REG[1]]


def test_deterministic_across_processes(tmp_path):
    """The on-disk tiny model, run here and in one fresh interpreter: same kept sets."""
    policy_file = tmp_path / "policy.json"
    pol = None
    if "pask" in CROSS:
        from sglang_pask.policy import ModelBinding, load_policy, prior_policy, save_policy

        save_policy(prior_policy(ModelBinding.from_model(str(TINY)), groups=2, budget=BUDGET), policy_file)
        pol = load_policy(policy_file, model_dir=str(TINY))
    from transformers import AutoModelForCausalLM

    disk_model = AutoModelForCausalLM.from_pretrained(str(TINY), dtype=torch.float32)
    disk_tok = AutoTokenizer.from_pretrained(str(TINY))
    here = {}
    for name in CROSS:
        r = Runner(disk_model, disk_tok,
                   method=build_method(name, BUDGET, policy=pol if name == "pask" else None, interval=4))
        here[name] = _kept_log(r.generate(TOOLS_REQ, 12))
        assert here[name][0][0] > 0  # compressed at prefill end
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(CROSS), str(BUDGET), str(TINY),
                          str(policy_file), json.dumps(TOOLS_REQ)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    there = json.loads(out.stdout.strip().splitlines()[-1])
    assert there == json.loads(json.dumps(here))


# ---- constraints and tags --------------------------------------------------------------------

def test_tool_call_grammar_and_output_tags(model, tok):
    from sglang_pask.structure import StructClass as C

    res = Runner(model, tok, method=KeepAllMethod(1.0)).generate(TOOLS_REQ, 80)
    assert res.text.startswith('<tool_call>\n{"name": "get_weather", "arguments": {')
    out = res.classes[len(res.prompt_ids):]
    assert len(out) == res.tokens - (res.finish_reason == "stop")
    assert out[0] == C.OUT_TOOL_TAG and C.OUT_FUNC_NAME in out
    if res.finish_reason == "stop":
        call = res.tool_calls[0]["function"]
        assert call["name"] == "get_weather"
        args = json.loads(call["arguments"])
        assert args["unit"] in ("c", "f") and isinstance(args["ok"], bool)


def test_json_schema_response_format(model, tok):
    schema = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "blue"]},
                                               "big": {"type": "boolean"}},
              "required": ["color", "big"], "additionalProperties": False}
    req = {"messages": [{"role": "user", "content": "Describe the fox as JSON."}],
           "response_format": {"type": "json_schema", "json_schema": {"name": "fox", "schema": schema}}}
    res = Runner(model, tok, method=KeepAllMethod(1.0)).generate(req, 60)
    assert res.finish_reason == "stop", res.text
    obj = json.loads(res.text)
    assert obj["color"] in ("red", "blue") and isinstance(obj["big"], bool)
    assert res.tool_calls is None


def test_unconstrained_without_tools(model, tok):
    from sglang_pask.hf.constraints import grammar_spec

    assert grammar_spec(PLAIN_REQ) is None
    assert grammar_spec(dict(TOOLS_REQ, tool_choice="none")) is None
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert grammar_spec(dict(TOOLS_REQ, tool_choice=named))[0] == "tools"
    with pytest.raises(ValueError):
        grammar_spec(dict(TOOLS_REQ, tool_choice={"type": "function", "function": {"name": "nope"}}))


def test_parse_tool_calls():
    from sglang_pask.hf.result import parse_tool_calls

    text = 'hi <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call><tool_call>\nbad\n</tool_call>'
    assert parse_tool_calls(text) == [{"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    assert parse_tool_calls("no calls") is None


def test_result_json_shape(model, tok):
    res = _runner(model, tok, "test_sinks_recent", BUDGET, None).generate(TOOLS_REQ, 8)
    obj = res.to_json()
    assert set(obj) == {"text", "tool_calls", "kept", "tokens"}
    assert set(obj["kept"]) == {str(g) for g in range(len(res.groups))}
    assert obj["tokens"] == 8
