"""Shared fixtures. The live server is session-scoped: one real SGLang server (tiny random model,
the plugin with the default prior policy) serves every test that asks for ``pask_server``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from fixture_progress import pytest_fixture_setup  # noqa: F401  (a hook: progress for slow fixtures)
from xdist_groups import (  # noqa: F401  (hooks: marks from the folder, xdist groups, durations.json)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
)

ROOT = Path(__file__).resolve().parent.parent
TINY_RANDOM = ROOT / "models" / "tiny-random-qwen3"
DEFAULT_POLICY = ROOT / "policies" / "tiny-random-qwen3.prior.json"
TINY_FC = ROOT / "models" / "pask-tiny-fc"
#: every session server sleeps when idle: an idle SGLang scheduler otherwise spins a whole core
#: for the rest of the session (on 2 cores, half the machine)
SLEEP = ["--sleep-on-idle"]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tiny_random_model() -> Path:
    return TINY_RANDOM


@pytest.fixture(scope="session")
def pask_server(tmp_path_factory):
    """The live server; ``srv.tag_log`` is the folder its ``--pask-tag-log`` writes to."""
    from sglang_pask.testing import running_server

    tag_log = tmp_path_factory.mktemp("tag-log")
    args = ["--pask-policy", str(DEFAULT_POLICY), "--pask-tag-log", str(tag_log), *SLEEP]
    with running_server(str(TINY_RANDOM), args) as srv:
        srv.tag_log = str(tag_log)
        yield srv


@pytest.fixture(scope="session")
def fc_server():
    """A stock server of the trained tiny model, as ``make serve`` starts it (no policy; the test
    kit's default flags: ``--max-total-tokens 65536``, the qwen tool parser), shared by every
    module that only needs one to answer (README examples, the model's calls, stock SGLang)."""
    from sglang_pask.testing import running_server

    with running_server(str(TINY_FC), ["--skip-server-warmup", *SLEEP]) as srv:
        yield srv


@pytest.fixture(scope="session")
def no_whitespace_bias(tiny_random_model) -> dict[str, int]:
    """logit_bias banning whitespace-only tokens. SGLang compiles tool-call structural tags with
    xgrammar's default any_whitespace=True (--constrained-json-disable-any-whitespace does not
    reach them), and a random model then emits whitespace inside the arguments until max_tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_random_model))
    ids = [i for i in range(len(tok)) if (t := tok.decode([i])) and not t.strip()]
    assert ids
    return {str(i): -100 for i in ids}




def run_python(*args: str, env: dict | None = None, timeout: float = 120):
    """Run the venv's python in a fresh interpreter (so the .pth start-up hook applies)."""
    import subprocess

    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, cwd=ROOT,
    )


REAL_MODEL = ROOT / "models" / "qwen2.5-coder-0.5b-instruct"


def pytest_runtest_setup(item):
    """A ``real_model`` test skips, in one line naming the make target, until the folder is built."""
    if item.get_closest_marker("real_model"):
        from sglang_pask.realmodel.folder import complete

        if not complete(REAL_MODEL):
            pytest.skip("needs models/qwen2.5-coder-0.5b-instruct: run `make real-model`")
