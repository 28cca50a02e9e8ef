"""Shared fixtures. The live server is session-scoped: one real SGLang server (tiny random model,
the plugin with the default prior policy) serves every test that asks for ``pask_server``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from fixture_progress import pytest_fixture_setup  # noqa: F401  (a hook: progress for slow fixtures)

ROOT = Path(__file__).resolve().parent.parent
TINY_RANDOM = ROOT / "models" / "tiny-random-qwen3"
DEFAULT_POLICY = ROOT / "policies" / "tiny-random-qwen3.prior.json"
TINY_FC = ROOT / "models" / "pask-tiny-fc"
#: every session server sleeps when idle: an idle SGLang scheduler otherwise spins a whole core
#: for the rest of the session (on 2 cores, half the machine)
SLEEP = ["--sleep-on-idle"]


_SERVER_WORDS = ("running_server", "sglang_pask.launch_server", "pask_server", "fc_server")


#: session-scoped fixtures that start a server: every module that names one (as a fixture argument
#: or through ``request.getfixturevalue``) runs on the same xdist worker
_SESSION_SERVERS = ("pask_server", "fc_server")
#: seconds of worker time per xdist group in a fresh-clone CI run (f1fd4ec, before byte-compiling):
#: used only to send the long groups first (longest first: the two workers' tails even out); a group
#: not listed counts by its marker (a server module 60, any other 0), so a wrong or stale figure
#: costs balance, never a test
_GROUP_SECONDS = {"fc_server": 564, "test_srt_radix_server.py": 292, "pask_server": 193,
                  "test_server_lifecycle.py": 169, "test_eval_server_dies.py": 150,
                  "test_realmodel_live.py": 121, "test_calibrate.py": 110, "test_server_dp.py": 107}


def _session_server(path: Path) -> str | None:
    """The session server a test module uses (named in its source), or None; one at most."""
    text = path.read_text(encoding="utf-8")
    used = [s for s in _SESSION_SERVERS if s in text]
    if len(used) > 1:
        raise pytest.UsageError(f"{path.name}: uses more than one session server ({', '.join(used)}); "
                                "its tests could not share one xdist worker with both")
    return used[0] if used else None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Mark ``server`` every test that starts a real SGLang server (or uses a shared one), so
    ``pytest -m "not server"`` runs the rest: any test of a module whose source starts one
    (``running_server``, ``launch_server``) or names a session server.

    Under pytest-xdist (``make test`` runs ``-n 2 --dist loadgroup``) every test gets an
    ``xdist_group``: its module (module-scoped fixtures, a module's server, are set up once), or,
    for the modules that share a session server, that server's name (so each session server
    starts once in the whole run, not once per worker). Groups are sent longest first
    (:data:`_GROUP_SECONDS`), modules in file order within a group."""
    modules: dict[Path, tuple[bool, str]] = {}  # path -> (starts a server, xdist group)
    for item in items:
        if item.path not in modules:
            shared = _session_server(item.path)
            starts = shared is not None or any(w in item.path.read_text(encoding="utf-8") for w in _SERVER_WORDS)
            modules[item.path] = (starts, shared or item.path.name)
        starts, group = modules[item.path]
        if starts:
            item.add_marker(pytest.mark.server)
        item.add_marker(pytest.mark.xdist_group(group))

    def weight(item) -> float:
        starts, group = modules[item.path]
        return _GROUP_SECONDS.get(group, 60 if starts else 0)

    items.sort(key=lambda item: -weight(item))  # stable: file order within a weight


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
