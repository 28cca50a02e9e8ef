"""Structure tags and segment stamps in SGLang's radix tree (the FULL component of
:mod:`.radix_cache`).

:class:`PaskFullComponent` is SGLang's ``FullComponent`` (the FULL component of the unified radix
cache, selected through ``CacheInitParams.component_registry_override``) plus, in each node's
``component_data[FULL].metadata``:

* ``KEY`` (``"pask_runs"``): run-length structure classes of the tokens the node holds --
  before an insert, ``prepare_for_caching_req`` puts the request's classes of positions
  ``0 .. token_ids_len - 1`` on the insert params (``params.pask_classes``, int64 ``[n]``); a new
  leaf covers the inserted key's last ``len(node.key)`` positions and gets their runs
  (``commit_insert_component_data``, called once per insert on the leaf); a split gives the new
  parent the first ``len(new_parent.key)`` positions' runs and the child the rest
  (``redistribute_on_node_split``);
* ``SEGMENT_KEY`` (``"pask_segment"``): with a serving config in segment mode, the config's
  stamp on the node whose end is the request's segment end (the insert is capped there:
  ``prepare_for_caching_req`` returns the segment end as the length to cache); a match is valid
  only at a node carrying the server's stamp (``create_match_validator``). A split leaves the
  stamp on the child, which still ends where the segment ends.

Invariant: a stamped node's runs cover exactly ``len(node.key)`` tokens, so the runs on the path
root -> node are the classes of the cached prefix (:func:`path_classes`). Runs are
``[[class, count], ...]`` as :func:`..managers.request_tags.encode_runs` writes them.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from sglang.srt.mem_cache.unified_cache.components.full import FullComponent

from sglang_pask.srt.managers.request_tags import decode_runs, encode_runs

KEY = "pask_runs"
SEGMENT_KEY = "pask_segment"


def runs_total(runs: Sequence[Sequence[int]]) -> int:
    return int(sum(n for _, n in runs))


def split_runs(runs: Sequence[Sequence[int]], at: int) -> tuple[list[list[int]], list[list[int]]]:
    """``(first at tokens, the rest)`` of ``runs``; ``0 <= at <= runs_total(runs)``."""
    if not 0 <= at <= runs_total(runs):
        raise ValueError(f"split at {at} outside runs of {runs_total(runs)} tokens")
    left: list[list[int]] = []
    right: list[list[int]] = []
    seen = 0
    for c, n in runs:
        take = min(max(at - seen, 0), n)
        if take:
            left.append([int(c), int(take)])
        if n - take:
            right.append([int(c), int(n - take)])
        seen += n
    return left, right


class PaskFullComponent(FullComponent):
    """FULL, carrying the structure classes of the tokens each node holds (see the module)."""

    def prepare_for_caching_req(self, req, insert_params, token_ids_len, is_finished):
        out = super().prepare_for_caching_req(req, insert_params, token_ids_len, is_finished)
        from sglang_pask.srt.managers.request_tags import tags_of
        from sglang_pask.srt.serving import active_config

        config = active_config()
        insert_params.pask_segment = None
        if config is not None and config.rule.active:
            # Cache the segment only (0: nothing; under full prefill also 0 until the whole
            # prompt is written: .segments). Failing tags give 0: never a wrong share.
            from sglang_pask.srt.managers.segments import segment_ready

            try:
                cap = int(tags_of(req).segment_end)
                if config.rule.segment_prefill == "full" and not segment_ready(req, config, int(token_ids_len)):
                    cap = 0
            except Exception:
                cap = 0
            insert_params.pask_segment = (cap, node_stamp(config))
            out = cap if out is None else min(out, cap)
        try:
            insert_params.pask_classes = tags_of(req).classes(req, int(token_ids_len))
        except Exception:  # tags must never break caching: the node stays untagged
            insert_params.pask_classes = None
        return out

    def commit_insert_component_data(self, node, is_new_leaf, params, result, cache_actions):
        super().commit_insert_component_data(node, is_new_leaf, params, result, cache_actions)
        if not is_new_leaf:
            return
        meta = node.component_data[self.component_type].metadata
        end = len(params.key)
        segment = getattr(params, "pask_segment", None)
        if segment is not None and segment[0] == end:
            meta[SEGMENT_KEY] = segment[1]
        classes = getattr(params, "pask_classes", None)
        if classes is None:
            return
        start = end - len(node.key)
        if start >= 0 and len(classes) >= end:
            meta[KEY] = encode_runs(classes[start:end])

    def create_match_validator(self, match_device_only: bool = False):
        base = super().create_match_validator(match_device_only)
        from sglang_pask.srt.serving import active_config

        config = active_config()
        if config is None or not config.rule.active:
            return base
        # full prefill: a whole block (read through views, .segment_views) or one demoted to its
        # compressed form (.radix_cache.PaskRadixCache.demote: prefilled against, as compressed)
        stamps = {node_stamp(config), config.stamp}
        return lambda node: base(node) and node.component_data[self.component_type].metadata.get(SEGMENT_KEY) in stamps

    def redistribute_on_node_split(self, new_parent, child):
        super().redistribute_on_node_split(new_parent, child)
        meta = child.component_data[self.component_type].metadata
        runs = meta.get(KEY)
        if runs is not None:
            left, right = split_runs(runs, len(new_parent.key))
            new_parent.component_data[self.component_type].metadata[KEY] = left
            meta[KEY] = right


def node_stamp(config) -> str:
    """What a segment node is stamped with: the config's :attr:`~..serving.ServingConfig.stamp`;
    under ``--pask-segment-prefill full`` with ``/full`` after it -- the node holds the whole
    segment, uncut, which only requests reading it through a view (:mod:`.segment_views`) match."""
    return config.stamp + ("/full" if config.rule.segment_prefill == "full" else "")


def path_classes(node, component_type) -> Optional[np.ndarray]:
    """int64 classes of the prefix root -> ``node`` (None when a node on the path is untagged)."""
    parts = []
    while node is not None and node.parent is not None:  # the root holds no tokens
        runs = node.component_data[component_type].metadata.get(KEY)
        if runs is None or runs_total(runs) != len(node.key):
            return None
        parts.append(decode_runs(runs))
        node = node.parent
    return np.concatenate(parts[::-1]) if parts else np.zeros(0, np.int64)
