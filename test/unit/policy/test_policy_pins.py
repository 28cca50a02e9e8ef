"""What a user runs and what records key on. The shipped set: every file of ``policies/`` (one per
model and budget, each model's prior, the tiny model's learned scorer), pinned by name and sha256
in :data:`SHIPPED`, the one place to change when a shipped policy is replaced (and its
:data:`HASHES` / :data:`RECORDS` rows with it). The variants of the notebook
(``experiments/policies/``) keep their pins too: every policy file keeps its
:func:`~sglang_pask.policy.digest.policy_hash`, and the pask method built from it keeps its
:meth:`~sglang_pask.methods.pask.Pask.record` (keys, values and key order), as computed before PASK's
residual scorer became a composed part (four top-level mode fields -> one ``residual`` block; the
code as it was at b026b85). A file that moves takes its pin along."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest
from conftest import ROOT
from sglang_pask.methods import make_method
from sglang_pask.policy import load_policy, save_policy
from sglang_pask.policy.digest import policy_hash
from sglang_pask.policy.shipped import DEFAULT_BUDGET, shipped_policy

POLICIES = ROOT / "policies"
NOTEBOOK = ROOT / "experiments" / "policies"
OLD_FIELDS = ("attention_blend", "attention_stat", "head_split", "residual_split")

#: the shipped set: file of policies/ -> sha256 of its bytes
SHIPPED = {
    "pask-tiny-fc.b0.5.json": "de615276c0a67ed26cf346c7f0ec7c9a9207222b345a9cb27b2128bc50b5201d",
    "pask-tiny-fc.b0.33.json": "aa30c70c863d9d351ebc830984ce2bc9410318e90b5b93f79c5fce9ff91c6d81",
    "pask-tiny-fc.b0.2.json": "7da904409575fea6c3cc129b8502d6477b7ffbc6567094d8e636f0d6cab08bdf",
    "pask-tiny-fc.prior.json": "95b056caff20127e1df606992f3683cb3ece813531b9c2b1cee5677b69a28331",
    "pask-tiny-fc.kvzap.safetensors": "9bc91edc6a52baf3ab40d203b3db3b1f88216655576c23d7bb9256ff0cd8707b",
    "qwen2.5-coder-0.5b-instruct.b0.33.json": "57d23b04155b3833e5e0d179699be73e180b2180b8243535658a5e84fdc9fc64",
    "qwen2.5-coder-0.5b-instruct.b0.2.json": "38244d261dbe6063800826bf43fff501cd64f9e81fb2554119273331c7e196b1",
    "qwen2.5-coder-0.5b-instruct.prior.json": "cabcbb8dfa273ff36e41e9a9a91d74e7b05bf77c4b4c4d070dca61dceaeda8b0",
    "tiny-random-qwen3.prior.json": "8df6a620e09ee287393bc2cae77618af158a263d508a1b72e2e42cb228c245ce",
}


def _path(name: str) -> Path:
    return (POLICIES if name in SHIPPED else NOTEBOOK) / name


#: file -> policy_hash, as computed before the residual block existed
HASHES = {
    "pask-tiny-fc.attn.b0.2.json": "743886c332487bb768aa51144dfd96b268dffaf947588eaaefa3645e677adcea",
    "pask-tiny-fc.attn.b0.33.json": "0a5f4a0831d145607b402fe42b13a1c59651f073f5fa95633929ff194eded826",
    "pask-tiny-fc.attn.b0.5.json": "a68b04dace8c4180d8e717974230d325850181e981b9077697a939da7260c33e",
    "pask-tiny-fc.lookup.b0.2.json": "b7c38215ca9509cf67f332b3458067d6b584fbf71c53a3cb787996661f362a09",
    "pask-tiny-fc.lookup.b0.33.json": "21b104394517c52296d0bd3dfd771c15e3d8589d08b11d806aef0ba3772f279f",
    "pask-tiny-fc.lookup.b0.5.json": "eb7ce2927b0fab8ef56cbb6c7c39fc434bd7c48093092da8cbd7439a2750bac6",
    # the learned-scorer policies (written with the residual block; the shipped 0.5, 0.33 and 0.2 ones of them)
    "pask-tiny-fc.b0.5.json": "56572bd396bc9804640cff2eae323eb159aa09430fcdfdcb9f3d25bc6994456c",
    "pask-tiny-fc.b0.2.json": "cb903e004aebdc00838898fd89fb3260c3e45bb556c6d3e4e180bb8497251b05",
    "pask-tiny-fc.b0.33.json": "bebc56834b66152a8c28777b6779871b13ae7ea66ef958dc0e4f24a4ed110198",
    "pask-tiny-fc.learned.b0.5.json": "3edebb3808a4cd943af7434c33d86a47b9c79d06473db004cecf8467ac01dcb7",
    "pask-tiny-fc.learned.b0.33.json": "ca577c00979e441c1d3d7d83c409fc00a0178f948e7cb4b0df6ba15f06c823e1",
    "pask-tiny-fc.learned-heads.b0.5.json": "b690bee4bafc0e8f2b573097cff4be329949d855a5cc30adeaddff8a60f03de3",
    "pask-tiny-fc.learned-heads.b0.33.json": "517e6e8c2ad65176e24ea2068251f1a67e6cdf1b0aa5218458bd57f85cf94681",
    "pask-tiny-fc.learned-heads.b0.2.json": "c7818500a1af1995e82145938da2f196c953c547764d310776e07225e47d4119",
    "pask-tiny-fc.prior.json": "05536908d402f61a855a61ca079a91173944df7cd212345f5fdf999b50bf2566",
    "pask-tiny-fc.ranked.b0.2.json": "cf5377dfd2e408f1d0734accaed9e59a5ce98c96a49c245ca8c277c5994370f7",
    "pask-tiny-fc.ranked033.b0.33.json": "f629e2b7d39e9e27605028591be870812877a889b45492281508c464bcc79259",
    "pask-tiny-fc.segment.b0.33.json": "92911b02dff47758bff91680772e2bd08cf5d49a139e74d4767a30dbe861c8b0",
    "pask-tiny-fc.sturdy-attn.b0.2.json": "6fe8303bb22262a76de0ba2b051ea4b4c683819301a366a527ed3ed9de6fc4e5",
    "pask-tiny-fc.sturdy-attn.b0.33.json": "95ce451c94a19acb1b9483958519c9c0ca53ea6e9bbd1fe6ae084e6ff4bd1ad2",
    "pask-tiny-fc.sturdy-attn.b0.5.json": "90dad78e38724c732e5a1bdc3c59cb21cdf7c179a08ae50ee0c65adce7972401",
    "pask-tiny-fc.sturdy.b0.33.json": "0c21d5bfe84d8714e9013ee1f70844dc00cb1828767d6c0b3a8a36bf17d75450",
    "pask-tiny-fc.sturdy.b0.5.json": "c50042ed0e28b666f14108c39037c2134e55bc3605e3911d0165711efe5558ce",
    "qwen2.5-coder-0.5b-instruct.b0.2.json": "111a11e5a9d9ed47be19343f38d391e80943c1517cb483459aa9218f204af41b",
    # the real model's learned-residual 0.33 policy (its calibration named it as the shipped one)
    "qwen2.5-coder-0.5b-instruct.learned.b0.33.json":
        "70c4cc5d27df8568b040bd67201ff30af9007cb3a32fbaafa7796f2d8d527543",
    # the same with its measured pools block (`pask policy pools`; the hash leaves pools out)
    "qwen2.5-coder-0.5b-instruct.learned-pools.b0.33.json":
        "70c4cc5d27df8568b040bd67201ff30af9007cb3a32fbaafa7796f2d8d527543",
    "qwen2.5-coder-0.5b-instruct.b0.33.json": "901c58ab967e455b7a468b6de4d3b420a7e2af08c748a19e96850bcb429ad4cd",
    "qwen2.5-coder-0.5b-instruct.prior.json": "dce9eac874f161fb9054b662513ce72da159248e039b7b0dce5b0839aa6f5cd0",
    "tiny-random-qwen3.prior.json": "0b583ba6d796e4b5a4e97b91df4798335fb3d2fae6736f570d64b09f9d6c226a",
}

SCORER_SHA = SHIPPED["pask-tiny-fc.kvzap.safetensors"]
#: file -> make_method("pask", policy=<file>).record() as (key, value) pairs in record order, the
#: "policy" entry's value left out (it is {"name": <the policy's name>, "sha256": HASHES[file]}), a
#: learned scorer's path relative to the repository
RECORDS = {
    "pask-tiny-fc.attn.b0.2.json": [("name", "pask"), ("budget", 0.2), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc.attn@0.2"), ("span_delimiters", True)],
    "pask-tiny-fc.attn.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc.attn@0.33"), ("span_delimiters", True), ("attention_blend", 0.25)],
    "pask-tiny-fc.attn.b0.5.json": [("name", "pask"), ("budget", 0.5), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc.attn@0.5"), ("span_delimiters", True)],
    "pask-tiny-fc.lookup.b0.2.json": [("name", "pask"), ("budget", 0.2), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc@0.2"), ("span_delimiters", True)],
    "pask-tiny-fc.lookup.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc@0.33"), ("span_delimiters", True)],
    "pask-tiny-fc.lookup.b0.5.json": [("name", "pask"), ("budget", 0.5), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc@0.5"), ("span_delimiters", True)],
    "pask-tiny-fc.b0.2.json": [("name", "pask"), ("budget", 0.2), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc@0.2"), ("span_delimiters", True),
        ("scorer", "policies/pask-tiny-fc.kvzap.safetensors"), ("scorer_sha256", SCORER_SHA),
        ("attention_blend", 0.25), ("attention_stat", "learned")],
    "pask-tiny-fc.learned.b0.5.json": [("name", "pask"), ("budget", 0.5), ("schedule", "prefill"),
        ("interval", 1),         ("policy", "pask-tiny-fc.learned@0.5"), ("span_delimiters", True),
        ("scorer", "experiments/policies/pask-tiny-fc.kvzap.safetensors"), ("scorer_sha256", SCORER_SHA),
        ("attention_blend", 0.5), ("attention_stat", "learned")],
    "pask-tiny-fc.learned.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"),
        ("interval", 1),         ("policy", "pask-tiny-fc.learned@0.33"), ("span_delimiters", True),
        ("scorer", "experiments/policies/pask-tiny-fc.kvzap.safetensors"), ("scorer_sha256", SCORER_SHA),
        ("attention_blend", 0.75), ("attention_stat", "learned")],
    "pask-tiny-fc.learned-heads.b0.5.json": [("name", "pask"), ("budget", 0.5), ("schedule", "prefill"),
        ("interval", 1),         ("policy", "pask-tiny-fc.learned-heads@0.5"), ("span_delimiters", True),
        ("scorer", "experiments/policies/pask-tiny-fc.kvzap.safetensors"), ("scorer_sha256", SCORER_SHA),
        ("attention_blend", 0.5), ("attention_stat", "learned"), ("head_split", True),
        ("residual_split", "scores")],
    "pask-tiny-fc.learned-heads.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"),
        ("interval", 1),         ("policy", "pask-tiny-fc.learned-heads@0.33"), ("span_delimiters", True),
        ("scorer", "experiments/policies/pask-tiny-fc.kvzap.safetensors"), ("scorer_sha256", SCORER_SHA),
        ("attention_blend", 0.5), ("attention_stat", "learned"), ("head_split", True),
        ("residual_split", "scores")],
    "pask-tiny-fc.learned-heads.b0.2.json": [("name", "pask"), ("budget", 0.2), ("schedule", "prefill"),
        ("interval", 1),         ("policy", "pask-tiny-fc.learned-heads@0.2"), ("span_delimiters", True),
        ("scorer", "experiments/policies/pask-tiny-fc.kvzap.safetensors"), ("scorer_sha256", SCORER_SHA),
        ("attention_blend", 0.5), ("attention_stat", "learned"), ("head_split", True),
        ("residual_split", "scores")],
    "pask-tiny-fc.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc@0.33"), ("span_delimiters", True),
        ("scorer", "policies/pask-tiny-fc.kvzap.safetensors"), ("scorer_sha256", SCORER_SHA),
        ("attention_blend", 0.75), ("attention_stat", "learned")],
    "pask-tiny-fc.b0.5.json": [("name", "pask"), ("budget", 0.5), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc@0.5"), ("span_delimiters", True),
        ("scorer", "policies/pask-tiny-fc.kvzap.safetensors"), ("scorer_sha256", SCORER_SHA),
        ("attention_blend", 0.5), ("attention_stat", "learned")],
    "qwen2.5-coder-0.5b-instruct.learned.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"),
        ("interval", 1), ("policy", "qwen2.5-coder-0.5b-instruct@0.33"), ("span_delimiters", True),
        ("scorer", "experiments/policies/qwen2.5-coder-0.5b-instruct.kvzap.safetensors"),
        ("scorer_sha256", "aa061d60d092b7f0f5d52f70da451b3d00116af6d45b9eb28ae8890ae2a1dce6"),
        ("attention_blend", 0.5), ("attention_stat", "learned")],
    "qwen2.5-coder-0.5b-instruct.learned-pools.b0.33.json": [("name", "pask"), ("budget", 0.33),
        ("schedule", "prefill"),
        ("interval", 1), ("policy", "qwen2.5-coder-0.5b-instruct@0.33"), ("span_delimiters", True),
        ("scorer", "experiments/policies/qwen2.5-coder-0.5b-instruct.kvzap.safetensors"),
        ("scorer_sha256", "aa061d60d092b7f0f5d52f70da451b3d00116af6d45b9eb28ae8890ae2a1dce6"),
        ("attention_blend", 0.5), ("attention_stat", "learned")],
    "pask-tiny-fc.prior.json": [("name", "pask"), ("budget", 0.33), ("schedule", "continuous"), ("interval", 1),
        ("policy", None), ("span_delimiters", True)],
    "pask-tiny-fc.ranked.b0.2.json": [("name", "pask"), ("budget", 0.2), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc.ranked@0.2"), ("span_delimiters", True), ("attention_blend", 0.5),
        ("attention_stat", "kvzip"), ("head_split", True), ("residual_split", "scores")],
    "pask-tiny-fc.ranked033.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"),
        ("interval", 1), ("policy", "pask-tiny-fc.ranked033@0.33"), ("span_delimiters", True),
        ("attention_blend", 0.75), ("attention_stat", "kvzip"), ("head_split", True), ("residual_split", "scores")],
    "pask-tiny-fc.segment.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc.segment@0.33"), ("span_delimiters", True)],
    "pask-tiny-fc.sturdy-attn.b0.2.json": [("name", "pask"), ("budget", 0.2), ("schedule", "prefill"),
        ("interval", 1), ("policy", "pask-tiny-fc.sturdy-attn@0.2"), ("span_delimiters", True)],
    "pask-tiny-fc.sturdy-attn.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"),
        ("interval", 1), ("policy", "pask-tiny-fc.sturdy-attn@0.33"), ("span_delimiters", True),
        ("attention_blend", 0.25), ("attention_stat", "kvzip")],
    "pask-tiny-fc.sturdy-attn.b0.5.json": [("name", "pask"), ("budget", 0.5), ("schedule", "prefill"),
        ("interval", 1), ("policy", "pask-tiny-fc.sturdy-attn@0.5"), ("span_delimiters", True),
        ("attention_blend", 0.25), ("head_split", True)],
    "pask-tiny-fc.sturdy.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc.sturdy@0.33"), ("span_delimiters", True)],
    "pask-tiny-fc.sturdy.b0.5.json": [("name", "pask"), ("budget", 0.5), ("schedule", "prefill"), ("interval", 1),
        ("policy", "pask-tiny-fc.sturdy@0.5"), ("span_delimiters", True)],
    "qwen2.5-coder-0.5b-instruct.b0.2.json": [("name", "pask"), ("budget", 0.2), ("schedule", "prefill"),
        ("interval", 1), ("policy", "qwen2.5-coder-0.5b-instruct@0.2"), ("span_delimiters", True)],
    "qwen2.5-coder-0.5b-instruct.b0.33.json": [("name", "pask"), ("budget", 0.33), ("schedule", "prefill"),
        ("interval", 1), ("policy", "qwen2.5-coder-0.5b-instruct@0.33"), ("span_delimiters", True)],
    "qwen2.5-coder-0.5b-instruct.prior.json": [("name", "pask"), ("budget", 0.33), ("schedule", "continuous"),
        ("interval", 1), ("policy", None), ("span_delimiters", True)],
    "tiny-random-qwen3.prior.json": [("name", "pask"), ("budget", 0.33), ("schedule", "continuous"), ("interval", 1),
        ("policy", "tiny-random-qwen3.prior"), ("span_delimiters", True)],
}


def test_policies_holds_the_shipped_set_only():
    """policies/ is the shipped set, byte for byte; each calibrated model's default is there."""
    assert {p.name for p in POLICIES.iterdir()} == set(SHIPPED)
    for name, sha in SHIPPED.items():
        assert hashlib.sha256((POLICIES / name).read_bytes()).hexdigest() == sha, f"policies/{name} changed"
    for model in ("models/pask-tiny-fc", "models/qwen2.5-coder-0.5b-instruct"):
        assert (ROOT / shipped_policy(model)).is_file(), model
        assert load_policy(ROOT / shipped_policy(model)).budget == DEFAULT_BUDGET
    assert shipped_policy("models/pask-tiny-fc/", 0.2) == "policies/pask-tiny-fc.b0.2.json"


def test_every_policy_file_is_pinned():
    files = {p.name for folder in (POLICIES, NOTEBOOK) for p in folder.glob("*.json")
             if "groups" in json.loads(p.read_text())}
    assert files == set(HASHES) == set(RECORDS)


@pytest.mark.parametrize("name", sorted(HASHES))
def test_policy_hash_is_what_it_was(name):
    assert policy_hash(load_policy(_path(name))) == HASHES[name]


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_pask_record_is_what_it_was(name):
    policy = load_policy(_path(name))
    record = make_method("pask", policy=policy).record()
    assert record["policy"] == {"name": policy.name, "sha256": HASHES[name]}
    assert [(k, policy.name if k == "policy" else os.path.relpath(v, ROOT) if k == "scorer" else v)
            for k, v in record.items()] == RECORDS[name]
    assert make_method(**{**record, "policy": policy}) == make_method("pask", policy=policy)


@pytest.mark.parametrize("name", sorted(n for n in HASHES if any(k in json.loads(_path(n).read_text())
                                                                    for k in OLD_FIELDS)))
def test_an_old_file_loads_with_one_warning_and_its_conversion_hashes_the_same(name, tmp_path, caplog, monkeypatch):
    from sglang_pask.environ import envs

    monkeypatch.delenv(envs.SGLANG_PASK_OLD_POLICY_WARNED.name, raising=False)
    with caplog.at_level(logging.WARNING, logger="sglang_pask"):
        policy = load_policy(_path(name))
        load_policy(_path(name))  # once per file
    lines = [r.getMessage() for r in caplog.records if "residual" in r.getMessage()]
    assert len(lines) == 1 and name in lines[0] and '"residual": {' in lines[0]
    save_policy(policy, tmp_path / name)
    doc = json.loads((tmp_path / name).read_text())
    assert "residual" in doc and not set(OLD_FIELDS) & set(doc)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sglang_pask"):
        converted = load_policy(tmp_path / name)
    assert not caplog.records  # the new block: nothing to say
    assert converted == policy and policy_hash(converted) == HASHES[name]


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_report_options_are_what_they_were(name):
    """Report rows and labels (``pask[attention_blend=0.25]``) read a method's options from its
    record: the old residual keywords stay options though they are no longer fields (and a learned
    scorer's file and pin are options too)."""
    from sglang_pask.eval.records import method_options

    method = make_method("pask", policy=load_policy(_path(name)))
    options = [(k, os.path.relpath(v, ROOT) if k == "scorer" else v) for k, v in method_options(method).items()]
    assert options == [(k, v) for k, v in RECORDS[name] if k in (*OLD_FIELDS, "scorer", "scorer_sha256")]
