"""Ablations of a compiled policy (issue 11's report): the same policy with one part taken out.

* ``floors-only``: the residual is no longer steered by the calibration (D and the depth tilt):
  ``residual_share`` equal across groups; floors, priorities, sinks and window unchanged;
* ``residual-only``: no protection floors (every ``floor`` 0); the residual shares, priorities,
  sinks and window unchanged.

The third ablation of the report, "without span delimiters", is a method option
(``pask:span_delimiters=false``), not a policy; the fourth (one budget's policy at other budgets)
is ``--policy P --budget B``.
"""

from __future__ import annotations

from sglang_pask.policy.schema import Policy

__all__ = ["ABLATIONS", "ablate"]

ABLATIONS = ("floors-only", "residual-only")


def ablate(policy: Policy, variant: str) -> Policy:
    """``policy`` with ``variant`` (one of :data:`ABLATIONS`) applied; name and note say which."""
    if variant not in ABLATIONS:
        raise ValueError(f"unknown ablation {variant!r}; choose one of {', '.join(ABLATIONS)}")
    doc = policy.model_dump(mode="json")
    if variant == "floors-only":
        # imported here: family pulls in torch (via distortion), and the CLI imports this module
        # before it validates paths (test_paths_cli: nothing heavy before a bad-path error)
        from sglang_pask.calibrate.family import residual_shares

        doc["residual_share"] = residual_shares(doc["residual_share"], alpha=0.0)  # equal
    else:
        doc["floor"] = [{c: 0.0 for c in row} for row in doc["floor"]]
    doc["name"] = f"{policy.name or 'policy'}~{variant}"
    doc["note"] = f"ablation {variant} of {policy.name or 'a policy'}" + (f" ({policy.note})" if policy.note else "")
    return Policy.model_validate(doc)
