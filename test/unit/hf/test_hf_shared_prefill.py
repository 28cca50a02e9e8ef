"""Shared prefill (sglang_pask.hf.shared): one prompt forward per attention-statistics kind, then
per runner a clone of its cache, the prefill-end compression and the decode loop, gives exactly
what each runner's own ``generate`` gives; a cache clone is a full, independent copy; runners whose
segment rule compresses inside the forward are refused.

The on-disk tiny random model with its prior policy, constrained (tool_choice required)."""

from __future__ import annotations

import pytest
import torch
from conftest import DEFAULT_POLICY, TINY_RANDOM
from sglang_pask.eval.hf_backend import bind_runner
from sglang_pask.hf.runner import Runner
from sglang_pask.hf.shared import SharedPrefill, generate_shared
from sglang_pask.policy.operating_point import SegmentRule

from .test_hf_runner import TOOLS_REQ

NEW = 12
#: test_hf_runner's tool request, under a longer system message
REQ = {**TOOLS_REQ, "messages": [{"role": "system", "content": "You call tools. Answer with one call."},
                                 TOOLS_REQ["messages"][1]]}
#: every statistics kind: none (full, streaming, pask), window per KV head (snapkv, pyramidkv: per head by
#: default), accumulated (h2o)
CELLS = [("full", None, None)] + [(m, s, 0.33) for m in ("streaming", "snapkv", "pyramidkv", "h2o", "pask")
                                  for s in ("prefill", "continuous")] + [("snapkv", "continuous", 0.2)]


@pytest.fixture(scope="module")
def base():
    return Runner(str(TINY_RANDOM))  # xgrammar constraints


@pytest.fixture(scope="module")
def runners(base):
    return [bind_runner(base, m, budget=b, schedule=s, policy=DEFAULT_POLICY if m == "pask" else None)
            for m, s, b in CELLS]


def _log(res):
    """Everything a result says but its timings."""
    return {"token_ids": res.token_ids, "text": res.text, "tool_calls": res.tool_calls, "kept": res.kept,
            "prompt_ids": res.prompt_ids, "classes": res.classes, "finish": res.finish_reason,
            "kv_bytes": res.kv_bytes, "retained": [r.tolist() for r in res.retained],
            "compressions": [(c.step, c.seq_len, c.allocation, [k.tolist() for k in c.kept],
                              [d.tolist() for d in c.dropped],
                              None if c.head_mask is None else [m.tolist() for m in c.head_mask])
                             for c in res.compressions]}


def test_shared_prefill_equals_each_runners_own_generate(base, runners):
    prompt_forwards = []
    hook = base.model.register_forward_hook(
        lambda _m, _a, kw, _o: prompt_forwards.append(1) if kw["input_ids"].shape[1] > 1 else None,
        with_kwargs=True)
    try:
        shared = generate_shared(REQ, runners, NEW)
    finally:
        hook.remove()
    kinds = {r.cache_spec() for r in runners}
    assert {k for k, _ in kinds} == {None, "window_heads", "accumulated"}
    assert len(prompt_forwards) == len(kinds)  # one prompt forward per statistics kind
    for r, (m, s, b), got in zip(runners, CELLS, shared):
        own = r.generate(REQ, NEW)
        assert _log(got) == _log(own), (m, s, b)
        assert got.timings["prefill_shared"] and not own.timings["prefill_shared"]
        if b is not None:  # over budget after the prefill: every method compressed
            assert got.compressions and got.compressions[0].step == 0
            assert len(got.compressions) == 1 if s == "prefill" else len(got.compressions) > 1
    assert shared[0].text.startswith("<tool_call>")  # constrained: the grammar ran per runner
    by_kind = {}
    for r, got in zip(runners, shared):  # the same forward's seconds for every runner of a kind
        by_kind.setdefault(r.cache_spec(), set()).add(got.timings["forward_s"])
    assert all(len(v) == 1 for v in by_kind.values())


@pytest.mark.parametrize("stats, window", [(None, 0), ("accumulated", 0), ("window", 4), ("window_heads", 4)])
def test_cache_clone_is_a_full_independent_copy(base, stats, window):
    from sglang_pask.hf.cache import PrunableCache

    cache = PrunableCache(base.num_layers, stats=stats, window_size=window)
    with torch.inference_mode():
        base.forward(cache, list(range(10, 40)), 0)
        mask = torch.ones(cache.num_kv_heads, 15, dtype=torch.bool)
        mask[0, ::2] = False  # layer 1: per-head slots (a head mask to copy)
        cache.keep(1, torch.arange(0, 30, 2), head_mask=mask)
        copy = cache.clone()
        assert (copy.stats, copy.window_size) == (stats, window)
        for a, b in zip(cache.layers, copy.layers):
            assert set(vars(a)) == set(vars(b)) and a.cumulative_length == b.cumulative_length
            for name, v in vars(a).items():
                if isinstance(v, torch.Tensor):
                    assert torch.equal(v, getattr(b, name)) and v.data_ptr() != getattr(b, name).data_ptr(), name
                else:
                    assert v == getattr(b, name) or v is getattr(b, name), name
        assert copy.kv_bytes() == cache.kv_bytes() and copy.token_head_slots() == cache.token_head_slots()
        held = [cache.positions(li).clone() for li in range(base.num_layers)]
        a, b = base.forward(cache, [7], 30), base.forward(copy, [7], 30)
        assert torch.equal(a, b)  # continuing either copy: the same step
        copy.keep(0, torch.tensor([0, 30]))  # pruning one leaves the other whole
    assert cache.positions(0).tolist() == held[0].tolist() + [30]
    if stats == "accumulated":
        assert cache.layers[0].accumulated.shape == (31,) and copy.layers[0].accumulated.shape == (2,)


def test_segment_rule_runners_are_refused(base, runners):
    seg = bind_runner(base, "streaming", budget=0.33, segment_rule=SegmentRule("system", own_budget=1.0))
    with pytest.raises(ValueError, match="segment rule 'system' compresses inside the prompt forward"):
        generate_shared(REQ, [runners[1], seg], 4)
    with pytest.raises(ValueError, match="segment rule"):
        SharedPrefill(REQ).prompted(seg)
    other = Runner(str(TINY_RANDOM), method="full")  # another loaded model
    with pytest.raises(ValueError, match="share one loaded model"):
        generate_shared(REQ, [runners[0], other], 4)


def test_a_rejected_request_fails_per_runner_as_generate_does(runners):
    bad = dict(REQ, tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(ValueError) as own:
        runners[1].generate(bad, 4)
    shared = SharedPrefill(bad)
    for r in runners[1:3]:
        with pytest.raises(ValueError) as got:
            shared.generate(r, 4)
        assert str(got.value) == str(own.value)
