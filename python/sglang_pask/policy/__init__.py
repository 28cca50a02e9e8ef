"""Policy files (``policies/*.json``): the per-model persistence table of DESIGN.md §4.

One pydantic model (:class:`Policy`, ``"format": "pask-policy/2"``, with the operating point it
must run at), bound to a model's shape and
config fingerprint (:class:`ModelBinding`). :func:`load_policy` checks envelope, schema and (with
``model_dir``) binding, raising a one-line :class:`PolicyError`; :func:`save_policy` writes one;
:func:`prior_policy` builds an uncalibrated structure prior (``pask policy prior``).
"""

from sglang_pask.policy.document import (
    FORMAT,
    PolicyError,
    check_binding,
    load_policy,
    load_policy_document,
    save_policy,
)

__all__ = [
    "FORMAT", "ModelBinding", "Policy", "PolicyError", "check_binding", "load_policy",
    "load_policy_document", "prior_policy", "save_policy",
]


def __getattr__(name):  # the schema pulls pydantic + numpy: only when asked for
    if name == "Policy":
        from sglang_pask.policy.schema import Policy

        return Policy
    if name == "ModelBinding":
        from sglang_pask.policy.binding import ModelBinding

        return ModelBinding
    if name == "prior_policy":
        from sglang_pask.policy.prior import prior_policy

        return prior_policy
    raise AttributeError(name)
