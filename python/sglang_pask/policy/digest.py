"""A policy's identity: the sha256 of its canonical JSON (what run records and report rows key on)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang_pask.policy.schema import Policy


def canonical_json(policy: "Policy") -> str:
    """The policy as JSON with sorted keys, no whitespace, UTF-8 text: equal policies (same
    field values, whatever file layout they were read from) give the same string."""
    return json.dumps(policy.document(), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)


def policy_hash(policy: "Policy") -> str:
    """Hex sha256 of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(policy).encode("utf-8")).hexdigest()
