"""A real server that dies in the middle of ``pask eval``: the run stops with a clear error, the
finished entries stay on disk, and rerunning the same command against a new server resumes.

The resuming server also carries the test kit's own invariant (one server start fewer than a test
of its own): a test body that raises inside ``running_server`` still gets the whole server tree
stopped by PID, and nothing listens on its port any more."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import psutil
import pytest
from conftest import TINY_RANDOM
from sglang_pask.testing import running_server, stop

N = 12  # entries: enough that the crash after 3 leaves some for the resume


def _argv(url: str, out) -> list[str]:
    return [sys.executable, "-m", "sglang_pask.cli", "eval", "--data", f"synthetic:eval:{N}",
            "--backend", "openai", "--base-url", url, "--max-tokens", "24", "--no-progress", "--out", str(out)]


def _crash(proc: subprocess.Popen) -> None:
    """SIGKILL the server's processes by PID (children first), as a crash would end them."""
    import psutil

    tree = psutil.Process(proc.pid).children(recursive=True) + [psutil.Process(proc.pid)]
    for p in tree:
        p.kill()
    psutil.wait_procs(tree, timeout=10)
    stop(proc)


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class _Boom(RuntimeError):
    """Raised inside ``running_server``'s block: the kit must still stop the server."""


def _assert_stopped(pids: list[int], port: int) -> None:
    """The launcher, scheduler and detokenizer are gone (by PID) and the port is closed."""
    assert len(pids) >= 3  # launcher, scheduler, detokenizer
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"still alive: {alive}"
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))  # nothing listens on the port any more


def test_server_dies_mid_run_then_resume(tmp_path):
    out = tmp_path / "run"
    results = out / "results.jsonl"
    with running_server(str(TINY_RANDOM), ["--skip-server-warmup"]) as srv:
        ev = subprocess.Popen(_argv(srv.base_url, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while len(_lines(results)) < 3 and time.monotonic() < deadline and ev.poll() is None:
                time.sleep(0.2)
            assert len(_lines(results)) >= 3, "eval made no progress"
            _crash(srv.proc)  # the server dies mid-run
            _, err = ev.communicate(timeout=120)
        finally:
            if ev.poll() is None:
                ev.kill()
    assert ev.returncode == 3, err
    kept = _lines(results)
    assert 3 <= len(kept) < N
    assert "aborted" in err and "stopped answering" in err and f"{len(kept)}/{N} entries finished" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False

    seen = {}
    with pytest.raises(_Boom):  # leave the server's block by an exception, as a failing test does
        with running_server(str(TINY_RANDOM), ["--skip-server-warmup"]) as srv:
            seen["pids"] = [srv.pid] + [c.pid for c in psutil.Process(srv.pid).children(recursive=True)]
            seen["port"] = srv.port
            r = subprocess.run(_argv(srv.base_url, out), capture_output=True, text=True, timeout=300)
            raise _Boom
    _assert_stopped(seen["pids"], seen["port"])
    assert r.returncode == 0, r.stderr[-2000:]
    done = _lines(results)
    assert len(done) == N and len({d["id"] for d in done}) == N
    assert [d["id"] for d in done[: len(kept)]] == [k["id"] for k in kept]  # finished entries untouched
    assert json.loads((out / "summary.json").read_text())["complete"] is True
