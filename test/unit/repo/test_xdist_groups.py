"""The suite's xdist groups (``xdist_groups.py``), in a child pytest on two workers: every module
that names a session server -- as a fixture argument or through ``request.getfixturevalue`` -- runs
on the worker that set it up, so each session server and each module fixture is set up once in the
run; such modules carry the ``server`` mark; a module naming two session servers is refused.
The child's session servers are stand-ins that only record where they were set up."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import xdist_groups
from xdist_groups import SESSION_SERVERS

HELPERS = Path(xdist_groups.__file__).resolve().parent  # test/: the child imports the hook from there
A, B = SESSION_SERVERS  # the names, not spelled here: this module must not join a group itself

CONFTEST = '''
import os
import pytest
from xdist_groups import pytest_collection_modifyitems  # noqa: F401

def _record(name):
    with open(os.environ["SETUP_LOG"], "a") as f:
        f.write(f"{{name}} {{os.environ.get('PYTEST_XDIST_WORKER', 'main')}}\\n")

@pytest.fixture(scope="session")
def {a}():
    _record("{a}")

@pytest.fixture(scope="session")
def {b}():
    _record("{b}")
'''

MODULES = {
    "test_arg.py": "".join(f"def test_{i}({A}):\n    pass\n" for i in range(3)),
    "test_lookup.py": "".join(f"def test_{i}(request):\n    request.getfixturevalue('{A}')\n" for i in range(3)),
    "test_other.py": "".join(f"def test_{i}({B}):\n    pass\n" for i in range(2)),
    "test_module.py": ("import pytest\nfrom conftest import _record\n@pytest.fixture(scope='module')\n"
                       "def mod():\n    _record('module')\n"
                       + "".join(f"def test_{i}(mod):\n    pass\n" for i in range(4))),
    **{f"test_plain_{k}.py": "".join(f"def test_{i}():\n    pass\n" for i in range(3)) for k in range(4)},
}


def _child(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Counter]:
    (tmp_path / "conftest.py").write_text(CONFTEST.format(a=A, b=B))
    log = tmp_path / "setups.txt"
    env = {**os.environ, "PYTHONPATH": str(HELPERS), "SETUP_LOG": str(log)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    setups = Counter(line.split()[0] for line in log.read_text().splitlines()) if log.exists() else Counter()
    return r, setups


def test_each_session_server_and_module_fixture_is_set_up_once_on_two_workers(tmp_path):
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    r, setups = _child(tmp_path, "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "24 passed" in r.stdout, r.stdout
    assert setups == Counter({A: 1, B: 1, "module": 1}), setups  # per worker, they would be 2 each


def test_server_mark_and_two_servers_refused(tmp_path):
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    r, _ = _child(tmp_path, "-m", "not server", "--collect-only")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "16/24 tests collected (8 deselected)" in r.stdout, r.stdout  # test_arg, test_lookup, test_other

    (tmp_path / "test_both.py").write_text(f"def test_x({A}, {B}):\n    pass\n")
    r, _ = _child(tmp_path, "--collect-only")
    assert r.returncode != 0
    assert f"test_both.py: uses more than one session server ({A}, {B})" in r.stdout + r.stderr, r.stdout + r.stderr
