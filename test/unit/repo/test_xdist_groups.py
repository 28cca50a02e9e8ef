"""The suite's marks and xdist groups (``xdist_groups.py``), in a child pytest on two workers: a
test under ``server/`` is marked ``server``, under ``real_model/`` ``real_model``; every module that
uses a session server -- a fixture its tests request, or an ``xdist_group`` mark naming it for a
``request.getfixturevalue`` lookup -- runs on the worker that set it up, so each session server
and each module fixture is set up once in the run; ``--write-durations`` records every group's
seconds; a module using two session servers, or one outside ``server/``, is refused.
The child's session servers are stand-ins that only record where they were set up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import xdist_groups
from xdist_groups import SESSION_SERVERS

HELPERS = Path(xdist_groups.__file__).resolve().parent  # test/: the child imports the hooks from there
A, B = SESSION_SERVERS

CONFTEST = '''
import os
import pytest
from xdist_groups import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa: F401

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
    "server/test_arg.py": "".join(f"def test_{i}({A}):\n    pass\n" for i in range(3)),
    "server/test_lookup.py": (f"import pytest\npytestmark = pytest.mark.xdist_group('{A}')\n"
                              + "".join(f"def test_{i}(request):\n    request.getfixturevalue('{A}')\n"
                                        for i in range(3))),
    "server/test_other.py": "".join(f"def test_{i}({B}):\n    pass\n" for i in range(2)),
    "unit/test_module.py": ("import pytest\nfrom conftest import _record\n@pytest.fixture(scope='module')\n"
                            "def mod():\n    _record('module')\n"
                            + "".join(f"def test_{i}(mod):\n    pass\n" for i in range(4))),
    **{f"unit/test_plain_{k}.py": "".join(f"def test_{i}():\n    pass\n" for i in range(3)) for k in range(4)},
    "real_model/test_real.py": "".join(f"def test_{i}():\n    pass\n" for i in range(2)),
}


def _write(tmp_path: Path, modules: dict[str, str]) -> None:
    for name, text in modules.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)


def _child(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Counter]:
    (tmp_path / "conftest.py").write_text(CONFTEST.format(a=A, b=B))
    log = tmp_path / "setups.txt"
    env = {**os.environ, "PYTHONPATH": str(HELPERS), "SETUP_LOG": str(log)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    setups = Counter(line.split()[0] for line in log.read_text().splitlines()) if log.exists() else Counter()
    return r, setups


def test_each_session_server_and_module_fixture_is_set_up_once_on_two_workers(tmp_path):
    _write(tmp_path, MODULES)
    out = tmp_path / "durations.json"
    out.write_text(json.dumps({"seconds": {"gone.py": 7}}))
    r, setups = _child(tmp_path, "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder",
                       "--write-durations", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "26 passed" in r.stdout, r.stdout
    assert setups == Counter({A: 1, B: 1, "module": 1}), setups  # per worker, they would be 2 each
    seconds = json.loads(out.read_text())["seconds"]  # every group measured; an old one kept
    assert set(seconds) == {A, B, "gone.py", "unit/test_module.py", "real_model/test_real.py",
                            *(f"unit/test_plain_{k}.py" for k in range(4))}, seconds


def test_server_mark_and_two_servers_refused(tmp_path):
    _write(tmp_path, MODULES)
    r, _ = _child(tmp_path, "-m", "not server", "--collect-only")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "18/26 tests collected (8 deselected)" in r.stdout, r.stdout  # the three under server/
    r, _ = _child(tmp_path, "-m", "real_model", "--collect-only")
    assert "2/26 tests collected (24 deselected)" in r.stdout, r.stdout

    _write(tmp_path, {"server/test_both.py": f"def test_x({A}, {B}):\n    pass\n"})
    r, _ = _child(tmp_path, "--collect-only")
    assert r.returncode != 0
    assert f"server/test_both.py: uses more than one session server ({A}, {B})" in r.stdout + r.stderr, r.stdout

    (tmp_path / "server/test_both.py").unlink()
    _write(tmp_path, {"unit/test_misplaced.py": f"def test_x({A}):\n    pass\n"})
    r, _ = _child(tmp_path, "--collect-only")
    assert r.returncode != 0
    assert f"unit/test_misplaced.py: uses the session server {A} but is not under a server/" in r.stdout + r.stderr
