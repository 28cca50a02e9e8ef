"""The server-vs-runner parity comparison (eval/parity.py) on hand-built traces."""

from sglang_pask.eval.parity import compare, first_token_diff, summarize


def _trace(out, comps):
    return {"prompt_ids": [1, 2], "output_ids": out, "compressions": comps}


C0, C1, C2 = (0, 10, {0: [0, 1]}), (1, 11, {0: [0, 2]}), (2, 12, {0: [0, 3]})


def test_identical_and_runner_extra_last_compression():
    got = compare(_trace([5, 6, 7], [C0, C1]), _trace([5, 6, 7], [C0, C1, C2]))
    assert got["tokens_equal"] and got["kept_equal"] and got["kept_equal_until_divergence"]
    assert got["first_diff"] is None and got["token_diff"] is None


def test_divergence_is_not_counted_twice():
    # token 1 differs: the compression at step 2 saw different tokens, so only steps <= 1 must agree
    late = (2, 12, {0: [0, 4]})
    got = compare(_trace([5, 6, 7], [C0, C1, C2]), _trace([5, 9, 7], [C0, C1, late]))
    assert not got["tokens_equal"] and not got["kept_equal"] and got["kept_equal_until_divergence"]
    assert got["token_diff"] == 1 and got["first_diff"] == 2
    # a kept difference before the first differing token is a real mismatch
    early = (1, 11, {0: [0, 9]})
    got = compare(_trace([5, 6, 7], [C0, C1, C2]), _trace([5, 9, 7], [C0, early, C2]))
    assert not got["kept_equal_until_divergence"] and got["first_diff"] == 1


def test_first_token_diff_and_summary():
    assert first_token_diff([1, 2], [1, 2]) is None
    assert first_token_diff([1, 2], [1, 2, 3]) == 2 and first_token_diff([1, 3], [1, 2]) == 1
    rows = [compare(_trace([5], [C0]), _trace([5], [C0])), compare(_trace([5], [C0]), _trace([6], [C1]))]
    s = summarize(rows)
    counts = ("requests", "tokens_identical", "kept_identical", "kept_identical_until_divergence")
    assert [s[k] for k in counts] == [2, 1, 1, 1]
    assert s["kept_identical_until_divergence_pct"] == 50.0 and s["compressions_compared"] == 2


def test_a_compression_the_server_missed_before_the_last_step_is_a_difference():
    """The runner's one extra compression is tolerated only at its last decode step; one the
    server missed earlier (its prefill-end compression failed, say) is not."""
    missed = compare(_trace([5, 6, 7], []), _trace([5, 6, 7], [C0]))
    assert missed["tokens_equal"] and not missed["kept_equal"] and not missed["kept_equal_until_divergence"]
    assert missed["first_diff"] == 0
    assert not compare(_trace([5, 6, 7], [C0]), _trace([5, 6, 7], [C0, C1]))["kept_equal"]
    # one generated token: the runner compressed at prefill end, the server never ran a decode step
    assert compare(_trace([5], []), _trace([5], [C0]))["kept_equal"]
