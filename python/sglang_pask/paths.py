"""Checks of the paths a user gives (model folder, policy, request file) before anything heavy
loads: a problem is one line naming the flag, in well under 2 seconds (no torch, no SGLang).

A ``--model`` value that is not a local folder may still be a hub id (``org/name``), which this
project never downloads (these machines reach no model hub): it is left to the loader only when it
looks like one, its first part is not a local folder (``models/typo`` is a path) and the local
Hugging Face cache holds its ``config.json`` (:func:`cached_hub_model`); any other hub id is
refused in one line that says what to pass instead.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _hub_cache() -> str:
    """The Hugging Face hub cache folder, as huggingface_hub resolves it (without importing it)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return os.path.join(home, "hub")


def cached_hub_model(repo_id: str) -> bool:
    """Whether the local hub cache holds a snapshot of ``repo_id`` with a ``config.json``."""
    snapshots = os.path.join(_hub_cache(), "models--" + repo_id.replace("/", "--"), "snapshots")
    try:
        return any(os.path.isfile(os.path.join(snapshots, d, "config.json")) for d in os.listdir(snapshots))
    except OSError:
        return False


def model_dir_error(value: str, flag: str = "--model") -> str | None:
    """None when ``value`` is a model folder (or a hub id the local cache holds), else the
    one-line problem."""
    if os.path.isdir(value):
        if not os.path.isfile(os.path.join(value, "config.json")):
            return f"{flag} {value}: the folder has no config.json (not a model folder)"
        return None
    if os.path.exists(value):
        return f"{flag} {value}: not a folder (a model is a folder with config.json)"
    if _HUB_ID.match(value) and not os.path.isdir(value.split("/", 1)[0]):
        if cached_hub_model(value):
            return None
        return (f"{flag} {value}: not a local model folder, and not in the local Hugging Face cache "
                f"({_hub_cache()}); this machine downloads no model: pass a folder with config.json "
                "(the project's real model: `make real-model`, then models/qwen2.5-coder-0.5b-instruct)")
    return f"{flag} {value}: no such model folder"


def file_error(value: str, flag: str) -> str | None:
    """None when ``value`` is a readable file, else the one-line problem."""
    if os.path.isdir(value):
        return f"{flag} {value}: is a folder, expected a file"
    if not os.path.isfile(value):
        return f"{flag} {value}: no such file"
    if not os.access(value, os.R_OK):
        return f"{flag} {value}: not readable"
    return None


def argv_values(argv: Sequence[str], *flags: str) -> list[str]:
    """Every value given to ``flags`` (an option's name and its aliases) in ``argv``, in argv
    order (``--flag V`` and ``--flag=V``): the last is the one argparse keeps."""
    out = []
    for i, a in enumerate(argv):
        for flag in flags:
            if a == flag and i + 1 < len(argv):
                out.append(argv[i + 1])
            elif a.startswith(flag + "="):
                out.append(a[len(flag) + 1:])
    return out
