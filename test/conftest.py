"""Shared fixtures. The live server is session-scoped: one real SGLang server (tiny random model,
the plugin with the minimal policy) serves every test that asks for ``pask_server``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY_RANDOM = ROOT / "models" / "tiny-random-qwen3"
MINIMAL_POLICY = ROOT / "policies" / "minimal.json"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tiny_random_model() -> Path:
    return TINY_RANDOM


@pytest.fixture(scope="session")
def pask_server():
    from sglang_pask.testing import running_server

    with running_server(str(TINY_RANDOM), ["--pask-policy", str(MINIMAL_POLICY)]) as srv:
        yield srv


def run_python(*args: str, env: dict | None = None, timeout: float = 120):
    """Run the venv's python in a fresh interpreter (so the .pth start-up hook applies)."""
    import subprocess

    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, cwd=ROOT,
    )
