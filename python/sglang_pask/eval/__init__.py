"""Evaluation: BFCL's 8 AST categories and a synthetic set, scored by BFCL's own checker.

This module is the backend registry: name -> "module:Class" of a :class:`base.Backend`,
imported only when chosen. ``pask eval --backend`` takes its choices from :data:`BACKENDS`.
"""

from __future__ import annotations

import importlib

BACKENDS: dict[str, str] = {
    "openai": "sglang_pask.eval.openai_backend:OpenAIBackend",
    "hf": "sglang_pask.eval.hf_backend:HFBackend",
}

def backend_class(name: str):
    """The Backend class registered as ``name`` (raises base.BackendUnavailable if absent)."""
    from sglang_pask.eval.base import BackendUnavailable

    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_backend(name: str, args):
    """Build the backend ``name`` from ``pask eval`` arguments."""
    return backend_class(name).from_args(args)
