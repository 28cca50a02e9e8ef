"""The policy file (DESIGN.md §4): schema errors named by field, binding to a model's shape and
config fingerprint, save/load round trip, and ``pask policy prior`` / ``check``."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from conftest import DEFAULT_POLICY, TINY_RANDOM
from sglang_pask.cli import main as pask
from sglang_pask.policy import (
    FORMAT,
    ModelBinding,
    Policy,
    PolicyError,
    load_policy,
    load_policy_document,
    prior_policy,
    save_policy,
)
from sglang_pask.structure import StructClass


@pytest.fixture
def doc() -> dict:
    return json.loads(DEFAULT_POLICY.read_text())


def write(tmp_path, doc) -> str:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _set(path, value):
    def edit(d):
        *head, last = path
        for k in head:
            d = d[k]
        if value is KeyError:
            del d[last]
        else:
            d[last] = value
    return edit


CASES = {
    "floor-high": (_set(["floor", 1, "TOOL_NAME"], 1.5), 'floor[1]["TOOL_NAME"] = 1.5 is outside [0, 1]'),
    "floor-negative": (_set(["floor", 0, "QUERY_VALUE"], -0.1), 'floor[0]["QUERY_VALUE"] = -0.1 is outside [0, 1]'),
    "floor-unknown-class": (_set(["floor", 0, "NOPE"], 0.5), 'floor[0]["NOPE"] names a class not in classes'),
    "share-sum": (_set(["residual_share"], [0.7, 0.7]), "residual_share sums to 1.4, not 1"),
    "share-negative": (_set(["residual_share"], [1.2, -0.2]), "residual_share[1] = -0.2 is not a finite share >= 0"),
    "share-count": (_set(["residual_share"], [1.0]), "residual_share has 1 entries but there are 2 groups"),
    "budget-zero": (_set(["budget"], 0.0), "budget = 0.0 is outside (0, 1]"),
    "budget-high": (_set(["budget"], 1.5), "budget = 1.5 is outside (0, 1]"),
    "sinks": (_set(["sinks"], -1), "sinks = -1 is negative"),
    "window": (_set(["recent_window"], -2), "recent_window = -2 is negative"),
    "sinks-type": (_set(["sinks"], "many"), "sinks: Input should be a valid integer"),
    "unknown-key": (_set(["colour"], "red"), "unknown key 'colour'"),
    "unknown-nested-key": (_set(["model", "dtype"], "bf16"), "unknown key 'dtype' in model"),
    "missing-calibration": (_set(["calibration"], KeyError), "calibration: missing required key"),
    "bad-class": (_set(["classes", 0], "NOPE"), "classes[0] = 'NOPE' is not a structural class"),
    "groups": (_set(["groups"], [[0, 2], [1, 3]]), "groups = [[0, 2], [1, 3]] must split layers 0..3"),
    "groups-short": (_set(["groups"], [[0, 1], [2]]), "must split layers 0..3 into consecutive"),
    "priority": (_set(["priority", 1], ["TOOL_NAME"]), "priority[1] must order exactly the policy's classes"),
    "format": (_set(["format"], "pask-policy/3"), "has unknown format 'pask-policy/3'"),
    "calibration-groups": (_set(["calibration"], {
        "data": "synthetic", "split": "calib", "samples": 10, "sensitivity": [{}],
        "distortion": [{}, {}], "tool_version": "0", "date": "2026-11-29"}),
        "calibration.sensitivity has 1 entries but there are 2 groups"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_schema_errors_name_the_field(tmp_path, doc, case):
    edit, problem = CASES[case]
    edit(doc)
    path = write(tmp_path, doc)
    with pytest.raises(PolicyError) as e:
        load_policy(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"policy file {path!r}"), msg
    assert problem in msg, msg


def test_default_policy_is_a_bound_prior(doc):
    p = load_policy(DEFAULT_POLICY, model_dir=TINY_RANDOM)
    assert p.calibration is None and doc["calibration"] is None
    assert p.format == FORMAT and p.groups == [[0, 1], [2, 3]] and p.budget == 0.33
    assert p.model.shape() == "layers=4 kv_heads=2 head_dim=32 vocab=4096"
    assert load_policy_document(DEFAULT_POLICY)["format"] == FORMAT  # the envelope API stays


def test_binding_to_another_shape_names_both(tmp_path, doc):
    doc["model"].update(num_layers=8, vocab_size=32000)
    doc["groups"] = [[0, 1, 2, 3], [4, 5, 6, 7]]
    path = write(tmp_path, doc)
    load_policy(path)  # valid on its own
    with pytest.raises(PolicyError) as e:
        load_policy(path, model_dir=TINY_RANDOM)
    assert str(e.value) == (
        f"policy file {path!r} is for a model of shape layers=8 kv_heads=2 head_dim=32 vocab=32000, "
        f"but model {str(TINY_RANDOM)!r} has shape layers=4 kv_heads=2 head_dim=32 vocab=4096")


def test_binding_checks_the_config_fingerprint(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    cfg = json.loads((TINY_RANDOM / "config.json").read_text())
    cfg["intermediate_size"] = 512  # same KV shape, another architecture
    (model / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PolicyError, match="fingerprint .* but model .* has sha256:"):
        load_policy(DEFAULT_POLICY, model_dir=model)
    cfg = json.loads((TINY_RANDOM / "config.json").read_text())
    cfg["transformers_version"], cfg["dtype"] = "9.9.9", "float32"  # bookkeeping: same fingerprint
    (model / "config.json").write_text(json.dumps(cfg))
    load_policy(DEFAULT_POLICY, model_dir=model)
    with pytest.raises(PolicyError, match="cannot check its model binding: model directory .* no config.json"):
        load_policy(DEFAULT_POLICY, model_dir=tmp_path)


def test_save_load_round_trip_and_lookups(tmp_path):
    binding = ModelBinding.from_model(TINY_RANDOM)
    p = prior_policy(binding, [[0], [1, 2, 3]], 0.5, sinks=2, recent_window=8, name="x")
    save_policy(p, tmp_path / "p.json")
    q = load_policy(tmp_path / "p.json", model_dir=TINY_RANDOM)
    assert q == p
    floors, ranks = q.floor_table(), q.rank_table()
    assert floors.shape == ranks.shape == (2, len(StructClass))
    assert floors[1, StructClass.TOOL_NAME] == 1.0 and floors[0, StructClass.QUERY_VALUE] == 0.5
    assert floors[0, StructClass.QUERY_TEXT] == 0.0
    assert ranks[0, StructClass.TEMPLATE_SPECIAL] == 0 and sorted(ranks[1]) == list(range(len(StructClass)))


def test_calibrated_record_is_accepted(tmp_path, doc):
    doc["calibration"] = {"data": "synthetic-v1", "split": "calib", "samples": 200,
                          "sensitivity": [{"TOOL_NAME": 0.4}, {"TOOL_NAME": 0.1}],
                          "distortion": [{"0.33": 0.2}, {"0.33": 0.05}], "tool_version": "0.1.0",
                          "date": "2026-11-29", "seed": 0}
    p = load_policy(write(tmp_path, doc), model_dir=TINY_RANDOM)
    assert p.calibration.samples == 200


def test_cli_prior_writes_the_committed_default(tmp_path, capsys):
    out = tmp_path / "prior.json"
    rc = pask(["policy", "prior", "--model", str(TINY_RANDOM), "--groups", "2", "--budget", "0.33",
               "--out", str(out), "--name", "tiny-random-qwen3.prior"])
    assert rc == 0 and "calibration null" in capsys.readouterr().out
    assert json.loads(out.read_text()) == json.loads(DEFAULT_POLICY.read_text()), \
        "policies/tiny-random-qwen3.prior.json is stale: regenerate it with this command"
    assert pask(["policy", "check", str(out), "--model", str(TINY_RANDOM)]) == 0


def test_cli_prior_refuses_bad_arguments(tmp_path, capsys):
    args = ["policy", "prior", "--model", str(TINY_RANDOM), "--out", str(tmp_path / "x.json")]
    assert pask(args + ["--groups", "5", "--budget", "0.3"]) == 2
    assert "--groups must be between 1 and the model's 4 layers, got 5" in capsys.readouterr().err
    assert pask(args + ["--groups", "2", "--budget", "1.3"]) == 2
    assert "budget = 1.3 is outside (0, 1]" in capsys.readouterr().err
    assert pask(["policy", "prior", "--model", str(tmp_path), "--groups", "1", "--budget", "0.3",
                 "--out", str(tmp_path / "y.json")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_cli_check_reports_one_line(tmp_path, doc, capsys):
    doc["sinks"] = -3
    assert pask(["policy", "check", write(tmp_path, doc)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.endswith("sinks = -3 is negative")


def test_prior_groups_split_evenly():
    from sglang_pask.policy.prior import even_groups

    assert even_groups(4, 2) == [[0, 1], [2, 3]]
    assert even_groups(7, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert even_groups(36, 6)[5] == list(range(30, 36))
    with pytest.raises(ValueError):
        even_groups(4, 0)


def test_policy_is_usable_by_pask(doc):
    from sglang_pask.methods import CacheView, make_method

    p = Policy.model_validate(copy.deepcopy(doc))
    T = 64
    view = CacheView(4, p.groups, T, np.full(T, StructClass.QUERY_TEXT), [np.arange(T)] * 4)
    sel = make_method("pask", policy=p).select(view)
    assert sum(len(k) for k in sel.kept) <= view.budget_slots(0.33)


def test_attention_blend_is_left_out_at_zero_and_named_when_out_of_range(tmp_path, doc):
    from sglang_pask.policy.digest import policy_hash

    plain = Policy.model_validate(doc)
    assert plain.residual is None and not {"residual", "attention_blend"} & set(plain.document())
    zero = Policy.model_validate({**doc, "attention_blend": 0.0})
    assert policy_hash(zero) == policy_hash(plain)  # the pure lookup hashes as before the field
    save_policy(zero, tmp_path / "z.json")
    assert "attention_blend" not in json.loads((tmp_path / "z.json").read_text())
    half = Policy.model_validate({**doc, "attention_blend": 0.5})
    assert policy_hash(half) != policy_hash(plain)
    save_policy(half, tmp_path / "h.json")
    assert load_policy(tmp_path / "h.json").residual.blend == 0.5
    with pytest.raises(PolicyError, match=r"attention_blend = 1.5 is outside \[0, 1\]"):
        load_policy(write(tmp_path, {**doc, "attention_blend": 1.5}))


def test_the_server_serves_an_attention_informed_policy_from_window_statistics(tmp_path, doc):
    from sglang_pask.srt.serving import build_config

    config = build_config(write(tmp_path, {**doc, "attention_blend": 0.5}))
    assert config.method.needs_attention == "window" and config.method.residual.blend == 0.5
    assert build_config(write(tmp_path, doc)).method.needs_attention is None


def test_a_blend_needs_its_statistic_and_the_server_serves_each(tmp_path, doc):
    """The statistic and the head split need a blend; a policy whose blend reads KVzip's scores
    (the server's reconstruction forward, srt/attention/reconstruct.py) or the window per KV head
    (head_split) is served, each reading its statistic."""
    from sglang_pask.srt.serving import build_config

    for extra in ({"attention_stat": "kvzip"}, {"head_split": True}):
        with pytest.raises(ValueError, match="need attention_blend > 0"):
            load_policy(write(tmp_path, {**doc, **extra}))
    for extra in ({"attention_stat": "kvzip"}, {"attention_stat": "kvzip", "head_split": True}):
        assert build_config(write(tmp_path, {**doc, **extra, "attention_blend": 0.5})
                            ).method.needs_attention == "kvzip_heads"
    assert build_config(write(tmp_path, {**doc, "head_split": True, "attention_blend": 0.5})
                        ).method.needs_attention == "window_heads"
    p = load_policy(write(tmp_path, {**doc, "attention_blend": 0.5, "attention_stat": "kvzip", "head_split": True}))
    assert p.document()["residual"]["stat"] == "kvzip" and p.document()["residual"]["per_head"] is True
    assert "attention_stat" not in load_policy(write(tmp_path, doc)).document()  # defaults stay out of files
