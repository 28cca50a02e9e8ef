"""The ``server`` mark and the pytest-xdist groups of the suite (``conftest.py`` imports its hook).

``make test`` runs ``pytest -n 2 --dist loadgroup --no-loadscope-reorder``; xdist then sends each
``xdist_group`` to one worker as a whole. Invariants: every test of a module is in one group (a
module fixture -- a module's own server -- is set up once in the run); every module that names a
session server (:data:`SESSION_SERVERS`, as a fixture argument or through
``request.getfixturevalue``) is in that server's group (so it starts once, not once per worker);
no module names two of them. Checked by ``test_xdist_groups.py`` in a child pytest on two workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: conftest's session-scoped fixtures that start a server
SESSION_SERVERS = ("pask_server", "fc_server")
#: a module whose source holds one of these (or names a session server) starts a real SGLang server
SERVER_WORDS = ("running_server", "sglang_pask.launch_server")
#: seconds of worker time per group in a fresh-clone CI run (f1fd4ec, before byte-compiling): used
#: only to send the long groups first (longest first: the two workers' tails even out); a group not
#: listed counts by its mark (a server module 60, any other 0), so a wrong or stale figure costs
#: balance, never a test
GROUP_SECONDS = {"fc_server": 564, "test_srt_radix_server.py": 292, "pask_server": 193,
                 "test_server_lifecycle.py": 169, "test_eval_server_dies.py": 150,
                 "test_realmodel_live.py": 121, "test_calibrate.py": 110, "test_server_dp.py": 107}


def session_server(path: Path) -> str | None:
    """The session server a test module uses (named in its source), or None; one at most."""
    text = path.read_text(encoding="utf-8")
    used = [s for s in SESSION_SERVERS if s in text]
    if len(used) > 1:
        raise pytest.UsageError(f"{path.name}: uses more than one session server ({', '.join(used)}); "
                                "its tests could not share one xdist worker with both")
    return used[0] if used else None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Mark ``server`` every test of a module whose source starts a server (``running_server``,
    ``launch_server``) or names a session server, so ``pytest -m "not server"`` runs the rest; give
    every test its ``xdist_group`` (its module's file name, or the session server its module
    names); send the groups longest first (:data:`GROUP_SECONDS`), modules in file order within."""
    modules: dict[Path, tuple[bool, str]] = {}  # path -> (starts a server, xdist group)
    for item in items:
        if item.path not in modules:
            shared = session_server(item.path)
            starts = shared is not None or any(w in item.path.read_text(encoding="utf-8") for w in SERVER_WORDS)
            modules[item.path] = (starts, shared or item.path.name)
        starts, group = modules[item.path]
        if starts:
            item.add_marker(pytest.mark.server)
        item.add_marker(pytest.mark.xdist_group(group))

    def weight(item) -> float:
        starts, group = modules[item.path]
        return GROUP_SECONDS.get(group, 60 if starts else 0)

    items.sort(key=lambda item: -weight(item))  # stable: file order within a weight
