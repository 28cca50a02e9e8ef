"""The seeded, stratified BFCL subsets of the data spec: ``bfcl:CATS:eval=K`` (per category the K
entries first in sha256(seed, id) order) and ``bfcl:CATS:calib=K`` (the rest), disjoint by id,
deterministic, covering every entry; malformed options are refused naming the option."""

from __future__ import annotations

from collections import Counter

import pytest
from sglang_pask.eval.data import BFCL_CATEGORIES, load_bfcl, load_spec, parse_spec, stratified


def _keys(entries) -> set[tuple[str, str]]:
    return {(e.category, e.id) for e in entries}


def test_eval_and_calib_partition_every_category():
    full = load_bfcl()
    ev, cal = load_spec("bfcl:all:eval=25"), load_spec("bfcl:all:calib=25")
    assert not _keys(ev) & _keys(cal)
    assert _keys(ev) | _keys(cal) == _keys(full) and len(ev) + len(cal) == len(full)
    sizes = Counter(e.category for e in full)
    assert Counter(e.category for e in ev) == {c: min(25, sizes[c]) for c in BFCL_CATEGORIES}
    # the two small live categories (16 and 24 entries) are whole in the eval subset
    small = ("live_parallel", "live_parallel_multiple")
    assert all(sizes[c] <= 25 and not any(e.category == c for e in cal) for c in small)
    assert [e.id for e in load_spec("bfcl:all:eval=25")] == [e.id for e in ev]  # deterministic
    other = load_spec("bfcl:all:eval=25:seed=1")
    assert _keys(other) != _keys(ev) and len(other) == len(ev)  # the seed picks
    assert parse_spec("bfcl:all:eval=25")["split"] == "eval" and parse_spec("bfcl:all:calib=25")["split"] == "calib"


def test_a_category_list_keeps_its_subset():
    sub = load_spec("bfcl:simple_python,live_simple:eval=5:seed=7")
    whole = load_spec("bfcl:all:eval=5:seed=7")
    assert _keys(sub) == {k for k in _keys(whole) if k[0] in ("simple_python", "live_simple")}


@pytest.mark.parametrize("spec, words", [
    ("bfcl:all:eval=0", "eval='0' must be a positive integer"),
    ("bfcl:all:eval=3:calib=4", "unknown or repeated option 'calib=4'"),
    ("bfcl:all:seed=1", "seed= needs eval=K or calib=K"),
    ("bfcl:all:sample=3", "unknown or repeated option 'sample=3'"),
    ("bfcl:all:calib=x", "calib='x' must be a positive integer"),
    ("bfcl:simple_python=0:eval", "simple_python='0' must be a positive integer"),
    ("bfcl:simple_python=3", "CAT=K needs eval=K or calib=K"),
    ("bfcl:simple_python=3,multiple:eval", "no size for multiple"),
    ("bfcl:all:eval", "unknown or repeated option 'eval'"),
])
def test_malformed_subset_options_are_named(spec, words):
    with pytest.raises(ValueError, match="bad spec") as e:
        parse_spec(spec)
    assert words in str(e.value)


def test_calibration_accepts_only_the_calib_subset():
    from sglang_pask.calibrate.pipeline import Config

    for data in ("bfcl:all:eval=25", "bfcl:all"):
        with pytest.raises(ValueError, match="calibration split"):
            Config(model="m", data=data, groups=2, budgets=(0.33,), out="o.json")
    assert Config(model="m", data="bfcl:all:calib=25", groups=2, budgets=(0.33,), out="o.json").data


def test_stratified_takes_round_robin_over_categories_in_order():
    calib = load_spec("bfcl:all:calib=25")
    got = stratified(calib, 8)
    cats = list(dict.fromkeys(e.category for e in calib))  # the order categories first appear
    assert [e.category for e in got] == (cats * 2)[:8]
    for cat in cats:  # each category's own order kept
        mine = [e.id for e in got if e.category == cat]
        assert mine == [e.id for e in calib if e.category == cat][:len(mine)]
    everything = stratified(calib, 10**6)
    assert len(everything) == len(calib) and {e.id for e in everything} == {e.id for e in calib}


def test_per_category_sizes_and_a_calibrations_entries_excluded(tmp_path):
    """``CAT=K`` sizes a category's eval subset (a prefix of the same seeded order, so a larger K
    extends a smaller one); ``exclude=RECORD`` drops exactly the entries that calibration used (its
    own spec, seed, fit and check sizes say which: :func:`calibration_split`, as ``pask
    calibrate`` cuts them)."""
    import json

    from sglang_pask.eval.data import calibration_ids, calibration_split

    small = load_spec("bfcl:simple_python=10,multiple=4:eval")
    big = load_spec("bfcl:simple_python=60,multiple=4:eval")
    assert Counter(e.category for e in small) == {"simple_python": 10, "multiple": 4}
    assert _keys(small) <= _keys(big) and len(big) == 64
    assert _keys(load_spec("bfcl:simple_python=7,multiple:eval=3")) == _keys(
        load_spec("bfcl:simple_python:eval=7")) | _keys(load_spec("bfcl:multiple:eval=3"))
    spec = "bfcl:simple_python,multiple:calib=5"
    record = tmp_path / "x.calibration.json"
    record.write_text(json.dumps({"config": {"data": spec, "seed": 0, "fit_n": 30, "probe_n": 10, "check_n": 20}}))
    probe, fit, check = calibration_split(load_spec(spec), 0, 30, 10, 20)
    used = _keys(fit) | _keys(check)
    assert len(used) == 50 and _keys(probe) <= _keys(fit) and calibration_ids(record) == used
    wide = "bfcl:simple_python=200,multiple=100:eval"
    kept = load_spec(f"{wide}:exclude={record}")
    assert not _keys(kept) & used and _keys(kept) == _keys(load_spec(wide)) - used
    with pytest.raises(ValueError, match="not a calibration record"):
        load_spec(f"{wide}:exclude={tmp_path / 'missing.json'}")


def test_a_synthetic_split_without_a_calibrations_entries(tmp_path):
    """``synthetic:...:exclude=RECORD``: a larger N of the same split starts with the smaller one's
    entries, so excluding a calibration on ``calib:N`` leaves exactly the entries past its fit and
    check (here: check every other entry, so all N were used)."""
    import json

    record = tmp_path / "s.calibration.json"
    record.write_text(json.dumps({"config": {"data": "synthetic:calib:30:tiny", "seed": 0, "fit_n": 18,
                                             "probe_n": 6}}))
    first = load_spec("synthetic:calib:30:tiny")
    kept = load_spec(f"synthetic:calib:40:tiny:exclude={record}")
    assert _keys(load_spec("synthetic:calib:40:tiny")[:30]) == _keys(first)
    assert _keys(kept) == _keys(load_spec("synthetic:calib:40:tiny")[30:])
    with pytest.raises(ValueError, match=r"unknown or repeated option 'seed'"):
        load_spec("synthetic:calib:40:tiny:seed=1")


def test_distractors_make_a_catalog_the_checker_never_sees():
    """``:distractors=N``: each prompt offers its own tools plus N others (none named as its own,
    distinct, shuffled, the same for the same seed); ``functions`` and the checker are unchanged, and
    a call to a distractor is scored a wrong function."""
    from sglang_pask.eval.checker import check
    from sglang_pask.eval.harness import Settings, build_request

    plain = load_spec("bfcl:simple_python,multiple:eval=10")
    cat = load_spec("bfcl:simple_python,multiple:eval=10:distractors=20")
    assert [e.id for e in cat] == [e.id for e in plain] and parse_spec(
        "bfcl:all:eval=6:distractors=20")["distractors"] == 20
    for e, p in zip(cat, plain):
        assert e.functions == p.functions and e.ground_truth == p.ground_truth and not p.tools
        names = [f["name"] for f in e.tools]
        own = {f["name"] for f in e.functions}
        assert len(names) == len(set(names)) == len(own) + 20 and own <= set(names)
        req, name_map = build_request(e, Settings())
        assert len(req.tools) == len(own) + 20 and set(name_map.values()) == set(names)
    assert any([f["name"] for f in e.tools][:len(e.functions)] != [f["name"] for f in e.functions] for e in cat)
    assert load_spec("bfcl:simple_python,multiple:eval=10:distractors=20") == cat  # deterministic
    assert load_spec("bfcl:simple_python,multiple:eval=10:seed=1:distractors=20") != cat
    e = cat[0]
    wrong = next(f["name"] for f in e.tools if f["name"] not in {g["name"] for g in e.functions})
    assert not check(list(e.functions), [{wrong: {}}], list(e.ground_truth), e.category).valid
    syn = load_spec("synthetic:calib:20:tiny:distractors=5")
    assert all(len(x.tools) == len(x.functions) + 5 for x in syn)


@pytest.mark.parametrize("spec, words", [
    ("synthetic:calib:20:tiny:distractors=0", "distractors='0' must be a positive integer"),
    ("synthetic:calib:20:tiny:group=4:distractors=3", "use one of them"),
    ("bfcl:simple_python:eval=3:distractors=x", "distractors='x' must be a positive integer"),
    ("synthetic:calib:3:tiny:distractors=500", "only"),
])
def test_bad_distractors_are_named(spec, words):
    with pytest.raises(ValueError, match=words):
        load_spec(spec)
