"""The progress lines of slow fixtures (``fixture_progress``) reach the terminal past pytest's
capture: a fixture that sets up for longer than the threshold says so while it runs and when it is
ready; a quick one says nothing. Run in a child pytest with a 1 s threshold."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import fixture_progress

HELPERS = Path(fixture_progress.__file__).resolve().parent  # test/: the child imports the hook from there


def test_slow_fixture_reports_progress_and_quick_one_is_silent(tmp_path):
    (tmp_path / "conftest.py").write_text("from fixture_progress import pytest_fixture_setup  # noqa: F401\n")
    (tmp_path / "test_child.py").write_text(
        "import time, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def slow():\n"
        "    print('captured, not shown')\n"
        "    time.sleep(2.6)\n"
        "    return 1\n"
        "@pytest.fixture\n"
        "def quick():\n"
        "    return 2\n"
        "def test_both(slow, quick):\n"
        "    assert slow + quick == 3\n")
    env = {**os.environ, "PASK_TEST_PROGRESS_S": "1", "PYTHONPATH": str(HELPERS)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip().startswith("...")]
    assert len(lines) >= 3, out.stdout
    assert all("fixture slow (scope module, for test_child.py)" in ln for ln in lines), lines
    assert all(re.search(r"setting up, \d+ s$", ln) for ln in lines[:-1]), lines
    assert re.search(r"ready after \d+ s$", lines[-1]), lines
    assert "quick" not in out.stdout and "captured, not shown" not in out.stdout
