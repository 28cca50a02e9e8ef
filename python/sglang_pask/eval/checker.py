"""Scoring with BFCL's own ``ast_checker`` (bfcl-eval 2026.3.23), not a re-implementation.

Importing ``ast_checker`` normally pulls in every model SDK through
``bfcl_eval.constants.model_config``. The checker only reads
``MODEL_CONFIG_MAPPING[model_name].underscore_to_dot`` (and only for dotted ground-truth names),
so before the first import we put a small stand-in module in ``sys.modules`` whose mapping
answers ``underscore_to_dot=False`` for every model: names are compared exactly, and the harness
restores dotted names itself (bfcl_tools.restore_names). ``BFCL_PROJECT_ROOT`` is pointed at a
temp dir (unless set) so no bfcl-eval import can write into site-packages.

Dispatch is BFCL's: a category containing ``parallel`` uses the order-free parallel checker,
else one containing ``multiple`` the multiple checker, else the simple one (exactly one call).
So synthetic categories are named ``synthetic_simple`` ... ``synthetic_parallel_multiple``.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import threading
import types
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Verdict", "check", "is_call_list", "MODEL_NAME"]

MODEL_NAME = "sglang_pask"  # passed to the checker; the stand-in config never maps "_" -> "."
_MC = "bfcl_eval.constants.model_config"


@dataclass(frozen=True)
class Verdict:
    valid: bool
    error_type: str  # "" when valid
    error: str = ""  # short human-readable detail


@dataclass
class _Cfg:
    underscore_to_dot: bool = False


class _AnyModel(dict):
    def __missing__(self, key):
        return _Cfg(False)


_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _load():
    with _LOCK:  # harness workers may score concurrently before the first import finished
        return _import_checker()


def standardize_string(text: str) -> str:
    """BFCL's own string rule (``ast_checker.standardize_string``: no spaces or ,./-_*^, lower
    case), loaded the same way as the checker."""
    _load()
    from bfcl_eval.eval_checker.ast_eval.ast_checker import standardize_string as bfcl_standardize

    return bfcl_standardize(text)


def _import_checker():
    os.environ.setdefault("BFCL_PROJECT_ROOT", os.path.join(tempfile.gettempdir(), "pask_bfcl_root"))
    os.makedirs(os.environ["BFCL_PROJECT_ROOT"], exist_ok=True)
    if _MC not in sys.modules:
        stub = types.ModuleType(_MC)
        stub.MODEL_CONFIG_MAPPING = _AnyModel()
        stub.ModelConfig = _Cfg
        sys.modules[_MC] = stub
    elif not isinstance(sys.modules[_MC].MODEL_CONFIG_MAPPING, _AnyModel) and (
        MODEL_NAME not in sys.modules[_MC].MODEL_CONFIG_MAPPING
    ):
        raise RuntimeError(
            f"the real {_MC} is already imported and does not know {MODEL_NAME!r}; "
            "import sglang_pask.eval.checker before other bfcl_eval modules"
        )
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return ast_checker, Language.PYTHON


def is_call_list(calls: object) -> bool:
    """The shape the checker accepts: a list of one-key dicts whose value is a dict of args."""
    return isinstance(calls, list) and all(
        isinstance(c, dict) and len(c) == 1 and isinstance(next(iter(c.values())), dict) for c in calls
    )


def _short(err: object, limit: int = 300) -> str:
    s = err[0] if isinstance(err, list) and err else err
    s = str(s) if s else ""
    return s if len(s) <= limit else s[: limit - 3] + "..."


def check(functions: list[dict], calls: list[dict], ground_truth: list[dict], category: str) -> Verdict:
    """Score decoded calls ``[{bfcl_name: {arg: value}}]`` against ``ground_truth`` with BFCL's checker.

    ``functions`` are the entry's raw BFCL docs (no hint). Inputs are copied, never changed. A
    checker exception (it happens on some malformed ground truth) is an invalid verdict with
    error type ``checker:exception``, never raised.
    """
    if not is_call_list(calls):
        return Verdict(False, "ast_decoder:decoder_wrong_output_format", "not a list of {name: {args}}")
    ast_checker, python = _load()
    try:
        out = ast_checker(
            copy.deepcopy(functions), copy.deepcopy(calls), copy.deepcopy(ground_truth), python, category, MODEL_NAME
        )
    except Exception as e:  # noqa: BLE001 - the checker's own failures become verdicts
        return Verdict(False, "checker:exception", f"{type(e).__name__}: {e}")
    if out.get("valid"):
        return Verdict(True, "")
    return Verdict(False, str(out.get("error_type", "checker:unknown")), _short(out.get("error")))
