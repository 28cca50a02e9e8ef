"""The reference runner on transformers: a per-layer prunable cache that stores logical
positions, an attention function that masks by them, a manual decode loop with xgrammar
constraints and structure tags feeding a KV method. No SGLang imports.

In-process use::

    from sglang_pask.hf import Runner
    r = Runner("models/tiny-random-qwen3", method="pask", budget=0.33, policy=None)
    res = r.generate(request_body, max_new_tokens=128)   # Result: text, tool_calls, kept, tokens

Attributes load lazily so ``pask`` CLI discovery (``hf.commands``) stays light.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Runner": ".runner", "default_groups": ".runner", "Result": ".result",
    "Compression": ".result", "parse_tool_calls": ".result", "PrunableCache": ".cache",
    "Constraints": ".constraints", "grammar_spec": ".constraints", "pask_attention": ".attention",
    "use_pask_attention": ".attention",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
