"""The PASK radix cache (srt/mem_cache/radix_cache.py, srt/mem_cache/radix_tags.py) on CPU at tiny sizes: SGLang's
``UnifiedRadixCache`` (Python tree core) with :class:`PaskFullComponent` over the PASK pools,
driven by SGLang's own ``checkpoint_kv_cache`` / ``release_kv_cache`` with real ``Req`` objects
(srt_kit.py), no server.

* the first request publishes its segment (one node of ``S`` tokens, stamped) and cuts it to the
  rule's positions right after the insert; a second request with the same segment matches it
  and reads exactly those positions, and nothing is compressed twice;
* a node stamped under another policy, method or budget is never a match (the stamp, and the
  namespace every request's ``extra_key`` carries);
* accounting: at idle every full id and unit slot is free or in the tree; ``evictable_size``
  is what the scheduler could place after evicting, and evicting frees the node's unit slots.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("sglang")
from sglang_pask.methods.segment import segment_kept  # noqa: E402
from sglang_pask.srt import serving  # noqa: E402
from sglang_pask.srt.mem_cache import radix_tags  # noqa: E402
from sglang_pask.srt.state import state  # noqa: E402
from srt_kit import Rig, prompt_classes, reset_counters, serving_config  # noqa: E402

S, OWN = 24, 12
SEG_IDS = list(range(300, 300 + S))
SEG_CLASSES = prompt_classes(S, seed=5)


@pytest.fixture(autouse=True)
def _counters():
    reset_counters()
    yield
    reset_counters()


@pytest.fixture
def use_config(monkeypatch):
    """Make ``config`` this process's serving configuration (what the scheduler's hooks read)."""
    def use(config):
        monkeypatch.setattr(serving, "active_config", lambda: config)
        return config
    return use


def _namespace(config) -> str:
    """The cache namespace a request of this segment gets from the plugin's tagging (entrypoints/prompt_tags):
    the server's stamp and a digest of the segment's token ids."""
    digest = hashlib.sha256(",".join(map(str, SEG_IDS)).encode()).hexdigest()[:24]
    return f"pask-segment:{config.stamp}:{digest}"


def _request(rig: Rig, seed: int, config=None):
    own = [int(x) for x in np.random.default_rng(seed).integers(1000, 2000, OWN)]
    req = rig.request(SEG_IDS + own, SEG_CLASSES + prompt_classes(OWN, seed=seed), segment_end=S, rid=f"r{seed}")
    req.extra_key = _namespace(config or rig.config)
    return req


def _kept(config) -> list[np.ndarray]:
    kept = segment_kept(config.method, config.num_layers, config.groups, SEG_CLASSES,
                        segment_budget=config.rule.segment_budget)
    return [kept[layers[0]] for layers in config.units]


def _balanced(rig: Rig, held: tuple = ()) -> bool:
    """Every full id and unit slot is free or in the tree, but the own tokens of the ``held``
    requests (nothing dropped of them; their tree prefix locked); and what the scheduler is told
    is evictable (per-node slot counts, memoized) equals a recount of every slot."""
    s, t = rig.alloc.stats(), rig.tree.stats()
    assert rig.tree.evictable_size() == rig.tree._schedulable_evictable(fresh=True)
    own = sum(int(r.kv.kv_committed_len) - int(r.kv.cache_protected_len) for r in held)
    return (s["full_available"] + t["tokens"] + own == s["full_size"]
            and (t["protected_tokens"] == 0) == (not held)
            and all(a + n + own == size for a, n, size in zip(s["unit_available"], t["unit_slots"], s["unit_sizes"]))
            and rig.free_lists_unique())


def _first_prefill(rig: Rig, req) -> None:
    rig.prefill(req, upto=S)  # a miss: the segment alone first (the admission hook's chunk)
    rig.prefill(req)


def test_publish_cut_share_release_evict(use_config):
    config = use_config(serving_config("pask", 0.33, segment="system", radix=True))
    rig = Rig(config, full_size=128, unit_size=64, radix=True)
    kept = _kept(config)
    a = _request(rig, 0)
    _first_prefill(rig, a)
    tree = rig.tree.stats()
    assert tree["nodes"] == 1 and tree["tokens"] == S  # the segment only, whole
    assert tree["unit_slots"] == [len(k) for k in kept]  # cut right after the insert
    assert state().segments["segments_compressed"] == 1
    assert [h[h < S].tolist() for h in rig.held(a)] == [k.tolist() for k in kept]
    node = rig.tree.tree_core.root_node.children[next(iter(rig.tree.tree_core.root_node.children))]
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    meta = node.component_data[ComponentType.FULL].metadata
    assert meta[radix_tags.SEGMENT_KEY] == config.stamp
    assert radix_tags.path_classes(node, ComponentType.FULL).tolist() == SEG_CLASSES

    b = _request(rig, 1)  # same segment, other own tokens: a hit
    rig.prefill(b)
    assert int(b.kv.cache_protected_len) == S
    assert rig.row(b)[:S].tolist() == rig.row(a)[:S].tolist()  # the tree's ids, shared
    assert [h[h < S].tolist() for h in rig.held(b)] == [k.tolist() for k in kept]
    assert state().segments["segments_compressed"] == 1  # not compressed twice
    for req in (a, b):
        for _ in range(3):
            from sglang_pask.srt.managers.persist import compress_request

            compress_request(req, rig.req_to_token, rig.alloc, config)
            rig.decode(req)
        assert [h[h < S].tolist() for h in rig.held(req)] == [k.tolist() for k in kept]
    rig.release(a)
    rig.release(b)
    assert _balanced(rig), (rig.alloc.stats(), rig.tree.stats())
    assert rig.tree.stats()["nodes"] == 1  # only the segment is cached, never the own tokens

    # eviction: what evictable_size promises is what evicting gives, unit slots included
    promised = rig.tree.evictable_size()
    available = rig.alloc.available_size()
    assert promised > 0 and available + promised == rig.alloc.capacity
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    rig.tree.evict(EvictParams(num_tokens=S))
    assert rig.tree.stats()["nodes"] == 0
    assert rig.alloc.available_size() == available + promised
    rig.assert_idle()


def test_eviction_under_pressure_frees_unit_slots(use_config):
    """Pools that hold few segments: publishing more distinct segments than fit makes the tree
    evict (as SGLang's allocation path does), and the accounting stays balanced throughout."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    config = use_config(serving_config("pask", 0.33, segment="system", radix=True))
    rig = Rig(config, full_size=96, unit_size=48, radix=True)
    for i in range(8):
        seg = [10_000 * (i + 1) + j for j in range(S)]
        req = rig.request(seg + list(range(OWN)), SEG_CLASSES + prompt_classes(OWN), segment_end=S, rid=f"s{i}")
        need = len(req.origin_input_ids)
        if rig.alloc.available_size() < need:
            rig.tree.evict(EvictParams(num_tokens=need - rig.alloc.available_size()))
        assert rig.alloc.available_size() >= need, (i, rig.alloc.stats(), rig.tree.stats())
        _first_prefill(rig, req)
        rig.release(req)
        assert _balanced(rig), (i, rig.alloc.stats(), rig.tree.stats())
    assert state().segments["segments_compressed"] == 8 and rig.tree.stats()["nodes"] < 8  # some evicted
    rig.tree.evict(EvictParams(num_tokens=rig.alloc.size))
    rig.assert_idle()


def test_another_policy_never_matches(use_config):
    """A segment published under one configuration is never read under another: not across
    namespaces (the stamp is in every request's ``extra_key``), and not even in the same
    namespace (the node's stamp must be the server's)."""
    config = use_config(serving_config("pask", 0.33, segment="system", radix=True))
    rig = Rig(config, full_size=128, unit_size=64, radix=True)
    a = _request(rig, 0)
    _first_prefill(rig, a)
    rig.release(a)
    ids = list(a.origin_input_ids)
    assert rig.match_len(ids, _namespace(config)) == S
    other = use_config(serving_config("pask", 0.5, segment="system", radix=True))
    b = _request(rig, 1, config=other)
    rig.prefill(b, upto=S)
    assert rig.matched[b.rid] == 0  # another namespace: a miss, its segment computed and cut anew
    assert state().segments["segments_compressed"] == 2 and rig.tree.stats()["nodes"] == 2
    assert rig.match_len(ids, _namespace(config)) == 0  # the first server's namespace, another stamp
    rig.release(b)
    use_config(config)
    assert rig.match_len(ids, _namespace(config)) == S  # the original configuration still hits
    d = _request(rig, 3)
    rig.prefill(d)
    assert rig.matched[d.rid] == S
    rig.release(d)
    assert _balanced(rig)


def test_full_prefill_keeps_the_block_whole_and_hits_read_views(use_config):
    """``segment_prefill="full"`` (the accurate mode): the insert waits for the whole prompt and
    keeps the segment whole (stamped ``/full``, nothing cut); a second request matches it (a hit:
    its row points at the tree's slots, nothing recomputed) and, once its prompt is written, reads
    only the kept positions (its view); releasing clears the views and balances the pools."""
    from sglang_pask.srt.mem_cache import segment_views

    config = use_config(serving_config("pask", 0.33, segment="system", radix=True, own_budget=0.5,
                                       segment_prefill="full"))
    rig = Rig(config, full_size=128, unit_size=64, radix=True)
    kept = _kept(config)
    a = _request(rig, 0)
    rig.prefill(a, upto=S)
    assert rig.tree.stats()["nodes"] == 0  # not published before the whole prompt is written
    rig.prefill(a)
    assert rig.tree.stats()["tokens"] == S and rig.tree.stats()["unit_slots"] == [S] * len(config.units)
    b = _request(rig, 1)
    rig.prefill(b)
    assert rig.matched[b.rid] == S and int(b.kv.cache_protected_len) == S  # a hit
    assert rig.row(b)[:S].tolist() == rig.row(a)[:S].tolist()
    assert [h[h < S].tolist() for h in rig.held(b)] == [list(range(S))] * len(config.units)  # whole
    for req in (a, b):
        row = int(req.kv.req_pool_idx)
        assert [segment_views.visible(row, u, np.arange(S)).tolist() for u in range(len(config.units))] == \
            [k.tolist() for k in kept]
    assert state().segments["segments_compressed"] == 0 and state().views_made["views"] == 2
    rig.release(a)
    rig.release(b)
    assert not state().views
    assert _balanced(rig), (rig.alloc.stats(), rig.tree.stats())


def test_validator_refuses_other_stamps(use_config, monkeypatch):
    """A node is a match only with the server's stamp (policy hash, method, budget, segment
    budget). (Moved from test_srt_radix_server.py: it needs no server.)"""
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    config = use_config(serving_config("pask", 0.33, segment="system", radix=True))
    comp = radix_tags.PaskFullComponent.__new__(radix_tags.PaskFullComponent)
    comp.component_type = ComponentType.FULL
    monkeypatch.setattr(radix_tags.FullComponent, "create_match_validator",
                        lambda self, match_device_only=False: (lambda node: True))
    valid = comp.create_match_validator()

    def node(stamp):
        data = [SimpleNamespace(metadata={} if stamp is None else {radix_tags.SEGMENT_KEY: stamp})] * 5
        return SimpleNamespace(component_data=data)

    others = [serving_config("pask", 0.5, segment="system", radix=True),
              serving_config("pask", 0.33, segment="system", radix=True, segment_budget=0.2),
              serving_config("streaming", 0.33, segment="system", radix=True)]
    assert len({config.stamp, *(o.stamp for o in others)}) == 4
    assert valid(node(config.stamp))
    assert not valid(node(None)) and not any(valid(node(o.stamp)) for o in others)


def test_cold_whole_blocks_are_demoted_before_eviction(use_config):
    """The accurate mode under memory pressure (SGLang's allocation path: ``evict_for_alloc``):
    the least recently used cold whole block is demoted first -- it keeps exactly the rule's
    positions, is stamped compressed and stays in the tree -- and only as far as needed; a block a
    request holds is never demoted; a later request hits the demoted block; LRU evicts only what
    demotion cannot free; the pools balance after every step and are idle at the end."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    config = use_config(serving_config("pask", 0.33, segment="system", radix=True, own_budget=1.0,
                                       segment_prefill="full"))
    rig = Rig(config, full_size=160, unit_size=112, radix=True)
    kept = _kept(config)
    state().demotion.update(demoted=0, demoted_slots=0)

    def block(i: int, seed: int = 0):
        seg = [10_000 * (i + 1) + j for j in range(S)]
        own = [int(x) for x in np.random.default_rng(seed).integers(1000, 2000, OWN)]
        req = rig.request(seg + own, SEG_CLASSES + prompt_classes(OWN, seed=seed), segment_end=S, rid=f"b{i}.{seed}")
        req.extra_key = f"block-{i}"
        return req

    reqs = [block(i) for i in range(3)]
    for req in reqs:
        rig.prefill(req)
    rig.release(reqs[0])
    rig.release(reqs[1])  # blocks 0 (least recently used) and 1 are cold; block 2 is held
    assert rig.tree.stats()["tiers"]["whole"]["blocks"] == 3 and _balanced(rig, [reqs[2]])

    need = rig.alloc.available_size() + 4
    rig.tree.evict_for_alloc(EvictParams(num_tokens=4))
    assert rig.alloc.available_size() >= need
    stats = rig.tree.stats()
    assert stats["nodes"] == 3 and stats["demoted"] == 1  # demoted, not evicted; block 1 untouched
    assert stats["tiers"] == {"whole": {"blocks": 2, "kv_bytes": stats["tiers"]["whole"]["kv_bytes"]},
                              "compressed": {"blocks": 1, "kv_bytes": stats["tiers"]["compressed"]["kv_bytes"]}}
    assert stats["unit_slots"] == [2 * S + len(k) for k in kept]  # block 0 holds the rule's positions only
    assert _balanced(rig, [reqs[2]]), (rig.alloc.stats(), stats)
    hit = block(0, seed=7)  # a later request on the demoted block: a hit, prefilled against it
    rig.prefill(hit)
    assert rig.matched[hit.rid] == S
    assert [h[h < S].tolist() for h in rig.held(hit)] == [k.tolist() for k in kept]
    assert state().views_made["views_on_demoted"] == 1
    rig.release(hit)
    assert _balanced(rig, [reqs[2]])
    rig.tree.evict_for_alloc(EvictParams(num_tokens=rig.alloc.size))  # more than demotion can free
    stats = rig.tree.stats()
    assert stats["demoted"] == 2 and stats["nodes"] == 1  # block 1 demoted too; both cold blocks evicted
    # block 2: held, whole
    assert stats["tiers"]["whole"]["blocks"] == 1 and stats["unit_slots"] == [S] * len(config.units)
    rig.release(reqs[2])
    rig.tree.evict_for_alloc(EvictParams(num_tokens=rig.alloc.size))
    assert rig.tree.stats()["demoted"] == 3
    rig.assert_idle()
