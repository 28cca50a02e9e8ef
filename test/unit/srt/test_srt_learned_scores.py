"""The learned scorer in the server (srt/attention/learned_scores.py), on CPU at tiny sizes, no server: hooks
on each decoder layer's ``input_layernorm`` turn the forward's attention input into the shipped
scorer's own predictions, stored by full id (``out_cache_loc``) for the forward that
``ModelRunner.forward`` (the seam's AROUND hook) hands over; decode forwards only when the
schedule reads them; a layer that gave nothing leaves its tokens unscored, and a compression that
would read them fails (the request keeps Full KV) instead of reading a stale score. On the real
pools of the CPU rig, ``compress_request`` keeps exactly what KVzap selects from the scores of the
positions each layer holds. The serving config: ``kvzap`` is served, ``--pask-scorer`` is required
by it, refused for a method that reads no scorer and for a scorer of another model. (Against the
reference runner, through a live server: test_server_attention_parity.py.)"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("sglang")

import torch  # noqa: E402
from conftest import ROOT, TINY_RANDOM  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang_pask.methods import CacheView  # noqa: E402
from sglang_pask.methods.base import AttentionStats  # noqa: E402
from sglang_pask.methods.learned import LearnedScorer  # noqa: E402
from sglang_pask.srt.attention import head_masks  # noqa: E402
from sglang_pask.srt.attention.learned_scores import LearnedScores, around_forward  # noqa: E402
from sglang_pask.srt.managers.persist import PROTECTED_TAIL, compress_request  # noqa: E402
from sglang_pask.srt.managers.request_tags import tags_of  # noqa: E402
from sglang_pask.srt.serving import server_methods  # noqa: E402
from srt_kit import Rig, reset_counters, serving_config  # noqa: E402

SCORER = str(ROOT / "policies" / "pask-tiny-fc.kvzap.safetensors")
D, L = 192, 4  # the tiny model's hidden size and layers


@pytest.fixture(autouse=True)
def _clean():
    reset_counters()
    yield
    reset_counters()
    head_masks.masks().clear()  # KVzap's per-head sets of the rig's rows


class _Norm(torch.nn.Module):
    """SGLang's RMSNorm's two shapes of output: the normed rows, or (normed, residual)."""

    def __init__(self, with_residual: bool):
        super().__init__()
        self.with_residual = with_residual

    def forward(self, x):
        return (x * 2.0, x) if self.with_residual else x * 2.0


class _Model(torch.nn.Module):
    """``model.layers[i].input_layernorm``: each layer's norm run once on its own input rows."""

    def __init__(self, layers: int = L):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList()
        for i in range(layers):
            lay = torch.nn.Module()
            lay.input_layernorm = _Norm(with_residual=i > 0)
            self.model.layers.append(lay)

    def run(self, xs, skip=()):
        for i, lay in enumerate(self.model.layers):
            if i not in skip:
                lay.input_layernorm(xs[i])


def _forward(learned, model, mode, loc, gen, skip=()):
    """One model-runner forward of ``len(loc)`` tokens through the seam's AROUND hook; returns the
    rows each layer's attention reads (``[L][n, D]``)."""
    xs = [torch.randn(len(loc), D, generator=gen) for _ in range(L)]
    runner = SimpleNamespace(token_to_kv_pool=SimpleNamespace(learned_scores=learned))
    batch = SimpleNamespace(forward_mode=mode, out_cache_loc=torch.tensor(loc, dtype=torch.int64))
    around_forward(lambda _r, b: model.run(xs, skip), runner, batch)
    return [x * 2.0 for x in xs]


def test_each_forward_token_is_scored_by_its_full_id_with_the_scorers_own_code():
    scorer = LearnedScorer.load(SCORER)
    learned, model, gen = LearnedScores(scorer, 40, decode=True), _Model(), torch.Generator().manual_seed(0)
    learned.install(model)
    learned.install(model)  # once: a second install adds no hooks
    loc = [7, 3, 12, 30, 5]
    rows = _forward(learned, model, ForwardMode.EXTEND, loc, gen)
    for layer in range(L):
        want = scorer.scores(layer, rows[layer].numpy())  # [H, n]
        assert torch.equal(learned.scores[layer, loc], torch.from_numpy(want.T.copy()))
    dec = _forward(learned, model, ForwardMode.DECODE, [9], gen)
    assert torch.equal(learned.scores[2, [9]], torch.from_numpy(scorer.scores(2, dec[2].numpy()).T.copy()))
    assert learned.counters["forwards"] == 2 and learned.counters["tokens"] == 6
    assert learned.counters["missed"] == 0 and learned.counters["seconds"] > 0
    model.run([torch.randn(2, D)] * L)  # outside a model-runner forward: nothing recorded
    assert learned.counters["tokens"] == 6
    # aligned with each layer's held positions (full_ids: the request's id at each position), a
    # KV head that no longer holds a position scores 0 there
    full_ids = torch.tensor(loc)
    retained = [np.array([0, 2, 4])] * L
    mask = np.array([[True, False, True], [True, True, True]])
    heads = learned.heads(full_ids, retained, [None, mask, None, None])
    assert heads[0].shape == (scorer.kv_heads, 3) and heads[0].dtype == np.float32
    # the runner scores the held rows at a compression, the server each forward's rows: the
    # scorer is row-stable, so the values are the same to the bit
    np.testing.assert_array_equal(heads[0], scorer.scores(0, rows[0][[0, 2, 4]].numpy()))
    np.testing.assert_array_equal(heads[1], scorer.scores(1, rows[1][[0, 2, 4]].numpy()) * mask)
    assert (heads[1][0, 1] == 0) and (heads[1] > 0).sum() == 5
    learned.remove()
    _forward(learned, model, ForwardMode.EXTEND, [1], gen)
    assert learned.counters["missed"] == 1  # no hooks, no input: unscored, never stale


def test_decode_forwards_are_not_scored_when_nothing_reads_them_and_idle_ones_never():
    learned, model, gen = LearnedScores(LearnedScorer.load(SCORER), 40, decode=False), _Model(), \
        torch.Generator().manual_seed(1)
    learned.install(model)
    _forward(learned, model, ForwardMode.DECODE, [4, 5], gen)
    _forward(learned, model, ForwardMode.IDLE, [], gen)
    assert learned.counters["forwards"] == 0 and not learned.scores.any()
    _forward(learned, model, ForwardMode.MIXED, [4, 5], gen)  # a prefill chunk beside decode rows
    assert learned.counters["tokens"] == 2 and learned.scores[:, [4, 5]].all()


def test_a_layer_that_gave_no_input_leaves_its_tokens_unscored_and_the_compression_refuses():
    learned, model, gen = LearnedScores(LearnedScorer.load(SCORER), 40), _Model(), torch.Generator().manual_seed(2)
    learned.install(model)
    _forward(learned, model, ForwardMode.EXTEND, [1, 2, 3], gen)
    _forward(learned, model, ForwardMode.EXTEND, [10, 11], gen, skip={3})
    assert learned.counters["missed"] == 2 and torch.isnan(learned.scores[:, [10, 11]]).all()
    learned.heads(torch.tensor([1, 2, 3]), [np.arange(3)] * L)  # the whole forward's tokens are fine
    with pytest.raises(RuntimeError, match="no score"):
        learned.heads(torch.tensor([1, 2, 10]), [np.arange(3)] * L)


def test_compress_request_keeps_what_kvzap_selects_from_the_held_positions_scores():
    config = serving_config("kvzap", 0.33, schedule="prefill", scorer=SCORER)
    assert config.scorer is not None and config.method.scorer_sha256
    gen = torch.Generator().manual_seed(3)
    rig = Rig(config, kv_heads=2)
    rig.pool.learned_scores = learned = LearnedScores(config.scorer, rig.pool.mapping.shape[1], decode=False)
    model = _Model()
    learned.install(model)
    req = rig.request(list(range(300, 360)))
    ids = rig.prefill(req, upto=25).tolist()  # two prefill chunks, as SGLang's chunked prefill
    rows = _forward(learned, model, ForwardMode.EXTEND, ids, gen)
    ids2 = rig.prefill(req).tolist()
    rows2 = _forward(learned, model, ForwardMode.EXTEND, ids2, gen)
    x = [torch.cat([a, b]) for a, b in zip(rows, rows2)]  # [L][60, D]: by logical position
    retained = [np.arange(60)] * L
    view = CacheView(num_layers=L, groups=config.groups, seq_len=60, classes=tags_of(req).classes(req, 60),
                     retained=retained, protected_tail=PROTECTED_TAIL, prompt_len=60,
                     attention=AttentionStats(learned_heads=[config.scorer.scores(layer, x[layer].numpy())
                                                             for layer in range(L)]))
    sel = config.method.select(view)
    assert compress_request(req, rig.req_to_token, rig.alloc, config) > 0
    for u, layers in enumerate(config.units):
        assert np.array_equal(rig.held(req)[u], sel.kept[layers[0]]), f"unit {u}"
    rig.release(req)
    rig.assert_idle()


def test_the_server_runs_a_pask_policy_whose_residual_reads_the_learned_scorer(tmp_path):
    """A policy whose residual statistic is ``learned`` (the ranked 0.2 policy, its statistic
    swapped) pins its scorer file beside it: served as it is (no flag), the method reads
    ``learned_heads``, bound to that file; ``--pask-scorer`` names another copy of it; a policy
    whose statistic is learned but pins no scorer is refused by name."""
    import json
    import shutil

    from sglang_pask.methods.learned import scorer_sha256
    from sglang_pask.srt.serving import ServingFlags, build_config

    doc = json.loads((ROOT / "experiments" / "policies" / "pask-tiny-fc.ranked.b0.2.json").read_text())
    for old in ("attention_blend", "attention_stat", "head_split", "residual_split"):
        doc.pop(old, None)
    doc["residual"] = {"blend": 0.5, "stat": "learned", "per_head": True, "split": "scores"}
    path = tmp_path / "learned.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"residual.scorer = None: a residual on the learned statistic names"):
        build_config(str(path), ServingFlags(scorer=SCORER))
    doc["residual"].update(scorer=Path(SCORER).name, scorer_sha256=scorer_sha256(SCORER))
    path.write_text(json.dumps(doc))
    shutil.copyfile(SCORER, tmp_path / Path(SCORER).name)
    config = build_config(str(path), ServingFlags())
    assert config.method.name == "pask" and config.method.needs_attention == "learned_heads"
    assert config.method.scorer == str(tmp_path / Path(SCORER).name)
    assert config.method.scorer_sha256 == scorer_sha256(SCORER)
    assert config.scorer is not None and config.method.adaptive_heads
    config = build_config(str(path), ServingFlags(scorer=SCORER))  # the flag names the file instead
    assert config.method.scorer == SCORER and config.scorer is not None


def test_the_server_runs_kvzap_with_a_scorer_bound_to_its_model():
    from sglang_pask.srt.serving import ServingFlags, build_config

    assert "kvzap" in server_methods()
    policy = str(ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.33.json")  # the lookup
    with pytest.raises(ValueError, match=r"--pask-scorer: kvzap needs a scorer file: pass --pask-scorer PATH"):
        build_config(policy, ServingFlags(method="kvzap"))
    with pytest.raises(ValueError, match=r"--pask-scorer: method 'snapkv' reads no learned scorer"):
        build_config(policy, ServingFlags(method="snapkv", scorer=SCORER))
    with pytest.raises(ValueError, match=r"--pask-scorer: the policy's residual reads no statistic, not the learned"):
        build_config(policy, ServingFlags(scorer=SCORER))  # the lookup reads no scorer
    prior = str(ROOT / "policies" / "tiny-random-qwen3.prior.json")
    with pytest.raises(ValueError, match=r"was fitted for model .*pask-tiny-fc.*but model .*tiny-random-qwen3"):
        build_config(prior, ServingFlags(method="kvzap", scorer=SCORER), model_dir=str(TINY_RANDOM))
    config = build_config(policy, ServingFlags(method="kvzap", scorer=SCORER))
    assert config.method.scorer == SCORER and len(config.method.scorer_sha256) == 64
    assert config.method.record()["scorer_sha256"] == config.method.scorer_sha256
