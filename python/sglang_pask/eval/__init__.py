"""Evaluation: BFCL's 8 AST categories and a synthetic set, scored by BFCL's own checker.

This module is the backend registry: name -> "module:Class" of a :class:`base.Backend`,
imported only when chosen. ``pask eval --backend`` takes its choices from :data:`BACKENDS`.
The ``hf`` backend (the in-process reference runner) is registered ahead of its module: until
``sglang_pask/eval/hf_backend.py`` defines ``HFBackend``, choosing it fails with a clear message.
"""

from __future__ import annotations

import importlib

BACKENDS: dict[str, str] = {
    "openai": "sglang_pask.eval.openai_backend:OpenAIBackend",
    "hf": "sglang_pask.eval.hf_backend:HFBackend",
}

_NOT_YET = {
    "hf": "the hf backend (in-process reference runner, sglang_pask.hf) is not available yet; "
    "use --backend openai against `make serve`",
}


def backend_class(name: str):
    """The Backend class registered as ``name`` (raises base.BackendUnavailable if absent)."""
    from sglang_pask.eval.base import BackendUnavailable

    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}")
    module, _, cls = BACKENDS[name].partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module and name in _NOT_YET:
            raise BackendUnavailable(_NOT_YET[name]) from None
        raise
    return getattr(mod, cls)


def make_backend(name: str, args):
    """Build the backend ``name`` from ``pask eval`` arguments."""
    return backend_class(name).from_args(args)
