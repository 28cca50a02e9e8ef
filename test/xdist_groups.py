"""Marks from the folder and the pytest-xdist groups of the suite (``conftest.py`` imports the hooks).

Marks: every test under a ``server/`` folder is marked ``server``, under ``real_model/``
``real_model`` (:data:`FOLDER_MARKS`; markers a module sets itself still count), so
``pytest -m "not server"`` runs the rest.

``make test`` runs ``pytest -n 2 --dist loadgroup --no-loadscope-reorder``; xdist then sends each
``xdist_group`` to one worker as a whole. Invariants: every test of a module is in one group (a
module fixture -- a module's own server -- is set up once in the run); every module that uses a
session server (:data:`SESSION_SERVERS`: a fixture its tests request, ``item.fixturenames``, or an
``xdist_group`` mark naming it, for a module that looks it up with ``request.getfixturevalue``)
is in that server's group (so it starts once, not once per worker) and under ``server/``; no
module uses two of them. Checked by ``test_xdist_groups.py`` in a child pytest on two workers.

Order: the groups go longest first (the two workers' tails even out), by the seconds that
``make test-durations`` (``--write-durations``) measured into :data:`DURATIONS`; a group it does
not list counts 60 s if marked ``server``, else 0, so a missing or stale file costs balance,
never a test.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

#: folder name -> the mark of every test under such a folder
FOLDER_MARKS = ("server", "real_model")
#: conftest's session-scoped fixtures that start a server
SESSION_SERVERS = ("pask_server", "fc_server")
#: each group's seconds of worker time in a full run: {"seconds": {group: s}, ...how it was made}
DURATIONS = Path(__file__).with_name("durations.json")
UNLISTED_SERVER_SECONDS = 60


def group_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """The measured seconds per group; {} when the file is missing or unreadable."""
    try:
        return {str(g): float(s) for g, s in json.loads(path.read_text(encoding="utf-8"))["seconds"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _module(item) -> str:
    """The module's node id (its path from the rootdir): the name of its own group."""
    return item.nodeid.split("::")[0]


def _folders(item, root: Path) -> tuple[str, ...]:
    try:
        return item.path.relative_to(root).parts[:-1]
    except ValueError:
        return item.path.parts[:-1]


def session_server(module: str, items: list) -> str | None:
    """The session server a module's tests use, or None; one at most."""
    used = {s for item in items for s in SESSION_SERVERS if s in getattr(item, "fixturenames", ())}
    for item in items:
        for mark in item.iter_markers("xdist_group"):
            if mark.args[0] not in SESSION_SERVERS:
                raise pytest.UsageError(f"{module}: xdist_group({mark.args[0]!r}): a module's group is its own "
                                        f"or a session server's ({', '.join(SESSION_SERVERS)})")
            used.add(mark.args[0])
    if len(used) > 1:
        names = ", ".join(s for s in SESSION_SERVERS if s in used)
        raise pytest.UsageError(f"{module}: uses more than one session server ({names}); "
                                "its tests could not share one xdist worker with both")
    return used.pop() if used else None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Mark each test by its folders (:data:`FOLDER_MARKS`); give every test its ``xdist_group``
    (the session server its module uses, else its module); send the groups longest first
    (:data:`DURATIONS`), modules in file order within."""
    modules: dict[str, list] = {}
    for item in items:
        for mark in FOLDER_MARKS:
            if mark in _folders(item, config.rootpath):
                item.add_marker(getattr(pytest.mark, mark))
        modules.setdefault(_module(item), []).append(item)

    group: dict[str, str] = {}
    for module, its in modules.items():
        shared = session_server(module, its)
        if shared and not all(item.get_closest_marker("server") for item in its):
            raise pytest.UsageError(f"{module}: uses the session server {shared} but is not under a server/ "
                                    "folder (`-m \"not server\"` would start it)")
        group[module] = shared or module
        for item in its:
            item.add_marker(pytest.mark.xdist_group(group[module]))

    seconds = group_seconds()

    def weight(item) -> float:
        default = UNLISTED_SERVER_SECONDS if item.get_closest_marker("server") else 0
        return seconds.get(group[_module(item)], default)

    items.sort(key=lambda item: -weight(item))  # stable: file order within a weight


def pytest_addoption(parser):
    parser.addoption("--write-durations", metavar="PATH", default=None,
                     help="merge each xdist group's seconds (setup + call + teardown of its tests) "
                          "into PATH (test/durations.json: `make test-durations`)")


def pytest_configure(config):
    path = config.getoption("--write-durations", None)
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without xdist) writes
        config.pluginmanager.register(DurationWriter(Path(path), config.invocation_params.args), "pask-durations")


class DurationWriter:
    """Sums the seconds of each group's test reports and, at the end, merges them into the file:
    groups this run did not run keep their figure (a ``-k`` run writes a partial one)."""

    def __init__(self, path: Path, args):
        self.path, self.args = path, args
        self.seconds: Counter[str] = Counter()
        self.group_of: dict[str, str] = {}  # without xdist: node id -> group, from the marks

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        for item in items:
            mark = item.get_closest_marker("xdist_group")
            if mark:
                self.group_of[item.nodeid] = mark.args[0]

    def pytest_runtest_logreport(self, report):
        _, at, group = report.nodeid.rpartition("@")  # xdist's loadgroup names the group after @
        if not at or "]" in group:
            group = self.group_of.get(report.nodeid)
        if group:
            self.seconds[group] += report.duration

    def pytest_sessionfinish(self, session):
        if not self.seconds:
            return
        try:
            old = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        merged = {**old.get("seconds", {}), **{g: round(s) for g, s in self.seconds.items()}}
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=session.config.rootpath).stdout.strip()
        doc = {"written_by": "make test-durations (pytest --write-durations)",
               "last_run": {"args": [str(a) for a in self.args], "commit": commit or None,
                            "date": datetime.date.today().isoformat(), "groups": len(self.seconds)},
               "seconds": dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))}
        self.path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
