"""Synthetic generator: gold answers score 100% through render -> decode -> BFCL's checker;
determinism (byte-identical files); disjoint splits; knob validation; tiny profile size."""

import collections
import filecmp
import json

import pytest
from sglang_pask.eval import synthetic
from sglang_pask.eval.bfcl_tools import bfcl_to_openai_tools
from sglang_pask.eval.checker import check
from sglang_pask.eval.data import load_dir
from sglang_pask.eval.decode import decode_text, render_tool_calls
from sglang_pask.eval.testing import altered_calls, gold_calls


def _score(e, calls):
    tools, name_map = bfcl_to_openai_tools(list(e.functions))
    to_openai = {b: o for o, b in name_map.items()}
    dec = decode_text(render_tool_calls([{to_openai[n]: a for n, a in c.items()} for c in calls]), name_map)
    return check(list(e.functions), dec.calls, list(e.ground_truth), e.category)


@pytest.mark.parametrize("profile", sorted(synthetic.PROFILES))
def test_gold_scores_100_and_altered_fails(profile):
    entries = synthetic.generate("eval", 200, profile)
    cats = collections.Counter(e.category for e in entries)
    assert cats == {c: 50 for c in synthetic.CATEGORIES}
    for e in entries:
        assert _score(e, gold_calls(list(e.ground_truth), list(e.functions))).valid, e.id
        assert not _score(e, altered_calls(list(e.ground_truth), list(e.functions))).valid, e.id


def test_entry_shapes():
    for e in synthetic.generate("train", 40):
        n_docs, n_calls = len(e.functions), len(e.ground_truth)
        names = {f["name"] for f in e.functions}
        assert {next(iter(g)) for g in e.ground_truth} <= names
        if e.category == "synthetic_simple":
            assert (n_docs, n_calls) == (1, 1)
        elif e.category == "synthetic_multiple":
            assert n_docs >= 2 and n_calls == 1
        elif e.category == "synthetic_parallel":
            assert n_docs == 1 and n_calls >= 2
        else:
            assert n_docs >= 2 and n_calls >= 2 and len({next(iter(g)) for g in e.ground_truth}) >= 2


def test_same_seed_byte_identical_and_loadable(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    fa = synthetic.write_dataset(a, "calib", 30, "tiny", seed=3)
    synthetic.write_dataset(b, "calib", 30, "tiny", seed=3)
    synthetic.write_dataset(c, "calib", 30, "tiny", seed=4)
    rel = [p.relative_to(a) for p in fa]
    assert all(filecmp.cmp(a / r, b / r, shallow=False) for r in rel)
    assert not all(filecmp.cmp(a / r, c / r, shallow=False) for r in rel if r.name != "config.json")
    loaded = load_dir(a)
    assert sorted(e.id for e in loaded) == sorted(e.id for e in synthetic.generate("calib", 30, "tiny", seed=3))


def test_prefix_stable():
    small = synthetic.generate_rows("eval", 8)
    big = synthetic.generate_rows("eval", 20)
    assert small == big[:8]


def _pair(prompt: dict, answer: dict) -> str:
    """An entry's tools and answer, whatever the query's wording."""
    return json.dumps([prompt["function"], answer["ground_truth"]], sort_keys=True)


@pytest.fixture(scope="module")
def tiny_splits() -> dict[str, list]:
    """The tiny profile's splits as generated: 20,000 train entries (the trainer reads train from
    entry 0 on), 2,000 each of calib and eval (published tables use eval's first 200)."""
    return {s: synthetic.generate_rows(s, n, "tiny") for s, n in (("train", 20_000), ("calib", 2_000), ("eval", 2_000))}


def test_splits_never_overlap(tiny_splits):
    queries = {s: [p["question"][0][0]["content"] for _, p, _ in rows] for s, rows in tiny_splits.items()}
    train = set(queries["train"])
    for held_out in ("calib", "eval"):
        leaked = [q for q in queries[held_out] if q in train]
        assert not leaked, f"{len(leaked)} {held_out} queries occur in train, e.g. {leaked[0]!r}"
    assert not set(queries["calib"]) & set(queries["eval"])


@pytest.mark.xfail(strict=True, reason=(
    "measured: 2 calib and 2 eval entries of the first 2,000 (all synthetic_simple) have the tools and "
    "answer of one of the first 20,000 train entries under another query wording: the split rule hashes "
    "the query only. Eval's first 200 are clean against all 256,000 train entries the shipped model saw; "
    "calib's first 200 are not (3)."))
def test_held_out_tools_and_answers_never_in_train(tiny_splits):
    train = {_pair(p, a) for _, p, a in tiny_splits["train"]}
    for held_out in ("calib", "eval"):
        leaked = [p["id"] for _, p, a in tiny_splits[held_out] if _pair(p, a) in train]
        assert not leaked, f"{len(leaked)} {held_out} entries have a train entry's tools and answer: {leaked[:3]}"


def test_knob_validation():
    with pytest.raises(ValueError, match="unknown synthetic knobs"):
        synthetic.make_config("bfcl_like", n_parmas=(1, 2))
    with pytest.raises(ValueError, match="p_synonym"):
        synthetic.make_config("bfcl_like", p_synonym=1.5)
    with pytest.raises(ValueError, match="n_functions"):
        synthetic.make_config("bfcl_like", n_functions=(2, 500))
    with pytest.raises(ValueError, match="profile"):
        synthetic.make_config("huge")
    with pytest.raises(ValueError, match="kinds"):
        synthetic.make_config("bfcl_like", kinds=("bool",))
    with pytest.raises(ValueError, match="split"):
        synthetic.generate("test", 3)


def test_knobs_take_effect():
    entries = synthetic.generate(
        "eval", 40, kinds=("int",), n_params=(1, 1), p_dotted=1.0, categories=("synthetic_simple",)
    )
    for e in entries:
        (f,) = e.functions
        assert "." in f["name"]
        (p,) = f["parameters"]["properties"].values()
        assert p["type"] == "integer"


def test_tiny_is_short_and_uses_synonyms():
    import json

    sizes = []
    for _, p, _a in synthetic.generate_rows("train", 200, "tiny"):
        q = p["question"][0][0]["content"]
        sizes.append(len(q) + sum(len(json.dumps(f)) for f in p["function"]))
        for f in p["function"]:
            assert "." not in f["name"] and "Default is" not in json.dumps(f)
        assert len(p["function"]) <= 2
        for call in _a["ground_truth"]:
            for params in call.values():
                for param, allowed in params.items():
                    if "" not in allowed:  # set by the query: named only by a synonym
                        assert param.replace("_", " ") not in q.lower(), (p["id"], param, q)
    sizes.sort()
    assert sizes[len(sizes) // 2] < 700 and sizes[-1] < 1600  # docs + query chars (template excluded)
