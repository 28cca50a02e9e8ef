"""sglang_pask: parser-aware, structure-conditioned KV persistence for structured generation."""

# The Python API, imported on first use so ``import sglang_pask`` stays light (`pask` uses it):
# generate, score, gold_nll, gold_kl, load_runner (sglang_pask.eval.api); bootstrap_ci, paired_bootstrap (eval.stats).

__version__ = "0.1.0"

_LAZY = {
    "generate": "sglang_pask.eval.api",
    "score": "sglang_pask.eval.api",
    "gold_nll": "sglang_pask.eval.api",
    "gold_kl": "sglang_pask.eval.api",
    "load_runner": "sglang_pask.eval.api",
    "bootstrap_ci": "sglang_pask.eval.stats",
    "paired_bootstrap": "sglang_pask.eval.stats",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sglang_pask' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
