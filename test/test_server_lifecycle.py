"""The test server helper stops the whole server tree by PID, also when the test body fails."""

from __future__ import annotations

import socket

import psutil
import pytest
from conftest import TINY_RANDOM
from sglang_pask.testing import ServerStartError, running_server


def test_stopped_by_pid_on_failure():
    seen = {}
    with pytest.raises(RuntimeError, match="boom"):
        with running_server(str(TINY_RANDOM), ["--skip-server-warmup"]) as srv:
            seen["pids"] = [srv.pid] + [c.pid for c in psutil.Process(srv.pid).children(recursive=True)]
            seen["port"] = srv.port
            raise RuntimeError("boom")
    assert len(seen["pids"]) >= 3  # launcher, scheduler, detokenizer
    alive = [p for p in seen["pids"] if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"still alive: {alive}"
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", seen["port"]))  # nothing listens on the port any more


def test_start_failure_reports_log():
    with pytest.raises(ServerStartError, match="server exited"):
        with running_server(str(TINY_RANDOM), ["--no-such-flag"]):
            pass
