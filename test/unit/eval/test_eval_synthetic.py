"""Synthetic generator: gold answers score 100% through render -> decode -> BFCL's checker;
determinism (byte-identical files); disjoint splits; knob validation; tiny profile size."""

import collections
import filecmp
import hashlib
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


# ---- grouped (group=K): K consecutive entries share one tools block ---------------------------


def test_group_one_leaves_entries_unchanged():
    for profile in sorted(synthetic.PROFILES):
        for split in synthetic.SPLITS:
            plain = synthetic.generate_rows(split, 12, profile)
            assert synthetic.generate_rows(split, 12, profile, group=1) == plain
            assert synthetic.generate_rows(split, 5, profile, start=7, group=1) == plain[7:]
    # pinned: entries as generated before the knob existed (digest taken from that version)
    (_, p, a), = synthetic.generate_rows("eval", 1, "tiny", start=3)
    assert p["id"] == "synthetic_parallel_multiple_eval_3"
    assert [f["name"] for f in p["function"]] == ["create_hotel", "track_hotel"]
    assert p["question"][0][0]["content"].startswith("Create the hotel with departing Paris, arriving in Tokyo.")
    assert a["ground_truth"][0] == {"create_hotel": {"origin": ["Paris"], "destination": ["Tokyo"]}}
    rows = synthetic.generate_rows("eval", 200, "tiny") + synthetic.generate_rows("train", 200, "bfcl_like")
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    assert digest == "363725b08d9ace755dea169683eb48abb9a161dcdf0ae93d2bbc3cea913606df"


def _query(p: dict) -> str:
    return p["question"][0][0]["content"]


@pytest.mark.parametrize("profile,k", [("tiny", 10), ("bfcl_like", 4), ("tiny", 64)])
def test_grouped_blocks_share_tools(profile, k):
    n = 4 * k + k // 2  # a partial last block too
    rows = synthetic.generate_rows("eval", n, profile, group=k)
    assert len(rows) == n
    blocks = [rows[s : s + k] for s in range(0, n, k)]
    tools_blocks = []
    for b, block in enumerate(blocks):
        cat = synthetic.CATEGORIES[b % 4]
        tools = json.dumps(block[0][1]["function"])
        names = {f["name"] for f in block[0][1]["function"]}
        for j, (c, p, a) in enumerate(block):
            i = b * k + j
            assert c == cat and p["id"] == a["id"] == f"{cat}_eval_g{k}_{i}"
            assert json.dumps(p["function"]) == tools  # byte-identical, same order
            assert {next(iter(g)) for g in a["ground_truth"]} <= names
            assert synthetic._split_of(_query(p)) == "eval"
        if cat == "synthetic_multiple" and k >= 10:  # the called doc varies within a block
            assert len({next(iter(a["ground_truth"][0])) for _, _, a in block}) >= 2
        tools_blocks.append(tools)
    assert len(set(tools_blocks)) == len(tools_blocks)  # blocks differ


def test_grouped_gold_scores_100():
    for e in synthetic.generate("eval", 80, "tiny", group=5):
        assert _score(e, gold_calls(list(e.ground_truth), list(e.functions))).valid, e.id
        assert not _score(e, altered_calls(list(e.ground_truth), list(e.functions))).valid, e.id


def test_grouped_splits_disjoint_and_deterministic():
    rows = {s: synthetic.generate_rows(s, 600, "tiny", group=10) for s in synthetic.SPLITS}
    for s, r in rows.items():
        assert all(synthetic._split_of(_query(p)) == s for _, p, _ in r)
        assert r == synthetic.generate_rows(s, 600, "tiny", group=10)
    queries = {s: {_query(p) for _, p, _ in r} for s, r in rows.items()}
    assert not queries["train"] & queries["calib"] and not queries["train"] & queries["eval"]
    assert not queries["calib"] & queries["eval"]
    # ungrouped entries use other seeds: no grouped entry equals an ungrouped one
    plain = synthetic.generate_rows("eval", 600, "tiny")
    assert not {json.dumps(p["function"]) + _query(p) for _, p, _ in plain} & {
        json.dumps(p["function"]) + _query(p) for _, p, _ in rows["eval"]}
    # queries differ within a block while the docs allow (nearly always)
    dup = sum(len({_query(p) for _, p, _ in rows["eval"][s : s + 10]}) < 10 for s in range(0, 600, 10))
    assert dup <= 3, dup


def test_grouped_prefix_and_start_stable():
    big = synthetic.generate_rows("eval", 200, "tiny", group=10)
    assert synthetic.generate_rows("eval", 20, "tiny", group=10) == big[:20]
    assert synthetic.generate_rows("eval", 23, "tiny", group=10) == big[:23]
    assert synthetic.generate_rows("eval", 31, "tiny", start=17, group=10) == big[17:48]
    assert synthetic.generate_rows("eval", 20, "tiny", group=10, seed=1) != big[:20]
    assert synthetic.generate_rows("eval", 20, "tiny", group=5)[0][1]["function"] != big[0][1]["function"]


def test_grouped_write_dataset(tmp_path):
    synthetic.write_dataset(tmp_path / "g", "calib", 20, "tiny", group=5)
    synthetic.write_dataset(tmp_path / "p", "calib", 20, "tiny")
    assert json.loads((tmp_path / "g" / "config.json").read_text())["group"] == 5
    assert "group" not in json.loads((tmp_path / "p" / "config.json").read_text())
    loaded = load_dir(tmp_path / "g")
    assert sorted(e.id for e in loaded) == sorted(e.id for e in synthetic.generate("calib", 20, "tiny", group=5))


def test_group_validation_and_spec():
    from sglang_pask.eval.data import load_spec, parse_spec

    for bad in (0, 65, -1, 2.0, True):
        with pytest.raises(ValueError, match="group"):
            synthetic.make_config("tiny", group=bad)
    d = parse_spec("synthetic:eval:200:tiny:group=10")
    assert d == {"spec": "synthetic:eval:200:tiny:group=10", "kind": "synthetic", "split": "eval", "n": 200,
                 "profile": "tiny", "group": 10}
    assert parse_spec("synthetic:calib:8:group=4")["profile"] == "bfcl_like"
    assert "group" not in parse_spec("synthetic:eval:20:tiny")
    for bad in ("group=0", "group=65", "group=x", "group="):
        with pytest.raises(ValueError, match=r"group='[^']*' must be an integer in \[1, 64\]"):
            parse_spec(f"synthetic:eval:20:tiny:{bad}")
    with pytest.raises(ValueError, match="unknown or repeated option 'grp'"):
        parse_spec("synthetic:eval:20:tiny:grp=3")
    entries = load_spec("synthetic:eval:12:tiny:group=4")
    assert [e.id for e in entries] == [e.id for e in synthetic.generate("eval", 12, "tiny", group=4)]
    assert entries[0].id == "synthetic_simple_eval_g4_0"


def test_grouped_renders_share_the_system_prefix():
    """Two entries of one block render to the same token ids up to the end of the system message
    (the tools block), for every category; the shared prefix is long."""
    pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    from sglang_pask.rendering import render_chat
    from sglang_pask.structure.testing import TINY_MODEL
    from sglang_pask.tiny.examples import request_body
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TINY_MODEL))
    (im_end,) = tok("<|im_end|>", add_special_tokens=False)["input_ids"]
    k = 10
    entries = synthetic.generate("eval", 4 * k, "tiny", group=k)
    shared = []
    for b in range(4):
        first, other = (render_chat(tok, request_body(e)[0]).token_ids for e in entries[b * k : b * k + 2])
        end = first.index(im_end) + 1
        assert other[:end] == first[:end], entries[b * k].id
        assert other[end:] != first[end:]  # the queries differ
        common = next((t for t, (x, y) in enumerate(zip(first, other)) if x != y), min(len(first), len(other)))
        shared.append((entries[b * k].category, end, common, len(first), len(other)))
    for c, end, common, a, o in shared:
        print(f"{c}: system prefix {end} tokens (common {common}) of {a} / {o}")
    assert min(end for _, end, *_ in shared) > 150  # template (139 tokens) + at least one doc
