"""The server's attention statistics (srt/attention/window_stats.py) against their definition, query by
query: a prompt prefilled in two chunks, a drop, then decode steps; the recorder must give, for
every position a layer still holds, the attention it received from the newest ``w`` queries
(``window``) or from every query (``accumulated``), summed over the query heads, each query's
softmax taken over the keys held when it ran (``key <= query`` by logical position)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sglang_pask.methods import make_method
from sglang_pask.methods.testing import random_policy
from sglang_pask.srt.attention import window_stats
from sglang_pask.srt.attention.window_stats import Recorder

HQ, HKV, D, LAYERS, SCALE = 4, 2, 8, 2, 0.35


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(window_stats, "CHUNK", 7)  # several chunks per prefill forward (default 256)


def _run(kind: str, w: int, seed: int, masked: bool = False):
    """(recorder, per layer the held positions at the end, per layer {query position: its
    per-position probabilities summed over each KV head's query heads, ``[HKV, T]``}).
    ``masked``: after the drop, KV head 1 no longer reads the held positions ``p % 3 == 1``
    before the drop (a per-head selection: :mod:`sglang_pask.srt.attention.head_masks`)."""
    g = torch.Generator().manual_seed(seed)
    T = 40
    keys = torch.randn(LAYERS, HKV, T, D, generator=g)
    held = [np.arange(T) for _ in range(LAYERS)]
    rec = Recorder(kind, w, HKV)
    truth = [dict() for _ in range(LAYERS)]
    forwards = [(0, 25), (25, 30)] + [(p, p + 1) for p in range(30, 36)]
    hidden = np.zeros((HKV, T), bool)
    for first, end in forwards:
        if first == 30:  # a drop between prefill and decode: each layer loses its own positions
            held = [h[(h < 3) | (h >= 28) | (h % (2 + layer) == 0)] for layer, h in enumerate(held)]
            if masked:
                hidden[1, (np.arange(T) % 3 == 1) & (np.arange(T) < 30)] = True
        rec.begin(7, first, end)
        for layer in range(LAYERS):
            q = torch.randn(HQ, end - first, D, generator=g)
            k_pos = torch.from_numpy(held[layer][held[layer] < end])
            k = keys[layer][:, k_pos]
            allow = torch.from_numpy(~hidden[:, k_pos.numpy()]) if hidden.any() else None
            rec.record(7, layer, q, k, torch.arange(first, end), k_pos, SCALE, allow)
            for i, p in enumerate(range(first, end)):  # the definition, one query at a time
                row = np.zeros((HKV, T))
                for h in range(HQ):
                    kv = h // (HQ // HKV)
                    vis = k_pos[(k_pos <= p) & torch.from_numpy(~hidden[kv, k_pos.numpy()])]
                    s = (keys[layer][kv][vis] @ q[h, i]) * SCALE
                    row[kv, vis.numpy()] += torch.softmax(s.double(), 0).numpy()
                truth[layer][p] = row
    return rec, held, truth


@pytest.mark.parametrize("kind, w, masked", [("window", 8, False), ("window", 3, False), ("accumulated", 0, False),
                                             ("window_heads", 8, False), ("window_heads", 3, True),
                                             ("window", 8, True)])
@pytest.mark.parametrize("seed", range(3))
def test_recorder_equals_the_definition(kind, w, masked, seed):
    rec, held, truth = _run(kind, w, seed, masked)
    stats = rec.stats(7, held)
    got = stats.window if kind != "accumulated" else stats.accumulated
    assert (stats.window_size == w) if kind != "accumulated" else stats.window is None
    assert (stats.window_heads is not None) == (kind == "window_heads")
    for layer in range(LAYERS):
        queries = sorted(truth[layer])[-w:] if kind != "accumulated" else sorted(truth[layer])
        want = sum(truth[layer][p] for p in queries)[:, held[layer]]  # [HKV, n]
        np.testing.assert_allclose(got[layer], want.sum(0), rtol=1e-4, atol=1e-5)
        if kind == "window_heads":
            np.testing.assert_allclose(stats.window_heads[layer], want, rtol=1e-4, atol=1e-5)
    if kind == "window_heads":  # a layer with no record: zeros, one row per KV head
        assert rec.stats(8, held).window_heads[0].shape == (HKV, len(held[0]))


def test_a_new_request_in_the_row_starts_afresh_and_forget_drops_it():
    rec, held, _ = _run("window", 8, 0)
    rec.begin(7, 0, 5)  # a new request in row 7: its first position is not the row's next one
    rec.record(7, 0, torch.randn(HQ, 5, D), torch.randn(HKV, 5, D), torch.arange(5), torch.arange(5), SCALE)
    s = rec.stats(7, [np.arange(5), np.arange(5)])
    assert s.window[0].sum() == pytest.approx(5 * HQ, rel=1e-5)  # 5 queries x HQ heads, each a softmax
    assert not s.window[1].any()  # layer 1 has no record of the new request: zeros, not the old one's
    rec.forget(7)
    assert not rec.stats(7, [np.arange(5), np.arange(5)]).window[0].any()


def test_setup_follows_the_method_and_refuses_kinds_it_does_not_record():
    assert window_stats.setup(make_method("streaming", 0.5)) is None
    r = window_stats.setup(make_method("snapkv", 0.5, per_head=False))
    assert (r.kind, r.size) == ("window", make_method("snapkv", 0.5).window)
    assert window_stats.setup(make_method("h2o", 0.5)).kind == "accumulated"
    from sglang_pask.policy.schema import ResidualModel

    pol = random_policy(0, [[0, 1], [2]], 0.33).model_copy(update={"residual": ResidualModel(blend=0.5)})
    assert window_stats.setup(make_method("pask", 0.33, policy=pol)).size == 32  # its attention_window
    r = window_stats.setup(make_method("snapkv", 0.5, per_head=True), kv_heads=HKV)
    assert (r.kind, r.kv_heads) == ("window_heads", HKV)
    assert window_stats.setup(make_method("adakv", 0.5), kv_heads=HKV).kind == "window_heads"
    with pytest.raises(ValueError, match="not 'kvzip_heads'"):
        window_stats.setup(make_method("kvzip", 0.5))
    window_stats.setup(make_method("streaming", 0.5))


def test_a_retired_row_records_nothing_until_a_new_request_takes_it():
    rec = Recorder("accumulated")
    q, k = torch.randn(HQ, 4, D), torch.randn(HKV, 4, D)
    rec.begin(3, 0, 4)
    rec.record(3, 0, q, k, torch.arange(4), torch.arange(4), SCALE)
    rec.retire(3)
    rec.begin(3, 4, 5)  # the same request decodes on: not recorded
    rec.record(3, 0, q[:, :1], k, torch.tensor([4]), torch.arange(4), SCALE)
    assert not rec.stats(3, [np.arange(4)]).accumulated[0].any()
    rec.begin(3, 0, 4)  # a new request in the row: recorded again
    rec.record(3, 0, q, k, torch.arange(4), torch.arange(4), SCALE)
    assert rec.stats(3, [np.arange(4)]).accumulated[0].sum() == pytest.approx(4 * HQ, rel=1e-5)
