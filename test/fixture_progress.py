"""Progress for slow fixtures: a fixture whose setup runs longer than :data:`AFTER` seconds (a
server start, a toy calibration) prints a line to the terminal every :data:`EVERY` seconds while
it runs and one when it is ready, past pytest's output capture, so a run never sits silent for
minutes. Imported by ``conftest.py`` (its hook is this module's :func:`pytest_fixture_setup`).

Invariant: the reporting thread is stopped and joined before the hook returns, so only it touches
the capture manager while the fixture sets up (pytest's own capture calls happen around, not
during, fixture setup)."""

from __future__ import annotations

import os
import threading
import time

import pytest

#: seconds of setup after which progress lines start (``PASK_TEST_PROGRESS_S`` overrides)
AFTER = float(os.environ.get("PASK_TEST_PROGRESS_S", "30"))
#: seconds between progress lines
EVERY = AFTER


def _say(config: pytest.Config, text: str) -> None:
    """One line on the terminal, whatever pytest is capturing."""
    reporter = config.pluginmanager.getplugin("terminalreporter")
    capman = config.pluginmanager.getplugin("capturemanager")
    if reporter is None or capman is None:
        return
    with capman.global_and_fixture_disabled():
        reporter.write_line(text)


def _label(fixturedef, request) -> str:
    where = getattr(request, "node", None)
    return f"fixture {fixturedef.argname} (scope {fixturedef.scope}, for {getattr(where, 'nodeid', '?')})"


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    config = request.config
    t0 = time.monotonic()
    done = threading.Event()
    said = []

    def report():
        while not done.wait(EVERY if said else AFTER):
            said.append(1)
            _say(config, f"  ... {_label(fixturedef, request)}: setting up, {time.monotonic() - t0:.0f} s")

    thread = threading.Thread(target=report, name="fixture-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if said:
            _say(config, f"  ... {_label(fixturedef, request)}: ready after {time.monotonic() - t0:.0f} s")
