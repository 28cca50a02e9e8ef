"""A policy's identity: the sha256 of its canonical JSON (what run records and report rows key on)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from sglang_pask.policy.residual import legacy_fields

if TYPE_CHECKING:
    from sglang_pask.policy.schema import Policy


def canonical_json(policy: "Policy") -> str:
    """The policy as JSON with sorted keys, no whitespace, UTF-8 text: equal policies (same
    field values, whatever file layout they were read from) give the same string.

    The ``residual`` block is hashed in its old spelling, the top-level fields
    ``attention_blend`` / ``attention_stat`` / ``head_split`` / ``residual_split`` each left out at
    its default (:func:`~.residual.legacy_fields`), and a pinned learned scorer by its sha256 alone
    (``residual_scorer_sha256``; not its file name): a file written before the block existed and
    its conversion give the same string, and so the same :func:`policy_hash`, which run records
    and report rows key on. A new field that changes what a policy does must be added to the
    string; one that is left out at its default keeps every older policy's hash. The measured
    ``pools`` block is left out: it sizes the server's pools and changes no kept set, so a policy
    measured after it was run keeps the records of those runs."""
    doc = policy.document()
    doc.pop("pools", None)
    block = doc.pop("residual", None)
    doc.update(legacy_fields(block))
    if block and block.get("scorer_sha256"):  # the scorer's bytes, not where the file lies
        doc["residual_scorer_sha256"] = block["scorer_sha256"]
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def policy_hash(policy: "Policy") -> str:
    """Hex sha256 of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(policy).encode("utf-8")).hexdigest()
