"""The residual scorer's settings: a policy's optional ``"residual"`` block (DESIGN.md §5).

PASK is two parts (:class:`~sglang_pask.methods.pask.Pask`): the lookup (anchors, floors, class
priority, delimiters, water-filling) and, optionally, a **residual scorer** that re-ranks the
residual tier by an attention statistic. A policy names its scorer in one block::

    "residual": {"blend": 0.5, "stat": "kvzip", "per_head": true, "split": "scores"}

* ``blend`` ``beta`` in (0, 1] in a file (the block is left out for the pure lookup): the residual's
  score is ``(1 - beta) * class order + beta * votes``;
* ``stat``: which statistic votes (:data:`STATS`: ``window``, SnapKV's observation-window votes;
  ``kvzip``, KVzip's context-reconstruction scores; ``learned``, a learned scorer's prediction of
  them from the hidden states, :mod:`sglang_pask.methods.learned`, no extra forward);
* ``per_head``: one kept set per KV head, each ranking its residual by its own votes;
* ``split``: how the residual is split across groups (:data:`SPLITS`: ``share``, by
  ``residual_share``; ``scores``, by one ranking of every group's and head's candidates).

:func:`check` is the one validator of these values (the file block and the method's scorer both
call it). Files written before the block spelled it as four top-level fields (:data:`LEGACY`:
``attention_blend``, ``attention_stat``, ``head_split``, ``residual_split``, each left out at its
default); :func:`from_legacy` reads them, and :func:`legacy_fields` gives a block's old spelling,
which is what a policy's hash is computed from (:mod:`.digest`), so a file and its conversion hash
the same.

Standard library only.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

#: the statistics a residual scorer may read (one entry each in ``methods/residual.py``)
STATS = ("window", "kvzip", "learned")
#: how the residual is split across groups
SPLITS = ("share", "scores")
#: the block's keys with their defaults (``blend`` has none in a file)
DEFAULTS = {"blend": 0.0, "stat": "window", "per_head": False, "split": "share"}
#: the old top-level field of each block key (a pask method's ``record()`` still writes these)
LEGACY = {"blend": "attention_blend", "stat": "attention_stat", "per_head": "head_split", "split": "residual_split"}


class ResidualError(ValueError):
    """An invalid residual setting. ``field`` is the block key at fault; :meth:`named` words the
    message with other names for the keys (the old field names, a ``residual.`` prefix)."""

    def __init__(self, fld: str, template: str, value: Any):
        self.field, self.template, self.value = fld, template, value
        super().__init__(self.named())

    def named(self, names: Optional[Mapping[str, str]] = None) -> str:
        names = names or {}
        return self.template.format(**{k: names.get(k, k) for k in DEFAULTS}) + f", got {self.value!r}"


def check(blend: Any, stat: Any, per_head: Any, split: Any) -> None:
    """Raise :class:`ResidualError` unless the four values make a residual scorer (``blend`` 0:
    switched off, the pure lookup)."""
    if isinstance(blend, bool) or not isinstance(blend, (int, float)) or not 0.0 <= blend <= 1.0:
        raise ResidualError("blend", "{blend} must be in [0, 1]", blend)
    if stat not in STATS:
        raise ResidualError("stat", "{stat} must be one of " + ", ".join(STATS), stat)
    if not isinstance(per_head, bool) and type(per_head).__name__ != "bool_":  # numpy's bool too
        raise ResidualError("per_head", "{per_head} must be a bool", per_head)
    if split not in SPLITS:
        raise ResidualError("split", "{split} must be one of " + ", ".join(SPLITS), split)
    if split == "scores" and not blend > 0:
        raise ResidualError("split", "{split} 'scores' ranks the residual by attention votes and needs {blend} > 0",
                            split)


def from_legacy(values: Mapping[str, Any], base: Optional[Mapping[str, Any]] = None) -> dict:
    """The block (all four keys) that the old fields ``values`` (any of :data:`LEGACY`'s values;
    None: not given) spell over ``base`` (a block, or None: the defaults). Not checked."""
    out = dict(DEFAULTS if base is None else base)
    for key, old in LEGACY.items():
        if values.get(old) is not None:
            out[key] = values[old]
    return out


def legacy_fields(block: Optional[Mapping[str, Any]]) -> dict:
    """The old top-level spelling of ``block`` (None: the lookup), each field left out at its
    default, as files wrote them before the block existed (a learned scorer's pin has none)."""
    if block is None:
        return {}
    return {LEGACY[k]: block[k] for k in DEFAULTS if block[k] != DEFAULTS[k]}


def convert_document(doc: Mapping[str, Any]) -> dict:
    """A policy document with the old top-level fields (if any) moved into ``"residual"`` (left
    out when the blend is 0). Raises ValueError, worded with the old names, for values the old
    schema refused; and when a document has both spellings."""
    old = {k: doc[k] for k in LEGACY.values() if k in doc}
    if not old:
        return dict(doc)
    if "residual" in doc:
        raise ValueError(f"{', '.join(old)} and residual spell the same setting twice (keep the residual block)")
    out = {k: v for k, v in doc.items() if k not in old}
    block = from_legacy(old)
    blend = block["blend"]
    if isinstance(blend, bool) or not isinstance(blend, (int, float)) or not 0.0 <= blend <= 1.0:
        raise ValueError(f"attention_blend = {blend} is outside [0, 1]")
    if not blend and (block["stat"] != "window" or block["per_head"] or block["split"] != "share"):
        raise ValueError(f"attention_stat = {block['stat']!r} / head_split = {block['per_head']} / residual_split = "
                         f"{block['split']!r} need attention_blend > 0 (the pure lookup reads no statistic)")
    if blend:
        out["residual"] = block
    return out
