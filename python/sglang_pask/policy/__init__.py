"""Policy files (``policies/*.json``): versioned documents bound to one model's shape.

This release validates the document envelope (existence, JSON, ``"format"``); the full schema
(layer groups, floors, residual shares) arrives with the persistence core.
"""

from sglang_pask.policy.document import FORMAT, PolicyError, load_policy_document

__all__ = ["FORMAT", "PolicyError", "load_policy_document"]
