"""The prefill memo (sglang_pask.hf.memo): runners sharing one memo give, under every method and in
teacher forcing, exactly what they give without it, while the prompt forward runs once per (prompt,
cache kind); the memo keeps its byte bound (least recently used out); a runner whose segment rule
compresses inside the forward never uses it.

The on-disk tiny random model with its prior policy, constrained (tool_choice required)."""

from __future__ import annotations

import pytest
from conftest import DEFAULT_POLICY, TINY_RANDOM
from sglang_pask.eval.hf_backend import bind_runner
from sglang_pask.hf.memo import PrefillMemo
from sglang_pask.hf.runner import Runner
from sglang_pask.hf.teacher import teacher_forced_nll
from sglang_pask.policy.operating_point import SegmentRule

from .test_hf_shared_prefill import NEW, REQ, _log

#: cache kinds: none (streaming, pask), window (snapkv), accumulated (h2o)
CELLS = [("streaming", "prefill", 0.33), ("pask", "prefill", 0.33), ("streaming", "continuous", 0.2),
         ("snapkv", "prefill", 0.33), ("h2o", "continuous", 0.33), ("full", None, None)]
KINDS = 3


@pytest.fixture(scope="module")
def base():
    return Runner(str(TINY_RANDOM))


def _bind(base, m, s, b):
    return bind_runner(base, m, budget=b, schedule=s, policy=DEFAULT_POLICY if m == "pask" else None)


def _prompt_forwards(runner):
    """(list that grows by one per multi-token forward, the hook's handle)."""
    seen = []
    handle = runner.model.register_forward_hook(
        lambda _m, _a, kw, _o: seen.append(1) if kw["input_ids"].shape[1] > 1 else None, with_kwargs=True)
    return seen, handle


def test_memo_results_equal_fresh_forwards(base):
    plain = {c: _log(_bind(base, *c).generate(REQ, NEW)) for c in CELLS}
    memo_base = Runner(base.model, base.tokenizer)
    memo_base.memo = PrefillMemo(1 << 30)
    seen, handle = _prompt_forwards(memo_base)
    try:
        for _ in range(2):  # every cell twice: the second round is all hits
            for c in CELLS:
                res = _bind(memo_base, *c).generate(REQ, NEW)
                assert _log(res) == plain[c], c
    finally:
        handle.remove()
    assert len(seen) == KINDS  # one prompt forward per cache kind
    stats = memo_base.memo.stats()
    assert (stats["hits"], stats["misses"], stats["entries"]) == (2 * len(CELLS) - KINDS, KINDS, KINDS), stats


def test_teacher_forcing_with_memo_equals_without(base):
    answer = base.tokenizer('<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c", "ok": true}}',
                            add_special_tokens=False)["input_ids"]
    memo_base = Runner(base.model, base.tokenizer)
    memo_base.memo = PrefillMemo(1 << 30)
    for c in CELLS[:4]:
        want = teacher_forced_nll(_bind(base, *c), REQ, answer)
        got = teacher_forced_nll(_bind(memo_base, *c), REQ, answer)
        assert got.nll.tolist() == want.nll.tolist() and got.compressions == want.compressions, c
    assert memo_base.memo.hits == 2  # streaming x2 and pask share the first forward


def test_bound_keeps_the_most_recent(base):
    r = _bind(base, "streaming", "prefill", 0.33)
    one = r.forward_request(REQ)
    other = r.forward_request({**REQ, "messages": [*REQ["messages"][:1], {"role": "user", "content": "Paris, f?"}]})
    from sglang_pask.hf.memo import _bytes

    memo = PrefillMemo(_bytes(one) + _bytes(other) - 1)  # room for one of the two
    k1, k2 = (memo.key(p.tags.token_ids, r.cache_spec()) for p in (one, other))
    memo.put(k1, one)
    memo.put(k2, other)
    assert len(memo) == 1 and memo.get(k1) is None and memo.get(k2) is not None
    assert memo.bytes == _bytes(other) <= memo.max_bytes
    with pytest.raises(ValueError, match="max_bytes"):
        PrefillMemo(0)


def test_segment_rule_bypasses_the_memo(base):
    memo_base = Runner(base.model, base.tokenizer)
    memo_base.memo = PrefillMemo(1 << 30)
    rule = SegmentRule(segment="system")
    seg = bind_runner(memo_base, "streaming", budget=0.33, schedule="prefill", segment_rule=rule)
    want = _log(bind_runner(base, "streaming", budget=0.33, schedule="prefill", segment_rule=rule).generate(REQ, NEW))
    for _ in range(2):
        assert _log(seg.generate(REQ, NEW)) == want
    assert memo_base.memo.stats()["entries"] == 0 and memo_base.memo.hits == 0
