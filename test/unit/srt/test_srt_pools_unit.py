"""The per-unit KV sub-pools and their allocator (srt/mem_cache/pools.py) on CPU at tiny sizes: SGLang's own
``MHATokenToKVPool`` and ``TokenToKVPoolAllocator`` under :class:`PaskKVPool` /
:class:`PaskAllocator`, no server.

Invariants (pools.py): alloc gives every new token a slot in every unit and sets its mapping; a
drop frees one unit's slot and zeroes that mapping only; free releases the slots still mapped and
then the full id, and clears the mapping; ``available_size()`` is the tightest of the full ids and
the units; after any sequence of alloc / drop / free, releasing everything leaves every allocator
at its size with no slot on a free list twice, and every mapping zero."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("sglang")
from sglang_pask.srt.mem_cache.pools import PaskAllocator, PaskKVPool, unit_size_for  # noqa: E402
from srt_kit import NUM_LAYERS  # noqa: E402

UNITS = [[0, 1], [2, 3]]
FULL, SLOTS = 16, 8


def _alloc(units=UNITS, full=FULL, slots=SLOTS) -> PaskAllocator:
    pool = PaskKVPool(units=units, full_size=full, unit_size=slots, dtype=torch.float32, head_num=2, head_dim=4,
                      v_head_dim=None, device="cpu", num_layers=NUM_LAYERS)
    return PaskAllocator(full, pool, device="cpu", dtype=torch.float32)


def _no_double(a: PaskAllocator) -> None:
    for name, f in [("full", a.free_pages), *((f"unit {u}", x.free_pages) for u, x in enumerate(a.units))]:
        assert torch.unique(f).numel() == f.numel(), f"{name}: a slot is on the free list twice: {f.tolist()}"


def _assert_idle(a: PaskAllocator) -> None:
    _no_double(a)
    assert a.full_available_size() == a.size, f"full ids leaked: {a.full_available_size()} of {a.size} free"
    assert a.unit_available_sizes() == a.pool.unit_sizes, \
        f"unit slots leaked or freed twice: available {a.unit_available_sizes()}, sizes {a.pool.unit_sizes}"
    assert int(a.pool.mapping.count_nonzero()) == 0, f"mapping not cleared: {a.pool.mapping.tolist()}"
    assert a.kv_bytes_in_use() == 0


def _assert_injective(a: PaskAllocator) -> None:
    for u, row in enumerate(a.pool.mapping):
        held = row[row > 0]
        assert torch.unique(held).numel() == held.numel(), f"unit {u} maps two ids to one slot: {row.tolist()}"


def test_alloc_maps_every_unit():
    a = _alloc()
    assert a.capacity == a.available_size() == SLOTS  # the units are the tightest
    ids = a.alloc(5)
    assert ids.tolist() == [1, 2, 3, 4, 5]
    for u in range(len(UNITS)):
        slots = a.pool.translate(u, ids)
        assert (slots > 0).all() and torch.unique(slots).numel() == 5
        assert int(a.pool.mapping[u].count_nonzero()) == 5  # nothing else mapped
    assert a.unit_available_sizes() == [3, 3] and a.full_available_size() == FULL - 5
    assert a.available_size() == 3
    assert a.unit_slots_in_use() == [5, 5]
    assert a.kv_bytes_in_use() == 5 * NUM_LAYERS * a.pool.bytes_per_token_layer()
    _assert_injective(a)


def test_alloc_refused_when_a_unit_is_full():
    a = _alloc()
    a.alloc(SLOTS)
    before = (a.full_available_size(), a.unit_available_sizes(), a.pool.mapping.clone())
    assert a.alloc(1) is None  # full ids left, no unit slot: refused, nothing taken
    assert (a.full_available_size(), a.unit_available_sizes()) == before[:2]
    assert torch.equal(a.pool.mapping, before[2])


def test_drop_frees_one_unit_and_clears_its_mapping():
    a = _alloc()
    ids = a.alloc(6)
    assert a.drop(0, ids[:2]) == 2
    assert a.unit_available_sizes() == [SLOTS - 4, SLOTS - 6]
    assert a.pool.translate(0, ids[:2]).tolist() == [0, 0]
    assert (a.pool.translate(0, ids[2:]) > 0).all() and (a.pool.translate(1, ids) > 0).all()
    assert a.full_available_size() == FULL - 6  # full ids stay live
    assert a.dropped_total == 2
    # dropping again (and a mix of dropped and held ids) frees only what is still held
    assert a.drop(0, ids[:2]) == 0
    assert a.drop(0, ids[1:3]) == 1
    assert a.unit_available_sizes() == [SLOTS - 3, SLOTS - 6] and a.dropped_total == 3
    assert a.drop(1, ids[:0]) == 0
    _no_double(a)
    _assert_injective(a)


def test_free_releases_held_slots_and_clears_the_mapping():
    a = _alloc()
    ids = a.alloc(6)
    a.drop(0, ids[::2])
    a.drop(1, ids[:1])
    a.free(ids[:3])  # some of these were dropped in unit 0 or 1
    assert a.pool.translate(0, ids[:3]).tolist() == [0, 0, 0]
    assert a.pool.translate(1, ids[:3]).tolist() == [0, 0, 0]
    assert a.full_available_size() == FULL - 3
    assert a.unit_available_sizes() == [SLOTS - 2, SLOTS - 3]  # unit 0 holds ids[3], ids[5]
    _no_double(a)
    a.free(ids[3:])
    _assert_idle(a)


def test_free_group_defers_then_frees_once():
    """SGLang's free groups (free_group_begin/end) hold frees back; the end frees each id once."""
    a = _alloc()
    ids = a.alloc(4)
    a.drop(1, ids[:2])
    a.free_group_begin()
    a.free(ids[:2])
    a.free(ids[2:])
    assert a.full_available_size() == FULL - 4 and a.unit_available_sizes() == [SLOTS - 4, SLOTS - 2]
    a.free_group_end()
    _assert_idle(a)


def test_reused_ids_map_fresh_slots():
    """A full id freed and allocated again gets a slot in every unit, also in a unit where it
    was dropped before it was freed."""
    a = _alloc()
    ids = a.alloc(FULL // 2)
    a.drop(0, ids)
    a.free(ids)
    again = a.alloc(SLOTS)
    for u in range(len(UNITS)):
        assert (a.pool.translate(u, again) > 0).all()
    _assert_injective(a)
    a.free(again)
    _assert_idle(a)


@pytest.mark.parametrize("units", [UNITS, [[0], [1], [2], [3]]])
def test_random_sequences_balance(units):
    """Random alloc / drop / free sequences (seeded): at every step the counters agree with the
    mapping; freeing what is left returns every allocator to its size."""
    rng = np.random.default_rng(0)
    for trial in range(20):
        a = _alloc(units=units, full=24, slots=12)
        live: list[int] = []
        for _ in range(40):
            op = rng.integers(3)
            if op == 0:
                ids = a.alloc(int(rng.integers(1, 4)))
                if ids is not None:
                    live += ids.tolist()
            elif op == 1 and live:
                pick = torch.tensor(rng.choice(live, size=min(len(live), 3), replace=False))
                a.drop(int(rng.integers(len(units))), pick)
            elif op == 2 and live:
                pick = rng.choice(live, size=min(len(live), 2), replace=False).tolist()
                a.free(torch.tensor(pick))
                live = [x for x in live if x not in pick]
            held = (a.pool.mapping > 0).sum(dim=1).tolist()
            assert a.unit_slots_in_use() == held, (trial, held, a.unit_available_sizes())
            assert a.full_available_size() == 24 - len(live)
            _assert_injective(a)
        a.free(torch.tensor(live, dtype=torch.int64))
        _assert_idle(a)


def test_clear_resets_everything():
    a = _alloc()
    ids = a.alloc(5)
    a.drop(0, ids[:2])
    a.clear()
    _assert_idle(a)


def test_kv_writes_land_in_the_unit_slots():
    """set_kv_buffer writes a layer's K/V at the unit slots of the full ids; a dropped id writes
    to the padding slot 0, never over another token's slot."""
    a = _alloc()
    ids = a.alloc(3)
    a.drop(1, ids[:1])
    pool = a.pool
    k = torch.arange(3 * 2 * 4, dtype=torch.float32).reshape(3, 2, 4) + 1
    for layer in range(NUM_LAYERS):
        pool.set_kv_buffer(type("L", (), {"layer_id": layer})(), ids, k, -k)
        u = pool.unit_of[layer]
        slots = pool.translate(u, ids)
        buf = pool.get_key_buffer(layer)
        for i, s in enumerate(slots.tolist()):
            if s:
                assert torch.equal(buf[s], k[i]) and torch.equal(pool.get_value_buffer(layer)[s], -k[i])
        held = [s for s in slots.tolist() if s]
        others = torch.ones(buf.shape[0], dtype=torch.bool)
        others[held] = False
        others[0] = False
        assert not buf[others].any()  # nothing else written


def test_sizes_and_stats():
    a = _alloc()
    pool = a.pool
    assert pool.bytes_per_token_layer() == 2 * (4 + 4) * 4
    assert pool.kv_bytes_capacity() == SLOTS * NUM_LAYERS * pool.bytes_per_token_layer()
    k, v = pool.get_kv_size_bytes()
    assert k == v == pool.kv_bytes_capacity() // 2
    ids = a.alloc(4)
    a.drop(0, ids[:3])
    s = a.stats()
    assert s["unit_available"] == [SLOTS - 1, SLOTS - 4] and s["full_available"] == FULL - 4
    assert s["kv_bytes_in_use"] == (1 * 2 + 4 * 2) * pool.bytes_per_token_layer()
    assert s["dropped_total"] == 3 and s["units"] == UNITS
    assert unit_size_for(4096, 0.33) == 1352 and unit_size_for(10, 1.0) == 10 and unit_size_for(1, 0.01) == 1


def test_unit_sizes_for_splits_the_same_bytes_by_share():
    from sglang_pask.srt.mem_cache.pools import unit_sizes_for

    units = [[0], [1], [2], [3]]
    assert unit_sizes_for(4096, 0.33, units) == [1352] * 4  # no share: b x N each
    sizes = unit_sizes_for(4096, 0.33, units, [0.46, 0.33, 0.26, 0.26])
    assert sum(sizes) <= 1352 * 4 and sum(sizes) >= 1352 * 4 - 4  # the same slot-layers, rounded down
    assert sizes[0] > sizes[1] > sizes[2] == sizes[3]
    assert abs(sizes[0] / sizes[2] - 0.46 / 0.26) < 0.01  # in proportion to the shares
    # units of unequal length: slot-layers split by share x layers
    two = unit_sizes_for(1000, 0.5, [[0, 1, 2], [3]], [0.4, 0.8])
    assert two[0] * 3 + two[1] <= 500 * 4 and abs(two[1] / two[0] - 2.0) < 0.01
    # with the workload's prompt and output tokens: one prompt's room in every unit, and every unit
    # full at the same count of running requests (what each holds: share x prompt + output)
    prompt, out = 1150.0, 64.0
    share = [0.577, 0.238, 0.246, 0.259]
    sized = unit_sizes_for(24824, 0.33, units, share, prompt, out)
    assert sum(sized) <= 8192 * 4 and sum(sized) >= 8192 * 4 - 4
    fits = [(n - prompt) / (s * prompt + out) for n, s in zip(sized, share)]
    assert max(fits) - min(fits) < 0.01 and 15 < fits[0] < 17  # ~16 requests in every unit
    plain = unit_sizes_for(24824, 0.33, units, share)  # proportional only: the small units bind
    assert min((n - prompt) / (s * prompt + out) for n, s in zip(plain, share)) < 14.5
    small = unit_sizes_for(4000, 0.33, units, share, prompt, out)  # not one request beside the next prompt
    assert small == [1320] * 4  # b x N each: the largest pool every unit can have
    for bad in ([0.5], [0.5, 0.0, 0.5, 0.5], [0.5, float("nan"), 0.5, 0.5]):
        with pytest.raises(ValueError, match="one share > 0 per unit"):
            unit_sizes_for(4096, 0.33, units, bad)


def test_sized_units_fill_and_free_at_their_own_sizes():
    """Unequal unit pools: capacity is the smallest; a unit's drops free only its own slots; idle
    returns every unit to its own size; the KV bytes are the sizes' slot-layers."""
    pool = PaskKVPool(units=UNITS, full_size=FULL, unit_size=[10, 6], dtype=torch.float32, head_num=2, head_dim=4,
                      v_head_dim=None, device="cpu", num_layers=NUM_LAYERS)
    a = PaskAllocator(FULL, pool, device="cpu", dtype=torch.float32)
    assert a.capacity == a.available_size() == 6 and pool.kv_bytes_capacity() == (10 * 2 + 6 * 2) * 64
    ids = a.alloc(6)
    assert a.unit_available_sizes() == [4, 0] and a.alloc(1) is None  # unit 1 is full
    a.drop(1, ids[:4])  # the smaller unit keeps 2 of 6
    assert a.unit_available_sizes() == [4, 4] and a.available_size() == 4
    more = a.alloc(4)
    assert more is not None and a.unit_available_sizes() == [0, 0]
    assert a.stats()["unit_sizes"] == [10, 6]
    a.free(ids)
    a.free(more)
    _assert_idle(a)
    with pytest.raises(ValueError, match="one size >= 1 per unit"):
        PaskKVPool(units=UNITS, full_size=FULL, unit_size=[10], dtype=torch.float32, head_num=2, head_dim=4,
                   v_head_dim=None, device="cpu", num_layers=NUM_LAYERS)
