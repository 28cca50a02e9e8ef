"""Full KV: the reference every method is measured against."""

from __future__ import annotations

from dataclasses import dataclass

from sglang_pask.methods.base import CacheView, KVMethod, Selection


@dataclass(frozen=True)
class Full(KVMethod):
    """Keeps every position (no paper: the uncompressed baseline). Its budget is 1.0 by
    definition; asking for less is an error rather than a silently ignored number."""

    name = "full"

    budget: float = 1.0

    def __post_init__(self):
        if self.budget != 1.0:
            raise ValueError(f"full keeps every token: its budget is 1.0, got {self.budget}")
        super().__post_init__()

    def select(self, view: CacheView) -> Selection:
        return Selection([r.copy() for r in view.retained], {"method": self.name,
                                                             "allocation": view.held().tolist()})
